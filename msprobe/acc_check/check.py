"""One acc_check run over a PyTorch dump: select the APIs, replay each, append its rows (spec §5)."""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass

from msprobe.errors import DumpFormatError, MsprobeError


@dataclass
class Summary:
    device: str
    supported: int = 0     # forward APIs of the dump that acc_check replays
    total: int = 0         # forward API entries of the dump
    checked: int = 0       # APIs run in this invocation
    resumed: int = 0       # APIs already recorded in a resumed CSV
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    result_path: str = ""
    details_path: str = ""


def load_api_dump(path: str) -> tuple:
    """(content, forward API names in call order) of a PyTorch dump.json; errors for other dumps."""
    from msprobe.dump.paths import check_input_file
    from msprobe.dump.reader import load_json

    path = check_input_file(path, "api_info file")
    content = load_json(path, "api_info file")
    if not isinstance(content, dict) or not isinstance(content.get("data"), dict):
        raise DumpFormatError(f"{path} is not a msprobe dump.json: it needs an object 'data'.")
    if "framework" not in content:
        raise DumpFormatError(f'Key "framework" not found in {path}')
    framework = str(content["framework"]).lower()
    if framework in ("mindspore", "ms", "mindtorch"):
        raise MsprobeError(f"{path} is a MindSpore dump; the MindSpore checker is not implemented yet "
                           "(only PyTorch dumps are checked).")
    if framework not in ("pytorch", "pt"):
        raise DumpFormatError(f"Unsupported framework in api_info: {content['framework']}")
    names = []
    for key in content["data"]:
        if "Module" in key or not key.endswith(".forward"):
            continue
        names.append(key[: -len(".forward")])
    if not names:
        raise DumpFormatError(f"{path} holds no API entries (level {content.get('level')!r}); acc_check needs an "
                              "L1 or mix dump.")
    return path, content, names


def run_acc_check(api_info: str, output_dir: str, csv_path: str = "", save_error_data: bool = False,
                  logger=None, *, subset=None, suffix: str = "", stamp: str = "", show_progress: bool = True
                  ) -> Summary:
    """Check the forward APIs of a dump (only those of `subset`, in dump order, when given: multi_acc_check
    gives each worker its share) and append their rows to a new pair of result files
    (accuracy_checking_result_<stamp><suffix>.csv) or to the interrupted pair `csv_path`."""
    import torch

    from msprobe.acc_check.results import new_files, resume_files
    from msprobe.acc_check.runner import Replayer, device_name, parse_api, support_lists
    from msprobe.compare.pipeline import timestamp
    from msprobe.dump.paths import prepare_output_dir
    from msprobe.log import progress

    path, content, names = load_api_dump(api_info)
    all_names = names
    if subset is not None:
        wanted = set(subset)
        names = [n for n in names if n in wanted]
    real_data = content.get("task") == "tensor" or bool(content.get("dump_data_dir"))
    tensor_dir = os.path.join(os.path.dirname(path), "dump_tensor_data") if real_data else None
    lists = support_lists()

    def supported(name):
        parsed = parse_api(name)
        return parsed is not None and parsed[1] in lists.get(parsed[0], ())

    if real_data:
        _check_tensor_files(content["data"], [n for n in names if supported(n)], tensor_dir)
    device = device_name()
    summary = Summary(device=device, total=len(names), supported=sum(1 for n in names if supported(n)))
    if csv_path:
        files, done, stamp = resume_files(csv_path, names, suffix)
    else:
        output_dir = prepare_output_dir(output_dir or "./")
        stamp = stamp or timestamp()
        files, done = new_files(output_dir, stamp, suffix), set()
    summary.result_path, summary.details_path = files.result_path, files.details_path
    _write_info(files.result_path, path, device, real_data)
    error_dir = os.path.join(prepare_output_dir(output_dir or "./"), f"ut_error_data{stamp}") \
        if save_error_data else ""
    summary.resumed = sum(1 for n in names if n in done)
    if logger:
        logger.info("acc_check on %s: %d forward APIs, %d supported, device under test %s, benchmark cpu "
                    "(float64; float32 for float16/bfloat16), %s inputs.", path, len(names), summary.supported,
                    device, "real-data" if real_data else "random-data")
    replayer = Replayer(content["data"], tensor_dir, device.split(":")[0] if device == "cpu" else device)
    torch.manual_seed(1234)
    # the index seeds the API's inputs: its position in the whole dump, whichever worker checks it
    position = {n: i for i, n in enumerate(all_names)}
    todo = [(position[n], n) for n in names if n not in done]
    try:
        for index, name in (progress(todo, total=len(todo), desc="APIs") if show_progress else todo):
            result = replayer.run(name, index)
            files.append(result)
            summary.checked += 1
            if "SKIP" == result.forward_status:
                summary.skipped += 1
            elif result.failed:
                summary.failed += 1
                if error_dir:
                    save_error(error_dir, result)
            else:
                summary.passed += 1
            if logger and result.failed:
                logger.warning("%s: forward %s, backward %s.", name, result.forward_status,
                               result.backward_status.strip() or "-")
            del result
            if index % 64 == 63:
                gc.collect()
    finally:
        files.close()
    return summary


