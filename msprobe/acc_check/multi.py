"""multi_acc_check: the APIs of one dump split over devices, one task (a local worker process or a Ray task) and one
pair of result files per device (DECISIONS 19), then a merged summary (spec §5.10, with per-device files)."""

from __future__ import annotations

import csv
import os
import re
from dataclasses import dataclass, field

from msprobe.errors import MsprobeError

MAX_DEVICE_ID = 4095


class DeviceError(MsprobeError):
    """Bad -d device ids."""


@dataclass
class DeviceSummary:
    device_id: int
    apis: int = 0          # APIs assigned to the device
    recorded: int = 0      # rows in its result file
    checked: int = 0       # APIs checked in this invocation
    passed: int = 0
    failed: int = 0
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


@dataclass(frozen=True)
class DeviceJob:
    """One device's share of the APIs: one task."""

    device_id: int
    api_info: str
    apis: tuple            # the share's API names, in dump order

    @property
    def label(self) -> str:
        return f"[device {self.device_id}] "


@dataclass(frozen=True)
class DeviceOptions:
    output_dir: str
    stamp: str
    save_error_data: bool = False


def suffix_of(device_id: int) -> str:
    return f"_device{device_id}"


def result_path_of(output_dir: str, stamp: str, device_id: int) -> str:
    return os.path.join(output_dir, f"accuracy_checking_result_{stamp}{suffix_of(device_id)}.csv")


def check_devices(devices: list) -> list:
    if not devices:
        raise DeviceError("-d needs at least one device id.")
    if len(set(devices)) != len(devices):
        raise DeviceError(f"device ids must be unique: {' '.join(str(d) for d in devices)}.")
    bad = [d for d in devices if not 0 <= d <= MAX_DEVICE_ID]
    if bad:
        raise DeviceError(f"device id {bad[0]} is out of range [0, {MAX_DEVICE_ID}].")
    return list(devices)


def split(names: list, parts: int) -> list:
    """Contiguous chunks of len(names) // parts APIs; the last chunk takes the remainder (spec §5.10)."""
    size = len(names) // parts
    chunks = [names[i * size:(i + 1) * size] for i in range(parts - 1)]
    chunks.append(names[(parts - 1) * size:])
    return chunks


def resume_paths(csv_path: str, devices: list) -> tuple:
    """(timestamp, directory, result path per device) of an interrupted multi_acc_check run; `csv_path` is the
    result file of any of its devices."""
    match = re.match(r"^accuracy_checking_result_(\d{14})_device(\d+)\.csv$", os.path.basename(csv_path))
    if not match:
        raise MsprobeError(f"{csv_path}: please do not modify the result csv name (expected "
                           "accuracy_checking_result_<YYYYmmddHHMMSS>_device<id>.csv of a multi_acc_check run).")
    stamp, directory = match.group(1), os.path.dirname(os.path.abspath(csv_path))
    paths = {d: os.path.join(directory, f"accuracy_checking_result_{stamp}{suffix_of(d)}.csv") for d in devices}
    missing = [p for p in paths.values() if not os.path.isfile(p)]
    if missing:
        present = sorted(n for n in os.listdir(directory)
                         if n.startswith(f"accuracy_checking_result_{stamp}_device"))
        raise MsprobeError(f"cannot resume with -d {' '.join(str(d) for d in devices)}: {missing[0]} does not "
                           f"exist (the interrupted run has {', '.join(present) or 'no device files'}); resume "
                           "with the same device ids.")
    return stamp, directory, paths


def check_share(job: DeviceJob, options: DeviceOptions) -> DeviceSummary:
    """acc_check of one device's share into its pair of files. A pair that exists already (an earlier attempt of
    this task, or the interrupted run given with -csv_path) is continued: a retry checks no API twice."""
    from msprobe.acc_check.check import run_acc_check

    existing = result_path_of(options.output_dir, options.stamp, job.device_id)
    summary = run_acc_check(job.api_info, options.output_dir, existing if os.path.isfile(existing) else "",
                            options.save_error_data, None, subset=list(job.apis), suffix=suffix_of(job.device_id),
                            stamp=options.stamp, show_progress=False)
    result = DeviceSummary(job.device_id, checked=summary.checked, result_path=summary.result_path,
                           details_path=summary.details_path, device=summary.device)
    for key, value in count_rows(result.result_path).items():
        setattr(result, key, value)
    return result


def device_files(summary: DeviceSummary) -> list:
    return [summary.result_path, summary.details_path]


def count_rows(result_path: str) -> dict:
    counts = {"recorded": 0, "passed": 0, "failed": 0, "skipped": 0}
    with open(result_path, encoding="utf-8-sig", newline="") as handle:
        rows = list(csv.reader(handle))[1:]
    for row in rows:
        if len(row) < 3:
            continue
        counts["recorded"] += 1
        if "SKIP" == row[1]:
            counts["skipped"] += 1
        elif row[1] in ("error", "warning") or row[2] in ("error", "warning"):
            counts["failed"] += 1
        else:
            counts["passed"] += 1
    return counts


