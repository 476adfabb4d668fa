"""`msprobe acc_check`: replay every supported API of a dump against a high-precision CPU benchmark."""

from __future__ import annotations

import argparse

DESCRIPTION = ("API accuracy pre-check: rebuild the inputs of every supported API of an L1/mix dump (random data "
               "from Max/Min for statistics dumps, the dumped tensors for tensor dumps), run it on the device under "
               "test (NPU, else CUDA/GPU, else CPU) and on the CPU at higher precision (float64; float32 for "
               "float16/bfloat16), and judge every output. The dump's framework field picks the checker: PyTorch "
               "(precision standards) or MindSpore (Mint/MintFunctional/Tensor APIs; cosine > 0.99 and max abs "
               "error below --max-abs-err).")
EPILOG = """examples:
  msprobe acc_check -api_info dump/step0/rank0/dump.json -o acc_out
  msprobe acc_check -api_info ms_dump/step0/proc123/dump.json -o acc_out          (a MindSpore dump)
  msprobe acc_check -api_info dump.json -o acc_out -save_error_data -f -config config.json
  # continue an interrupted run (appends to the same pair of files)
  msprobe acc_check -api_info dump.json -csv_path acc_out/accuracy_checking_result_20250101120000.csv
  msprobe -f pytorch run_ut -api_info dump.json -o acc_out                      (the 1.x form, same engine)

Output: <out>/accuracy_checking_result_<timestamp>.csv (API name, Forward/Backward Test Success, Message) and
accuracy_checking_details_<timestamp>.csv (one row per output and metric). See docs/acc_check.md."""


def _device_id(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid device id {text!r} (an integer 0-4095)") from None


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"invalid threshold {text!r} (a number > 0)")
    return value


def _memory_size(text: str) -> int:
    from msprobe.acc_check.guard import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(parser: argparse.ArgumentParser, multi: bool = False) -> None:
    """The options of acc_check; multi_acc_check registers the same ones (`multi`: the help of -d and -csv_path
    speaks of its devices and files) and adds its own."""
    # Only the exact spellings are accepted (spec §2.1): no prefix matching, for single-dash options too.
    parser.allow_abbrev = False
    parser._get_option_tuples = lambda option_string: []
    parser.add_argument("-api_info", "--api_info_file", dest="api_info", required=True, metavar="JSON",
                        help="dump.json of an L1 or mix dump (statistics or tensor), PyTorch or MindSpore")
    parser.add_argument("-o", "--out_path", dest="out_path", default="./", metavar="DIR",
                        help="output directory (created; default ./)")
    parser.add_argument("-csv_path", "--result_csv_path", dest="csv_path", default="", metavar="CSV",
                        help="any result file (accuracy_checking_result_<timestamp>_device<id>[_split<i>].csv) of an "
                             "interrupted run to continue, with the same -d, -n and -f" if multi else
                             "accuracy_checking_result_<timestamp>.csv of an interrupted run to continue")
    parser.add_argument("-save_error_data", dest="save_error_data", action="store_true",
                        help="save inputs and outputs of APIs that do not pass (under <out>/ut_error_data<ts>)")
    parser.add_argument("-f", "--filter_api", dest="filter_api", action="store_true",
                        help="check only the first of forward APIs with equal arguments (apart from Max/Min)")
    parser.add_argument("-config", "--config_path", dest="config_path", default="", metavar="JSON",
                        help="a msprobe config.json whose acc_check (1.x: run_ut) section gives white_list, "
                             "black_list and error_data_path")
    parser.add_argument("-j", "--jit_compile", dest="jit_compile", action="store_true",
                        help="PyTorch on Ascend NPU only: jit compile mode on, internal formats allowed")
    parser.add_argument("-d", "--device", dest="device_ids", type=_device_id, nargs="+", default=[0], metavar="ID",
                        help="device ids, unique, each in 0-4095 (default 0); the splits are dealt to them in turn"
                             if multi else "device id of the device under test (the first one is used; default 0; "
                                           "ignored on the CPU)")
    parser.add_argument("--max-abs-err", "--max_abs_err", dest="max_abs_err", type=_positive, default=None,
                        metavar="X", help="MindSpore dumps: an output passes when cosine > 0.99 and max abs error "
                                          "< X (default 0.0001)")
    parser.add_argument("--memory-budget", "--memory_budget", dest="memory_budget", type=_memory_size, default=0,
                        metavar="SIZE", help="the most memory one API may use (e.g. 4G, 512M), estimated from its "
                                             "dumped shapes and dtypes before anything is allocated; an API above it "
                                             "gets a SKIP row saying so (default: half the memory available when the "
                                             "run starts" + (", shared by the workers running at once)" if multi
                                                             else ")"))
    parser.add_argument("--expected_framework", dest="expected_framework", default="", help=argparse.SUPPRESS)


def check_options(args: argparse.Namespace):
    """The CheckOptions of parsed acc_check arguments."""
    from msprobe.acc_check.multi import check_devices
    from msprobe.acc_check.select import CheckOptions

    devices = check_devices(args.device_ids)
    return CheckOptions(filter_api=args.filter_api, jit_compile=args.jit_compile, device_id=devices[0],
                        max_abs_err=args.max_abs_err, memory_budget=args.memory_budget)


def run(args: argparse.Namespace) -> int:
    from msprobe.acc_check.check import run_acc_check
    from msprobe.cli.compare import banner
    from msprobe.log import get_logger

    logger = get_logger()
    summary = run_acc_check(args.api_info, args.out_path, args.csv_path, args.save_error_data, logger,
                            options=check_options(args), config_path=args.config_path,
                            expected_framework=args.expected_framework)
    logger.info("acc_check summary (%s, device %s): %d APIs checked of %d supported (%d forward APIs in the "
                "dump%s%s), %d passed, %d with warnings, %d failed, %d skipped.", summary.framework, summary.device,
                summary.checked, summary.supported, summary.total,
                f", {summary.resumed} already recorded" if summary.resumed else "",
                f", {summary.filtered} dropped by -f" if summary.filtered else "", summary.passed, summary.warned,
                summary.failed, summary.skipped)
    logger.info("Results: %s and %s.", summary.result_path, summary.details_path)
    banner(logger, "msprobe acc_check ends successfully.")
    return 0
