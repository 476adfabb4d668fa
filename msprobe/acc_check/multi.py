"""multi_acc_check (spec §5.10): the APIs of one dump (after -f) split into n contiguous chunks, dealt to the -d
devices in turn; one task per split (a local worker process or a Ray task) checks it with the acc_check engine
into its own pair of files, and the splits of a device are joined in order into that device's pair of result
files (DECISIONS 19); then a merged summary. Works the same for PyTorch and MindSpore dumps."""

from __future__ import annotations

import csv
import dataclasses
import os
import re
from dataclasses import dataclass, field

from msprobe.errors import MsprobeError, os_error_text

MAX_DEVICE_ID = 4095
# The CLI reads MAX_SPLITS and DEFAULT_SPLITS when it builds its parser (msprobe -h): the msprobe modules this
# one runs on are imported inside the functions, so that reading them loads nothing else.
MAX_SPLITS = 64        # -n/--num_splits: 1..64, default 8 (spec §2.3)
DEFAULT_SPLITS = 8
# the result file of a device, or of one split of it while the run is not complete
RUN_FILE = re.compile(r"^accuracy_checking_result_(\d{14})_device(\d+)(?:_split(\d+))?\.csv$")


class DeviceError(MsprobeError):
    """Bad -d device ids."""


@dataclass
class DeviceSummary:
    device_id: int
    apis: int = 0          # APIs assigned to the device
    recorded: int = 0      # rows in its result file(s)
    checked: int = 0       # APIs checked in this invocation
    passed: int = 0
    warned: int = 0        # worst status warning
    failed: int = 0        # worst status error
    skipped: int = 0
    result_path: str = ""
    details_path: str = ""
    device: str = ""
    error: str = ""


@dataclass
class MultiSummary:
    devices: list = field(default_factory=list)    # DeviceSummary per device id
    total: DeviceSummary = None
    stamp: str = ""
    summary_path: str = ""
    splits: int = 0
    filtered: int = 0      # APIs dropped by -f before splitting
    resume_path: str = ""  # a result file of this run to give to -csv_path ("" when none was written)


@dataclass(frozen=True)
class SplitJob:
    """One split of the APIs: one task."""

    device_id: int
    split: int
    api_info: str
    apis: tuple            # the split's API names, in dump order

    @property
    def label(self) -> str:
        return f"[device {self.device_id} split {self.split}] "

    @property
    def suffix(self) -> str:
        return split_suffix(self.device_id, self.split)


@dataclass(frozen=True)
class SplitOptions:
    """What every split runs with: the run's files and the acc_check options forwarded to run_acc_check."""

    output_dir: str
    stamp: str
    save_error_data: bool = False
    filter_api: bool = False
    config_path: str = ""
    jit_compile: bool = False
    max_abs_err: float | None = None
    memory_budget: int = 0           # bytes one API may use in one worker


def suffix_of(device_id: int) -> str:
    return f"_device{device_id}"


def split_suffix(device_id: int, index: int) -> str:
    return f"{suffix_of(device_id)}_split{index}"


def check_devices(devices: list) -> list:
    if not devices:
        raise DeviceError("-d needs at least one device id.")
    if len(set(devices)) != len(devices):
        raise DeviceError(f"device ids must be unique: {' '.join(str(d) for d in devices)}.")
    bad = [d for d in devices if not 0 <= d <= MAX_DEVICE_ID]
    if bad:
        raise DeviceError(f"device id {bad[0]} is out of range [0, {MAX_DEVICE_ID}].")
    return list(devices)


def check_splits(splits) -> int:
    if isinstance(splits, bool) or not isinstance(splits, int) or not 1 <= splits <= MAX_SPLITS:
        raise MsprobeError(f"-n/--num_splits must be an integer in [1, {MAX_SPLITS}], not {splits!r}.")
    return splits


def split(names: list, parts: int) -> list:
    """Contiguous chunks of len(names) // parts APIs; the last chunk takes the remainder (spec §5.10)."""
    size = len(names) // parts
    chunks = [names[i * size:(i + 1) * size] for i in range(parts - 1)]
    chunks.append(names[(parts - 1) * size:])
    return chunks


def plan(names: list, devices: list, splits: int) -> list:
    """(device id, split index, APIs) of every split: the chunks of split() dealt to the devices in turn."""
    return [(devices[i % len(devices)], i, tuple(chunk)) for i, chunk in enumerate(split(names, splits))]


