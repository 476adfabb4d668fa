"""`msprobe <command>`: the dispatcher. Command modules are imported lazily so that -h stays fast."""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys

from msprobe.names import error_line
from msprobe.version import __version__

# Parallelism is explicit (rank processes, tensor threads); BLAS thread pools inside each worker thread would
# oversubscribe the cores and make tensor compares several times slower. Set before numpy is imported.
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

# command name -> (module with add_arguments/run, one-line help). Only commands that exist are listed.
COMMANDS = {
    "compare": ("msprobe.cli.compare", "compare two dumps (files or rank/step folders) and write result tables"),
    "merge_result": ("msprobe.cli.merge_result", "merge chosen APIs and metrics of all ranks' compare results"),
    "report": ("msprobe.cli.report", "make a self-contained HTML report from a compare result .csv/.xlsx"),
    "acc_check": ("msprobe.cli.acc_check", "replay the APIs of a PyTorch or MindSpore dump against a high-precision "
                  "CPU benchmark"),
    "multi_acc_check": ("msprobe.cli.multi_acc_check", "acc_check with the APIs split over devices (worker processes)"),
    "op_generate": ("msprobe.cli.op_generate", "write a standalone script replaying one dumped PyTorch API vs CPU"),
    "graph": ("msprobe.cli.graph", "build/compare hierarchical model graphs (.vis) for TensorBoard"),
    "triage": ("msprobe.cli.triage", "run two training commands with the collector injected and find the culprit op, "
               "its cause and evidence (statistics, tensors, replay)"),
    "code_mapping": ("msprobe.cli.code_mapping", "map MindSpore static-graph dump data to IR nodes and source lines"),
    "monitor": ("msprobe.cli.monitor", "read a training monitor's output: name the first anomaly and write the dump "
                "that looks at it (analyse), or draw the run as one HTML page (report)"),
}

ALIASES = {"graph": ["graph_visualize"]}

EPILOG = """examples:
  msprobe compare -tp target/step0/rank0/dump.json -gp golden/step0/rank0/dump.json -o out
  msprobe merge_result -i compare_results -o merged -config merge_config.yaml
  msprobe acc_check -api_info dump_L1/step0/rank0/dump.json -o acc
  msprobe triage --target "python train.py --bf16" --golden "python train.py" -o triage_out
  msprobe code_mapping --ir graph_build_0.ir --dump_data dump/rank_0/Net/0/0 -o out
  msprobe monitor analyse -d monitor_output
  msprobe compare -h
  msprobe -f mindspore compare -i compare.json -o out      (the 1.x form, same engine)

Run `msprobe <command> -h` for the options of a command."""


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: `msprobe compare: error: ... (see -h)`, exit code 2."""

    def error(self, message):
        sys.stderr.write(error_line(f"{self.prog}: error: {message} (see {self.prog} -h)") + "\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="msprobe", description="msprobe: find where two training runs part, by how much, and why.",
                    epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-V", "--version", action="version", version=f"msprobe {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="<command>", parser_class=Parser)
    parser.subcommands = {}
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        sub = commands.add_parser(name, help=help_text, aliases=ALIASES.get(name, []), description=module.DESCRIPTION, epilog=module.EPILOG,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(sub)
        sub.set_defaults(_module=module_name)
        parser.subcommands[name] = sub
        for alias in ALIASES.get(name, []):
            parser.subcommands[alias] = sub
    return parser


def main(argv: list | None = None) -> int:
    from msprobe.cli.legacy import command_of, translate
    from msprobe.errors import MsprobeError, os_error_text

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        argv = translate(argv)
    except MsprobeError as exc:     # the 1.x form's compare.json: missing, a directory, not JSON...
        sys.stderr.write(error_line(f"msprobe{command_of(argv)}: error: {exc}") + "\n")
        return exc.exit_code
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        (parser.subcommands.get(args.command) or parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    if not args.command:
        parser.print_help()
        return 2
    from msprobe.log import get_logger, setup_logging
    from msprobe.scale.stamp import release_claims

    setup_logging(take_over=True)
    module = importlib.import_module(args._module)
    # A compare builds millions of small acyclic objects, freed by reference counting; the cyclic collector
    # would scan them again and again (about a third of the run time), so it is paused while a command runs.
    gc.disable()
    try:
        return module.run(args) or 0
    except MsprobeError as exc:
        sys.stderr.write(error_line(f"msprobe {args.command}: error: {exc}") + "\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write(f"msprobe {args.command}: interrupted.\n")
        return 130
    except MemoryError:
        sys.stderr.write(f"msprobe {args.command}: error: out of memory.\n")
        return 1
    except OSError as exc:   # the machine, not msprobe: disk full, read-only or vanished storage, name too long
        if os.environ.get("MSPROBE_DEBUG"):
            raise
        sys.stderr.write(error_line(f"msprobe {args.command}: error: {os_error_text(exc)}") + "\n")
        return 1
    except Exception as exc:  # last line of defence: one line, no traceback unless asked for
        if os.environ.get("MSPROBE_DEBUG"):
            raise
        get_logger().debug("internal error", exc_info=True)
        sys.stderr.write(error_line(f"msprobe {args.command}: internal error: {type(exc).__name__}: {exc} "
                                   "(set MSPROBE_DEBUG=1 to see the traceback, and please report it)") + "\n")
        return 3
    finally:
        release_claims()
        gc.enable()


def console_main() -> None:
    """The `msprobe` console script: run, flush, and leave without tearing the heap down object by object
    (for a large compare that takes a noticeable fraction of a second; every output is already complete)."""
    try:
        code = main()
    except SystemExit as exc:   # argparse -h / usage errors
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        if exc.code is not None and not isinstance(exc.code, int):
            sys.stderr.write(f"{exc.code}\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    raise SystemExit(main())