def _write_info(result_path: str, dump_path: str, device: str, real_data: bool) -> None:
    """accuracy_checking_info_<timestamp>[_device<id>].json beside the CSVs: the device under test and the
    benchmark."""
    import json

    from msprobe.report.atomic import write_text

    base = os.path.basename(result_path).replace("accuracy_checking_result_", "accuracy_checking_info_", 1)
    info_path = os.path.join(os.path.dirname(result_path), base[: -len(".csv")] + ".json")
    runs = []
    if os.path.isfile(info_path):
        try:
            with open(info_path, encoding="utf-8") as handle:
                runs = json.load(handle).get("runs", [])
        except (OSError, ValueError, AttributeError):
            runs = []
    runs.append({"api_info": dump_path, "device": device, "benchmark": "cpu (float64; float32 for float16/bfloat16 "
                 "inputs)", "inputs": "real-data" if real_data else "random-data"})
    write_text(info_path, json.dumps({"runs": runs}, indent=2) + "\n")


def _check_tensor_files(data: dict, names: list, tensor_dir: str) -> None:
    from msprobe.acc_check.inputs import InputError, data_names
    from msprobe.dump.paths import safe_tensor_path

    missing = []
    for name in names:
        forward = data.get(f"{name}.forward") or {}
        wanted = data_names(forward.get("input_args")) + data_names(forward.get("input_kwargs"))
        backward = data.get(f"{name}.backward")
        if backward:
            wanted += data_names((backward.get("input") or [])[:1])
        for data_name in wanted:
            if safe_tensor_path(tensor_dir, data_name)[0] is None:
                missing.append(data_name)
    if missing:
        raise InputError(f"real-data mode: {len(missing)} tensor file(s) of the dump are missing or unsafe in "
                         f"{tensor_dir} (first: {missing[0]}); nothing was written.")


def save_error(directory: str, result) -> None:
    """Save the inputs and outputs of a failing API as .pt files; args and kwargs get distinct names."""
    import torch

    os.makedirs(directory, mode=0o750, exist_ok=True)
    for key, value in result.saved.items():
        leaves = []
        _leaves(value, leaves)
        for k, leaf in enumerate(leaves):
            if isinstance(leaf, torch.Tensor):
                leaf = leaf.detach().cpu().contiguous()
            torch.save(leaf, os.path.join(directory, f"{result.full_name}.{key}.{k}.pt"))


def _leaves(value, out: list) -> None:
    if isinstance(value, (list, tuple)):
        for element in value:
            _leaves(element, out)
    elif isinstance(value, dict):
        for element in value.values():
            _leaves(element, out)
    else:
        out.append(value)