def run_files(directory: str, stamp: str) -> list:
    """The result files (devices' and splits') of the run `stamp` in `directory`."""
    return sorted(os.path.join(directory, name) for name in os.listdir(directory)
                  if (found := RUN_FILE.match(name)) and found.group(1) == stamp)


def resume_state(csv_path: str, devices: list, splits_plan: list, backend, settings: str) -> tuple:
    """(timestamp, directory, ids of devices whose pair is complete) of the interrupted run that `csv_path` (any
    result file of it: a device's or a split's) belongs to. Every result file of that run must fit this run's
    splits (`settings`: the -d, -n and -f that make them), else the resume is refused before anything runs."""
    from msprobe.acc_check.results import details_of, recorded_rows
    from msprobe.dump.paths import check_input_file

    csv_path = check_input_file(csv_path, "result csv to resume")
    match = RUN_FILE.match(os.path.basename(csv_path))
    if not match:
        raise MsprobeError(f"{csv_path}: please do not modify the result csv name (expected "
                           "accuracy_checking_result_<YYYYmmddHHMMSS>_device<id>[_split<i>].csv of a multi_acc_check "
                           "run).")
    stamp, directory = match.group(1), os.path.dirname(csv_path)
    shares = {d: [] for d in devices}
    parts = {}
    for device_id, index, apis in splits_plan:
        shares[device_id].extend(apis)
        parts[(device_id, index)] = set(apis)
    complete = set()
    for path in run_files(directory, stamp):
        found = RUN_FILE.match(os.path.basename(path))
        device_id, index = int(found.group(2)), found.group(3)
        names = [row[0] for row in recorded_rows(path, backend)]
        if index is None:
            fits = device_id in shares and names == shares[device_id]
        else:
            fits = (device_id, int(index)) in parts and set(names) <= parts[(device_id, int(index))]
        if not fits:
            raise MsprobeError(f"{path} does not fit the splits of {settings}: resume with the -d, -n and -f of the "
                               "interrupted run; nothing was written.")
        if index is None:
            if not os.path.isfile(details_of(path)):
                raise MsprobeError(f"the details file {details_of(path)} of {path} is missing.")
            complete.add(device_id)
    return stamp, directory, complete


def check_split(job: SplitJob, options: SplitOptions) -> DeviceSummary:
    """acc_check of one split into its pair of files, with the options of the run. A pair that exists already (an
    earlier attempt of this task, or the interrupted run given with -csv_path) is continued: a retry checks no API
    twice."""
    from msprobe.acc_check.check import run_acc_check
    from msprobe.acc_check.results import result_path_of
    from msprobe.acc_check.select import CheckOptions

    existing = result_path_of(options.output_dir, options.stamp, job.suffix)
    check_options = CheckOptions(filter_api=options.filter_api, jit_compile=options.jit_compile,
                                 device_id=job.device_id, max_abs_err=options.max_abs_err,
                                 memory_budget=options.memory_budget)
    summary = run_acc_check(job.api_info, options.output_dir, existing if os.path.isfile(existing) else "",
                            options.save_error_data, None, subset=list(job.apis), suffix=job.suffix,
                            stamp=options.stamp, show_progress=False, options=check_options,
                            config_path=options.config_path)
    return DeviceSummary(job.device_id, checked=summary.checked, result_path=summary.result_path,
                         details_path=summary.details_path, device=summary.device)


def split_files(summary: DeviceSummary) -> list:
    return [summary.result_path, summary.details_path]


def count_rows(rows: list) -> dict:
    counts = {"recorded": 0, "passed": 0, "warned": 0, "failed": 0, "skipped": 0}
    for row in rows:
        if len(row) < 3:
            continue
        counts["recorded"] += 1
        if "SKIP" == row[1]:
            counts["skipped"] += 1
        elif "error" in (row[1], row[2]):
            counts["failed"] += 1
        elif "warning" in (row[1], row[2]):
            counts["warned"] += 1
        else:
            counts["passed"] += 1
    return counts


