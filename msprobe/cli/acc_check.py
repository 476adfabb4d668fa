"""`msprobe acc_check`: replay every supported API of a dump against a high-precision CPU benchmark."""

from __future__ import annotations

import argparse

DESCRIPTION = ("API accuracy pre-check: rebuild the inputs of every supported API of an L1/mix dump (random data "
               "from Max/Min for statistics dumps, the dumped tensors for tensor dumps), run it on the device under "
               "test (NPU, else CUDA, else CPU) and on the CPU at higher precision (float64; float32 for "
               "float16/bfloat16), and judge every output. The framework is read from dump.json (PyTorch only).")
EPILOG = """examples:
  msprobe acc_check -api_info dump/step0/rank0/dump.json -o acc_out
  msprobe acc_check -api_info dump.json -o acc_out -save_error_data
  # continue an interrupted run (appends to the same pair of files)
  msprobe acc_check -api_info dump.json -csv_path acc_out/accuracy_checking_result_20250101120000.csv

Output: <out>/accuracy_checking_result_<timestamp>.csv (API name, Forward/Backward Test Success, Message) and
accuracy_checking_details_<timestamp>.csv (one row per output and metric). See docs/acc_check.md."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Only the exact spellings are accepted (spec §2.1): no prefix matching, for single-dash options too.
    parser.allow_abbrev = False
    parser._get_option_tuples = lambda option_string: []
    parser.add_argument("-api_info", "--api_info_file", dest="api_info", required=True, metavar="JSON",
                        help="dump.json of an L1 or mix dump (statistics or tensor)")
    parser.add_argument("-o", "--out_path", dest="out_path", default="./", metavar="DIR",
                        help="output directory (created; default ./)")
    parser.add_argument("-csv_path", "--result_csv_path", dest="csv_path", default="", metavar="CSV",
                        help="accuracy_checking_result_<timestamp>.csv of an interrupted run to continue")
    parser.add_argument("-save_error_data", dest="save_error_data", action="store_true",
                        help="save inputs and outputs of APIs that do not pass (under <out>/ut_error_data<ts>)")


def run(args: argparse.Namespace) -> int:
    from msprobe.acc_check.check import run_acc_check
    from msprobe.cli.compare import banner
    from msprobe.log import get_logger

    logger = get_logger()
    summary = run_acc_check(args.api_info, args.out_path, args.csv_path, args.save_error_data, logger)
    logger.info("acc_check summary (device %s): %d APIs checked of %d supported (%d forward APIs in the dump%s), "
                "%d passed, %d failed, %d skipped.", summary.device, summary.checked, summary.supported,
                summary.total, f", {summary.resumed} already recorded" if summary.resumed else "",
                summary.passed, summary.failed, summary.skipped)
    logger.info("Results: %s and %s.", summary.result_path, summary.details_path)
    banner(logger, "msprobe acc_check ends successfully.")
    return 0