def run_multi_acc_check(api_info: str, devices: list, output_dir: str = "./", csv_path: str = "",
                        save_error_data: bool = False, workers: int = 0, logger=None, backend=None) -> MultiSummary:
    """Check the dump's APIs in one share per device on `backend` (default: local worker processes, `workers`
    of them). Devices completed by an earlier invocation of the same run (-csv_path) are not run again."""
    from msprobe.acc_check.check import _check_tensor_files, load_api_dump
    from msprobe.acc_check.runner import parse_api, support_lists
    from msprobe.compare.pipeline import timestamp
    from msprobe.dump.paths import prepare_output_dir
    from msprobe.report.atomic import write_text
    from msprobe.scale.executor import Backend, JobFailure, run_tasks
    from msprobe.scale.resume import resume_in

    devices = check_devices(devices)
    path, content, names = load_api_dump(api_info)
    real_data = content.get("task") == "tensor" or bool(content.get("dump_data_dir"))
    if real_data:   # refuse before any worker writes a file
        lists = support_lists()
        wanted = [n for n in names if (p := parse_api(n)) is not None and p[1] in lists.get(p[0], ())]
        _check_tensor_files(content["data"], wanted, os.path.join(os.path.dirname(path), "dump_tensor_data"))
    chunks = split(names, len(devices))
    if csv_path:
        stamp, output_dir, _ = resume_paths(csv_path, devices)
    else:
        output_dir = prepare_output_dir(output_dir or "./")
        stamp = timestamp()
        for d in devices:
            for kind in ("result", "details"):
                existing = os.path.join(output_dir, f"accuracy_checking_{kind}_{stamp}{suffix_of(d)}.csv")
                if os.path.lexists(existing):
                    raise MsprobeError(f"{existing} already exists; not overwriting it.")
    workers = max(1, min(len(devices), workers or (os.cpu_count() or 1)))
    # spawn, not fork: a process that already ran torch (its OpenMP pool) can deadlock in a forked child
    backend = backend or Backend("local", workers, start_method="spawn")
    if logger:
        where = "on Ray" if backend.kind == "ray" else f"{min(backend.workers, len(devices))} worker processes"
        logger.info("multi_acc_check on %s: %d forward APIs over %d devices (%s), %s.", path, len(names),
                    len(devices), " ".join(str(d) for d in devices), where)
    options = DeviceOptions(output_dir, stamp, save_error_data)
    jobs = [DeviceJob(d, path, tuple(chunk)) for d, chunk in zip(devices, chunks)]
    # the timestamp belongs to the settings: only the same run (-csv_path) skips its completed devices
    batch = run_tasks(check_share, jobs, options, backend, resume_in(output_dir, "multi_acc_check", options,
                                                                     device_files), desc="Devices")
    results = []
    for index, (job, result) in enumerate(zip(jobs, batch.results)):
        if isinstance(result, JobFailure):
            result = DeviceSummary(job.device_id, error=result.message)
        elif index in batch.resumed:
            result.checked = 0
        results.append(result)
    summary = MultiSummary(stamp=stamp)
    total = DeviceSummary(-1)
    for result, chunk in zip(results, chunks):
        result.apis = len(chunk)
        if result.error:   # what the failed task recorded before it stopped
            result.result_path = result_path_of(output_dir, stamp, result.device_id)
            result.details_path = result.result_path.replace("_result_", "_details_", 1)
        if result.error and os.path.isfile(result.result_path):
            for key, value in count_rows(result.result_path).items():
                setattr(result, key, value)
        for key in ("apis", "recorded", "checked", "passed", "failed", "skipped"):
            setattr(total, key, getattr(total, key) + getattr(result, key))
        summary.devices.append(result)
    summary.total = total
    summary.summary_path = os.path.join(output_dir, f"accuracy_checking_summary_{stamp}.csv")
    write_text(summary.summary_path, summary_table(summary))
    return summary


SUMMARY_HEADER = ["Device", "APIs", "Recorded", "Checked this run", "Passed", "Failed", "Skipped", "Result file"]


def summary_rows(summary: MultiSummary) -> list:
    rows = []
    for item in [*summary.devices, summary.total]:
        label = "total" if item is summary.total else str(item.device_id)
        rows.append([label, item.apis, item.recorded, item.checked, item.passed, item.failed, item.skipped,
                     os.path.basename(item.result_path) if item.result_path else ""])
    return rows


def summary_table(summary: MultiSummary) -> str:
    import io

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(SUMMARY_HEADER)
    writer.writerows(summary_rows(summary))
    return "\ufeff" + buffer.getvalue()