def run_multi_acc_check(api_info: str, devices: list, output_dir: str = "./", csv_path: str = "",
                        save_error_data: bool = False, workers: int = 0, logger=None, backend=None, *,
                        splits: int = DEFAULT_SPLITS, options=None, config_path: str = "",
                        expected_framework: str = "") -> MultiSummary:
    """Check the dump's APIs in `splits` splits dealt to the devices, on `backend` (default: local worker
    processes, `workers` of them), with the acc_check options `options` (CheckOptions: -f, -j, --max-abs-err) and
    `config_path` (-config). Everything that can refuse the run is checked before a worker starts. Splits and
    devices completed by an earlier invocation of the same run (-csv_path) are not run again."""
    from msprobe.acc_check.check import check_real_data, open_dump, write_error
    from msprobe.acc_check.guard import default_budget
    from msprobe.acc_check.select import CheckOptions, filter_apis
    from msprobe.dump.paths import prepare_output_dir
    from msprobe.io import write_text
    from msprobe.scale.executor import Batch, run_tasks
    from msprobe.scale.resume import resume_in
    from msprobe.scale.stamp import claim_stamp
    from msprobe.scale.task import Backend, JobFailure

    devices = check_devices(devices)
    splits = check_splits(splits)
    options = dataclasses.replace(options or CheckOptions(), device_id=devices[0])
    dump = open_dump(api_info, options, config_path, expected_framework)
    # spec §5.10: the forward APIs after -f are split
    names = filter_apis(dump.content["data"], dump.names) if options.filter_api else dump.names
    check_real_data(dump.path, dump.content, names)   # refuse before any worker writes a file
    splits_plan = plan(names, devices, splits)
    settings = f"-d {' '.join(str(d) for d in devices)} -n {splits}{' -f' if options.filter_api else ''}"
    if csv_path:
        stamp, output_dir, complete = resume_state(csv_path, devices, splits_plan, dump.backend, settings)
    else:
        output_dir = prepare_output_dir(output_dir or "./")
        try:
            stamp, complete = claim_stamp([output_dir]), set()
        except OSError as exc:
            raise write_error(exc, output_dir, "") from None
        taken = sorted(n for n in os.listdir(output_dir)
                       if n.startswith(tuple(f"accuracy_checking_{kind}_{stamp}_device"
                                             for kind in ("result", "details", "info"))))
        if taken:
            raise MsprobeError(f"{os.path.join(output_dir, taken[0])} already exists; not overwriting it.")
    jobs = [SplitJob(d, i, dump.path, apis) for d, i, apis in splits_plan if apis and d not in complete]
    # spawn, not fork: a process that already ran torch (its OpenMP pool) can deadlock in a forked child
    backend = backend or Backend("local", max(1, workers or (os.cpu_count() or 1)), start_method="spawn")
    if logger:
        where = "on Ray" if backend.kind == "ray" else f"{min(backend.workers, len(jobs))} worker processes"
        logger.info("multi_acc_check on %s (%s): %d APIs%s in %d splits (%d each, the last %d) over %d devices (%s), "
                    "%d splits to check, %s.", dump.path, dump.backend.framework, len(names),
                    f" ({len(dump.names) - len(names)} dropped by -f)" if options.filter_api else "", splits,
                    len(splits_plan[0][2]), len(splits_plan[-1][2]), len(devices), " ".join(str(d) for d in devices),
                    len(jobs), where)
        if splits < len(devices):
            logger.warning("-n %d splits for %d devices: devices %s get no APIs.", splits, len(devices),
                           " ".join(str(d) for d in devices[splits:]))
    # every local worker running at once gets its share of the memory budget (default: half the available
    # memory); a Ray task measures the memory of its own node when it starts (budget 0)
    budget = options.memory_budget or (0 if backend.kind == "ray" else
                                        default_budget(min(backend.workers, max(len(jobs), 1))))
    settings_of_run = SplitOptions(output_dir, stamp, save_error_data, options.filter_api,
                                   os.path.abspath(config_path) if config_path else "", options.jit_compile,
                                   options.max_abs_err, budget)
    try:
        # the timestamp belongs to the settings: only the same run (-csv_path) skips its completed splits
        batch = run_tasks(check_split, jobs, settings_of_run, backend,
                          resume_in(output_dir, "multi_acc_check", settings_of_run, split_files),
                          desc="Splits") if jobs else Batch([])
    except KeyboardInterrupt:
        found = run_files(output_dir, stamp)
        if logger and found:
            logger.warning("Continue this run with -csv_path %s (and %s).", found[0], settings)
        raise
    done = {}
    for index, (job, result) in enumerate(zip(jobs, batch.results)):
        if not isinstance(result, JobFailure) and index in batch.resumed:
            result.checked = 0
        done[(job.device_id, job.split)] = result
    summary = MultiSummary(stamp=stamp, splits=splits, filtered=len(dump.names) - len(names))
    total = DeviceSummary(-1)
    try:
        for device_id in devices:
            mine = [(i, apis) for d, i, apis in splits_plan if d == device_id]
            result = _finish_device(device_id, mine, done, device_id in complete, output_dir, stamp, dump.backend)
            for key in ("apis", "recorded", "checked", "passed", "warned", "failed", "skipped"):
                setattr(total, key, getattr(total, key) + getattr(result, key))
            summary.devices.append(result)
        summary.total = total
        found = run_files(output_dir, stamp)
        summary.resume_path = next((p for p in found if "_split" in os.path.basename(p)), found[0] if found else "")
        summary.summary_path = os.path.join(output_dir, f"accuracy_checking_summary_{stamp}.csv")
        write_text(summary.summary_path, summary_table(summary))
    except OSError as exc:
        # joining a device's splits or writing the summary: the split files stay (joined files are atomic)
        found = run_files(output_dir, stamp)
        hint = f"continue with -csv_path {found[0]} once it can be written" if found else "no result file was kept"
        raise MsprobeError(f"cannot write the results: {os_error_text(exc)}; {hint}.") from None
    return summary


