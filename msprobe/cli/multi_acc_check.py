"""`msprobe multi_acc_check`: acc_check with the APIs split over several devices (worker processes)."""

from __future__ import annotations

import argparse

DESCRIPTION = ("API accuracy pre-check over several devices: the forward APIs of the dump are split into one "
               "contiguous share per device id given with -d, each share is checked by its own worker process "
               "exactly as `msprobe acc_check` does (same inputs, same judgement), into one pair of result files "
               "per device, and a merged summary is written. Without an accelerator the devices are CPU worker "
               "processes (at most one per core unless --workers asks for more).")
EPILOG = """examples:
  msprobe multi_acc_check -api_info dump/step0/rank0/dump.json -d 0 1 2 3 -o acc_out
  msprobe multi_acc_check -api_info dump.json -d 0 1 -o acc_out -save_error_data
  # continue an interrupted run: any of its result files, the same device ids
  msprobe multi_acc_check -api_info dump.json -d 0 1 -csv_path acc_out/accuracy_checking_result_20250101120000_device0.csv
  # one Ray task per device id on a cluster (shared storage), a failed share retried twice
  msprobe multi_acc_check -api_info /shared/dump.json -d 0 1 2 3 4 5 6 7 -o /shared/acc_out --backend ray

Output: <out>/accuracy_checking_result_<timestamp>_device<id>.csv and accuracy_checking_details_<timestamp>_device<id>.csv
per device, accuracy_checking_summary_<timestamp>.csv (per device and total). See docs/acc_check.md."""


def _device_id(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid device id {text!r} (an integer 0-4095)") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from msprobe.cli.acc_check import add_arguments as acc_check_arguments

    acc_check_arguments(parser)
    parser.add_argument("-d", "--device", dest="devices", type=_device_id, nargs="+", default=[0], metavar="ID",
                        help="device ids, unique, each in 0-4095 (default 0); one share of the APIs per id")
    parser.add_argument("--workers", type=int, default=0, metavar="N",
                        help="worker processes (default: one per device id, at most the number of cores)")
    from msprobe.scale.options import add_arguments as scale_arguments

    scale_arguments(parser, "--workers")


def run(args: argparse.Namespace) -> int:
    import os

    from msprobe.acc_check.multi import run_multi_acc_check, summary_rows
    from msprobe.cli.compare import banner
    from msprobe.errors import MsprobeError
    from msprobe.log import get_logger
    from msprobe.scale.options import backend_of

    logger = get_logger()
    if args.workers < 0:
        raise MsprobeError("--workers must be a positive number.")
    workers = args.workers or min(len(args.devices), os.cpu_count() or 1)
    # spawn, not fork: a process that already ran torch (its OpenMP pool) can deadlock in a forked child
    backend = backend_of(args, workers, start_method="spawn")
    summary = run_multi_acc_check(args.api_info, args.devices, args.out_path, args.csv_path, args.save_error_data,
                                  workers, logger, backend)
    for row in summary_rows(summary):
        label = "total" if row[0] == "total" else f"device {row[0]}"
        logger.info("multi_acc_check %s: %d APIs, %d recorded (%d checked in this run), %d passed, %d failed, "
                    "%d skipped%s.", label, row[1], row[2], row[3], row[4], row[5], row[6],
                    f" -> {row[7]}" if row[7] and row[0] != "total" else "")
    failures = [d for d in summary.devices if d.error]
    for device in failures:
        logger.error("device %d: %s", device.device_id, device.error)
    logger.info("Summary: %s.", summary.summary_path)
    if failures:
        raise MsprobeError(f"{len(failures)} of {len(summary.devices)} devices failed (first: device "
                           f"{failures[0].device_id}: {failures[0].error}); resume with -csv_path "
                           f"{failures[0].result_path}.")
    banner(logger, "msprobe multi_acc_check ends successfully.")
    return 0
