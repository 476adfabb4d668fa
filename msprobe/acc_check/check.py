"""One acc_check run over a dump: select the APIs, check the inputs, replay each API with the backend of the dump's
framework (PyTorch spec §5, MindSpore spec §4), append its rows; resumable."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import shutil
from dataclasses import dataclass

from msprobe.acc_check.common import ERROR, InputError, decode_numbers
from msprobe.acc_check.framework import forward_count
from msprobe.acc_check.guard import default_budget, format_size, refusal, tensor_file_bytes
from msprobe.acc_check.registry import MINDSPORE, framework_for
from msprobe.acc_check.results import new_files, resume_files
from msprobe.acc_check.select import CheckOptions, filter_apis, load_config
from msprobe.dump.paths import check_input_file, prepare_output_dir, safe_tensor_path, tensor_dir_of
from msprobe.dump.reader import load_json
from msprobe.errors import DumpFormatError, MsprobeError, os_error_text
from msprobe.io import write_text
from msprobe.log import progress
from msprobe.scale.stamp import claim_stamp
from msprobe.table.safety import first_formula


@dataclass
class Summary:
    device: str
    supported: int = 0     # APIs of this run that acc_check replays
    total: int = 0         # forward API entries of the dump (of the share, for a multi_acc_check worker)
    checked: int = 0       # APIs run in this invocation
    resumed: int = 0       # APIs already recorded in a resumed CSV
    passed: int = 0
    warned: int = 0        # worst status warning
    failed: int = 0        # worst status error
    skipped: int = 0
    filtered: int = 0      # APIs dropped by -f/--filter_api
    result_path: str = ""
    details_path: str = ""
    framework: str = ""
    benchmark: str = ""


def load_api_dump(path: str) -> tuple:
    """(path, content, API names in dump order) of an L1/mix dump.json; a clear error for anything else. The names
    are those the dump's backend writes rows for (PyTorch: every forward API; MindSpore: the checkable ones)."""
    path = check_input_file(path, "api_info file")
    content = load_json(path, "api_info file")
    if not isinstance(content, dict) or not isinstance(content.get("data"), dict):
        raise DumpFormatError(f"{path} is not a msprobe dump.json: it needs an object 'data'.")
    content["data"] = decode_numbers(content["data"])     # the reader's NaN/Infinity sentinels become floats
    backend = framework_for(content, path)
    names = backend.api_names(content["data"])
    bad = first_formula(names)
    if bad is not None:       # the names are the first cell of every row of the result and details CSVs
        raise DumpFormatError(f"{path}: api name {bad!r} contains special characters: it could run as a "
                              "spreadsheet formula in the result CSV; nothing was written.")
    if not forward_count(content["data"]):
        raise DumpFormatError(f"{path} holds no API entries (level {content.get('level')!r}); acc_check needs an "
                              "L1 or mix dump.")
    if not names:
        raise DumpFormatError(f"{path} holds no API that acc_check checks for {backend.framework} (Mint.*, "
                              "MintFunctional.*, the Tensor methods of msprobe/data/acc_check_mindspore_apis.yaml and "
                              "Functional.flash_attention_score); nothing to do.")
    return path, content, names


def tensor_directory(path: str, content: dict) -> str:
    """Where the tensor files of a real-data dump are read from (dump_tensor_data beside dump.json, or a recorded
    dump_data_dir inside the dump folder: paths.tensor_dir_of)."""
    return tensor_dir_of(path, content.get("dump_data_dir"))


@dataclass
class PreparedDump:
    """A dump that acc_check can run on, with the options of the run (the -config lists included)."""

    path: str
    content: dict
    names: list            # the APIs the backend writes rows for, in dump order
    backend: object
    real_data: bool
    options: CheckOptions


def open_dump(api_info: str, options: CheckOptions | None = None, config_path: str = "",
              expected_framework: str = "") -> PreparedDump:
    """Every check that can refuse a run before a device is used or a file written: the dump, the framework named
    by the 1.x form (`expected_framework`, from `msprobe -f pytorch run_ut`), the options that do not apply to the
    dump's framework, the framework import, the -config file. acc_check and the multi_acc_check driver both
    start here."""
    options = options or CheckOptions()
    path, content, names = load_api_dump(api_info)
    backend = framework_for(content, path)
    if expected_framework and expected_framework.lower() != backend.framework.lower():
        raise MsprobeError(f"-f {expected_framework} was given (1.x form) but {path} is a {backend.framework} dump; "
                           f"use -f {backend.framework.lower()} or the form without -f.")
    real_data = backend.real_data(content)
    backend.check(options)                  # the framework is imported here
    if config_path:
        lists, error_data_path = load_config(config_path, backend.known_api_name, backend.framework)
        options = dataclasses.replace(options, lists=lists, error_data_path=error_data_path)
    return PreparedDump(path, content, names, backend, real_data, options)