def _finish_device(device_id: int, mine: list, done: dict, complete: bool, output_dir: str, stamp: str,
                   backend) -> DeviceSummary:
    """The summary of one device after its splits ran (`mine`: (index, APIs) of its splits; `done`: the task
    results by (device, index)). When none failed, its splits' pairs are joined in order into the device's pair and
    removed; a failed device keeps its split files for -csv_path and is counted from them."""
    from msprobe.acc_check.check import info_path_of, merge_info
    from msprobe.acc_check.results import concatenate, details_of, recorded_rows, result_path_of
    from msprobe.scale.task import JobFailure

    parts = [result_path_of(output_dir, stamp, split_suffix(device_id, i)) for i, apis in mine if apis]
    results = [done[(device_id, i)] for i, _ in mine if (device_id, i) in done]
    succeeded = [r for r in results if not isinstance(r, JobFailure)]
    failures = [(i, r) for i, _ in mine if isinstance(r := done.get((device_id, i)), JobFailure)]
    result = DeviceSummary(device_id, apis=sum(len(apis) for _, apis in mine), checked=sum(r.checked for r in succeeded),
                           device=next((r.device for r in succeeded), ""))
    if failures:
        index, failure = failures[0]
        result.error = f"split {index}: {failure.message}" + (
            f" (and {len(failures) - 1} more splits)" if len(failures) > 1 else "")
        rows = [row for part in parts if os.path.isfile(part) for row in recorded_rows(part, backend)]
    else:
        result.result_path = result_path_of(output_dir, stamp, suffix_of(device_id))
        result.details_path = details_of(result.result_path)
        if not complete:
            concatenate(result.result_path, result.details_path, [(p, details_of(p)) for p in parts], backend)
            merge_info(result.result_path, parts)
        for part in parts:       # the device's pair is complete (now or by an earlier run): its splits' files go
            for path in (part, details_of(part), info_path_of(part)):
                if os.path.isfile(path):
                    os.unlink(path)
        rows = recorded_rows(result.result_path, backend)
    for key, value in count_rows(rows).items():
        setattr(result, key, value)
    return result


SUMMARY_HEADER = ["Device", "APIs", "Recorded", "Checked this run", "Passed", "Warning", "Error", "Skipped",
                  "Result file"]


def summary_rows(summary: MultiSummary) -> list:
    rows = []
    for item in [*summary.devices, summary.total]:
        label = "total" if item is summary.total else str(item.device_id)
        rows.append([label, item.apis, item.recorded, item.checked, item.passed, item.warned, item.failed, item.skipped,
                     os.path.basename(item.result_path) if item.result_path else ""])
    return rows


def summary_table(summary: MultiSummary) -> str:
    import io

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(SUMMARY_HEADER)
    writer.writerows(summary_rows(summary))
    return "\ufeff" + buffer.getvalue()
