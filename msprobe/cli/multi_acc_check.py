"""`msprobe multi_acc_check`: acc_check with the APIs split over several devices (worker processes)."""

from __future__ import annotations

import argparse

DESCRIPTION = ("API accuracy pre-check over several devices: the forward APIs of the dump (after -f) are split into "
               "-n contiguous splits, dealt to the device ids of -d in turn; each split is checked by its own worker "
               "process exactly as `msprobe acc_check` does (same inputs, same judgement, the same options), the "
               "splits of a device are joined in order into one pair of result files per device, and a merged "
               "summary is written. Without an accelerator the devices are CPU worker processes (at most one per "
               "core unless --workers asks for more). PyTorch and MindSpore dumps alike.")
EPILOG = """examples:
  msprobe multi_acc_check -api_info dump/step0/rank0/dump.json -d 0 1 2 3 -o acc_out
  msprobe multi_acc_check -api_info dump.json -d 0 1 -n 16 -o acc_out -save_error_data -f -config config.json
  msprobe multi_acc_check -api_info ms_dump/step0/proc123/dump.json -d 0 1 -o acc_out --max-abs-err 0.001
  # continue an interrupted run: any of its result files, the same -d, -n and -f
  msprobe multi_acc_check -api_info dump.json -d 0 1 -csv_path acc_out/accuracy_checking_result_20250101120000_device0_split2.csv
  # one Ray task per split on a cluster (shared storage), a failed split retried twice
  msprobe multi_acc_check -api_info /shared/dump.json -d 0 1 2 3 4 5 6 7 -o /shared/acc_out --backend ray
  msprobe -f pytorch multi_run_ut -api_info dump.json -d 0 1 -n 4 -o acc_out      (the 1.x form, same engine)

Output: <out>/accuracy_checking_result_<timestamp>_device<id>.csv and accuracy_checking_details_<timestamp>_device<id>.csv
per device, accuracy_checking_summary_<timestamp>.csv (per device and total). See docs/acc_check.md."""


def _num_splits(text: str) -> int:
    from msprobe.acc_check.multi import MAX_SPLITS, check_splits
    from msprobe.errors import MsprobeError

    try:
        return check_splits(int(text))
    except (ValueError, MsprobeError):
        raise argparse.ArgumentTypeError(f"invalid number of splits {text!r} (an integer 1-{MAX_SPLITS})") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from msprobe.acc_check.multi import DEFAULT_SPLITS, MAX_SPLITS
    from msprobe.cli.acc_check import add_arguments as acc_check_arguments
    from msprobe.cli.scale_options import add_arguments as scale_arguments

    acc_check_arguments(parser, multi=True)
    parser.add_argument("-n", "--num_splits", dest="num_splits", type=_num_splits, default=DEFAULT_SPLITS,
                        metavar="N", help=f"split the APIs into N contiguous splits (1-{MAX_SPLITS}, default "
                                          f"{DEFAULT_SPLITS}), one worker task each, dealt to the -d devices in turn")
    parser.add_argument("--workers", type=int, default=0, metavar="N",
                        help="worker processes at once (default: one per split, at most the number of cores)")
    scale_arguments(parser, "--workers")


def run(args: argparse.Namespace) -> int:
    import os

    from msprobe.acc_check.multi import run_multi_acc_check, summary_rows
    from msprobe.cli.acc_check import check_options
    from msprobe.cli.compare import banner
    from msprobe.cli.scale_options import backend_of
    from msprobe.errors import MsprobeError
    from msprobe.log import get_logger

    logger = get_logger()
    if args.workers < 0:
        raise MsprobeError("--workers must be a positive number.")
    options = check_options(args)
    workers = args.workers or min(args.num_splits, os.cpu_count() or 1)
    # spawn, not fork: a process that already ran torch (its OpenMP pool) can deadlock in a forked child
    backend = backend_of(args, workers, start_method="spawn")
    summary = run_multi_acc_check(args.api_info, args.device_ids, args.out_path, args.csv_path, args.save_error_data,
                                  workers, logger, backend, splits=args.num_splits, options=options,
                                  config_path=args.config_path, expected_framework=args.expected_framework)
    for row in summary_rows(summary):
        label = "total" if row[0] == "total" else f"device {row[0]}"
        logger.info("multi_acc_check %s: %d APIs, %d recorded (%d checked in this run), %d passed, %d with "
                    "warnings, %d failed, %d skipped%s.", label, *row[1:8],
                    f" -> {row[8]}" if row[8] and row[0] != "total" else "")
    failures = [d for d in summary.devices if d.error]
    for device in failures:
        logger.error("device %d: %s", device.device_id, device.error)
    logger.info("Summary: %s.", summary.summary_path)
    if failures:
        hint = (f"resume with -csv_path {summary.resume_path}" if summary.resume_path else
                "nothing was recorded; run the command again")
        raise MsprobeError(f"{len(failures)} of {len(summary.devices)} devices failed (first: device "
                           f"{failures[0].device_id}: {failures[0].error}); {hint}.")
    banner(logger, "msprobe multi_acc_check ends successfully.")
    return 0