def run_acc_check(api_info: str, output_dir: str, csv_path: str = "", save_error_data: bool = False,
                  logger=None, *, subset=None, suffix: str = "", stamp: str = "", show_progress: bool = True,
                  options: CheckOptions | None = None, config_path: str = "", expected_framework: str = ""
                  ) -> Summary:
    """Check the APIs of a dump (only those of `subset`, in dump order, when given: multi_acc_check gives each
    worker its split) and append their rows to a new pair of result files
    (accuracy_checking_result_<stamp><suffix>.csv) or to the interrupted pair `csv_path`. Every check that can
    refuse the run (open_dump, tensor files, resume files) happens before anything is written."""
    dump = open_dump(api_info, options, config_path, expected_framework)
    budget = dump.options.memory_budget or default_budget()
    path, content, all_names, backend, real_data, options = (dump.path, dump.content, dump.names, dump.backend,
                                                              dump.real_data, dump.options)
    data = content["data"]
    device = backend.prepare(options)       # the device options applied
    wanted = None if subset is None else set(subset)
    names = all_names if wanted is None else [n for n in all_names if n in wanted]
    total = forward_count(data) if subset is None else len(names)
    kept = filter_apis(data, names) if options.filter_api else names
    tensor_dir = tensor_directory(path, content) if real_data else None
    if real_data:
        check_tensor_files(backend.needed_files(data, kept), tensor_dir)
    summary = Summary(device=device, total=total, supported=sum(1 for n in kept if backend.supported(n)),
                      filtered=len(names) - len(kept), framework=backend.framework, benchmark=backend.benchmark)
    if csv_path:
        files, done, stamp = resume_files(csv_path, all_names, suffix, backend)
        output_dir = os.path.dirname(files.result_path)
        made = []          # a resumed pair is kept whatever happens: the next -csv_path continues it
    else:
        output_dir = prepare_output_dir(output_dir or "./")
        try:
            stamp = stamp or claim_stamp([output_dir] + ([options.error_data_path] if options.error_data_path else []))
            files, done = new_files(output_dir, stamp, suffix, backend), set()
        except OSError as exc:
            raise write_error(exc, output_dir, "") from None
        made = [files.result_path, files.details_path, info_path_of(files.result_path)]
    summary.result_path, summary.details_path = files.result_path, files.details_path
    error_dir = ""
    if save_error_data and real_data and backend is MINDSPORE:
        if logger:
            logger.info("-save_error_data: a real-data MindSpore run does not save error data (its inputs and "
                        "outputs are the dump's tensor files already).")
    elif save_error_data:
        error_dir = os.path.join(options.error_data_path or output_dir, f"ut_error_data{stamp}")
    summary.resumed = sum(1 for n in kept if n in done)
    if logger:
        logger.info("acc_check on %s (%s): %d APIs, %d replayed%s, device under test %s, benchmark %s, %s "
                    "inputs; at most %s of memory per API.", path, backend.framework, len(kept), summary.supported,
                    f", {summary.filtered} dropped by -f" if summary.filtered else "", device, backend.benchmark,
                    "real-data" if real_data else "random-data", format_size(budget))
    replayer = backend.replayer(data, tensor_dir, device, options)
    # the index seeds the API's inputs: its position in the whole dump, whichever worker checks it
    position = {n: i for i, n in enumerate(all_names)}
    todo = [(position[n], n) for n in kept if n not in done]
    # a single run's error directory is its own (its timestamp); multi_acc_check's splits share theirs
    made_error_dir = bool(error_dir) and subset is None and not os.path.exists(error_dir)
    try:
        _write_info(files.result_path, path, device, backend.benchmark, real_data)
        for index, name in (progress(todo, total=len(todo), desc="APIs") if show_progress else todo):
            # the reference's own SKIP rows (Distributed.*, ...) stay as they are; other APIs are refused first
            refused = ""
            if backend.named_for_replay(name):
                replayed = backend.supported(name)
                loads = tensor_file_bytes(tensor_dir, backend.needed_files(data, [name])) \
                    if real_data and replayed else 0
                refused = refusal(name, data, budget if replayed else None, loads)
            result = backend.skip(data, name, refused) if refused else replayer.run(name, index)
            files.append(result)
            summary.checked += 1
            if result.skipped:
                summary.skipped += 1
            elif result.failed:
                if ERROR in (result.forward_status, result.backward_status):
                    summary.failed += 1
                else:
                    summary.warned += 1
                if error_dir:
                    backend.save_error(error_dir, result)
            else:
                summary.passed += 1
            if logger and result.failed:
                logger.warning("%s: forward %s, backward %s.", name, result.forward_status or "-",
                               result.backward_status.strip() or "-")
            del result             # this API's tensors are freed before the next API's are built
            if index % 64 == 63:
                gc.collect()
        files.close()
    except OSError as exc:
        files.close(quiet=True)
        for name in made:
            with contextlib.suppress(OSError):
                os.unlink(name)
        if made_error_dir:
            shutil.rmtree(error_dir, ignore_errors=True)
        raise write_error(exc, output_dir, "" if made else files.result_path) from None
    except BaseException:
        files.close(quiet=True)
        raise
    return summary


def write_error(exc: OSError, output_dir: str, resumable: str) -> MsprobeError:
    """The one-line error of a result file that cannot be written (disk full, read-only directory, name too
    long); `resumable`: the result csv of a resumed run, which is kept."""
    if not exc.filename:          # a failed write or flush (disk full) names no file
        exc.filename = output_dir
    kept = (f"the rows recorded before are kept: continue with -csv_path {resumable}" if resumable else
            "no result file of this run was kept")
    return MsprobeError(f"cannot write the results: {os_error_text(exc)}; {kept}.")


def info_path_of(result_path: str) -> str:
    """accuracy_checking_info_<timestamp>[<suffix>].json beside the result CSV."""
    base = os.path.basename(result_path).replace("accuracy_checking_result_", "accuracy_checking_info_", 1)
    return os.path.join(os.path.dirname(result_path), base[: -len(".csv")] + ".json")


def _read_runs(info_path: str) -> list:
    import json

    if not os.path.isfile(info_path):
        return []
    try:
        with open(info_path, encoding="utf-8") as handle:
            return list(json.load(handle).get("runs", []))
    except (OSError, ValueError, AttributeError, TypeError):
        return []


def _write_runs(info_path: str, runs: list) -> None:
    import json


    write_text(info_path, json.dumps({"runs": runs}, indent=2) + "\n")


def _write_info(result_path: str, dump_path: str, device: str, benchmark: str, real_data: bool) -> None:
    """The info file beside the CSVs: the device under test and the benchmark of every run on them (DECISIONS 18)."""
    info_path = info_path_of(result_path)
    _write_runs(info_path, _read_runs(info_path) + [{"api_info": dump_path, "device": device, "benchmark": benchmark,
                                                      "inputs": "real-data" if real_data else "random-data"}])


def merge_info(result_path: str, part_result_paths: list) -> None:
    """The info file of `result_path`: the distinct runs of the parts' info files, in order (multi_acc_check's
    device files, assembled from their splits). Nothing is written when no part has one."""
    runs = []
    for part in part_result_paths:
        for run in _read_runs(info_path_of(part)):
            if run not in runs:
                runs.append(run)
    if runs:
        _write_runs(info_path_of(result_path), runs)


def check_tensor_files(wanted: list, tensor_dir: str) -> None:
    """Refuse a real-data run before anything is written when a tensor file it needs is missing or unsafe."""
    reasons = [reason for reason in (safe_tensor_path(tensor_dir, name)[1] for name in wanted) if reason]
    if reasons:
        raise InputError(f"real-data mode: {len(reasons)} tensor file(s) of the dump are missing or unsafe in "
                         f"{tensor_dir} (first: {reasons[0]}); nothing was written.")


def check_real_data(path: str, content: dict, names: list) -> None:
    """For a real-data dump of any framework, refuse a run of these APIs before anything is written when a tensor
    file it needs is missing (what run_acc_check checks first; for callers that split the APIs over workers)."""
    backend = framework_for(content, path)
    if backend.real_data(content):
        check_tensor_files(backend.needed_files(content["data"], names), tensor_directory(path, content))
