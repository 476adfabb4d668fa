"""`msprobe triage`: from two training commands to the culprit op and its evidence, in one command."""

from __future__ import annotations

import argparse
import json
import os
import sys

DESCRIPTION = ("Run the whole precision-debugging loop on two training commands, without a change to the scripts: "
               "the collector is injected into each run (through a sitecustomize on PYTHONPATH), one step is dumped "
               "and the run stopped; round 1 compares the statistics (the verdict and -da), round 2 dumps and "
               "compares the real tensors of the culprit and its module, round 3 replays the culprit API against the "
               "CPU high-precision benchmark. The answer: the culprit, its module and source line, the category of "
               "cause with advice, the evidence of each round and the commands that reproduce it, as one HTML page "
               "(<-o>/triage.html) and a console summary. Exit status 0 when the runs agree, 1 when a culprit is "
               "named or a run failed, 2 on error; stopped by Ctrl-C, SIGTERM or SIGHUP, it ends both runs and exits 128 + "
               "the signal's number.")
EPILOG = """examples:
  # a target against a golden command (each runs in its own process group, one step each per round)
  msprobe triage --target "python train.py --bf16" --golden "python train.py" -o triage_out

  # no golden: the same command run twice (is the step deterministic?)
  msprobe triage --target "python train.py"

  # several ranks, the third step, at most 10 minutes per run, dumps kept, one JSON object on stdout
  msprobe triage --target "torchrun --nproc_per_node 2 train.py --bf16" --golden "torchrun --nproc_per_node 2 \\
      train.py" --step 2 --timeout 600 --keep-dumps --json

  # start from existing statistics dumps (round 1 only; with the commands, rounds 2 and 3 too)
  msprobe triage -tp target_dump/step0 -gp golden_dump/step0 --target "python train.py --bf16" --golden \\
      "python train.py"

Every dump and output goes into a new folder under -o (a rerun never mixes with an earlier triage); round 2's
tensor dumps are removed at the end unless --keep-dumps. See docs/triage.md."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", metavar="CMD", help="the training command under suspicion (run by the shell)")
    parser.add_argument("--golden", metavar="CMD", help="the reference training command (default: --target again)")
    parser.add_argument("-tp", "--target_path", metavar="DUMP", help="an existing statistics dump of the target "
                        "(dump.json, or a step folder of rank folders)")
    parser.add_argument("-gp", "--golden_path", metavar="DUMP", help="the golden's existing statistics dump")
    parser.add_argument("-o", "--output_path", default="triage_out", metavar="DIR",
                        help="where every dump, log and report goes (default ./triage_out): each triage in a new "
                        "folder of its own there, DIR/triage_<stamp>/, and DIR/triage.html the latest answer")
    parser.add_argument("--step", type=_non_negative, default=0, metavar="N", help="the step to dump (default 0)")
    parser.add_argument("--level", choices=("mix", "L1"), default="mix", help="collector level of round 1 "
                        "(default mix: modules and APIs)")
    parser.add_argument("--framework", choices=("auto", "pytorch", "mindspore"), default="auto",
                        help="which framework the collector hooks (default: whichever the run imports)")
    parser.add_argument("--timeout", type=_positive, metavar="S", help="seconds per run; a run past it is stopped "
                        "and its partial dump used")
    parser.add_argument("--no-stop", dest="stop", action="store_false",
                        help="let each run go on after the dumped step (default: stop it there)")
    parser.add_argument("--keep-dumps", action="store_true", help="keep round 2's tensor dumps (default: removed; "
                        "round 1's statistics dumps always stay)")
    parser.add_argument("--json", action="store_true", help="print the findings as one JSON object")


def _non_negative(text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"invalid step {text!r} (a non-negative integer)")
    return int(text)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"invalid timeout {text!r} (seconds > 0)")
    return value


def run(args: argparse.Namespace) -> int:
    import logging

    from msprobe.errors import MsprobeError
    from msprobe.log import get_logger
    from msprobe.names import printable
    from msprobe.triage.launch import Interrupted
    from msprobe.triage.loop import triage

    # the rounds' compares log to the console; the triage's summary (or --json's one object) is the output, and the
    # compares' details are in their files under -o
    get_logger().setLevel(logging.ERROR)

    def progress(text: str) -> None:
        if sys.stderr.isatty():
            sys.stderr.write(f"msprobe triage: {text}\n")

    try:
        findings = triage(args.target, args.golden, output_dir=args.output_path, step=args.step, level=args.level,
                          framework=args.framework, timeout=args.timeout, keep_dumps=args.keep_dumps, stop=args.stop,
                          target_dump=args.target_path, golden_dump=args.golden_path, progress=progress)
    except Interrupted as exc:        # Ctrl-C, SIGTERM, SIGHUP: the runs were ended, the partial answer written
        folder = getattr(exc, "folder", None) or os.path.abspath(args.output_path)
        sys.stderr.write(f"msprobe triage: interrupted ({exc.name}): the runs were stopped; what finished is in "
                         f"{printable(folder)}\n")
        return 128 + int(exc.signum)
    except MsprobeError as exc:       # an error is exit status 2 here: 1 means a culprit was named
        exc.exit_code = 2
        raise
    except OSError as exc:
        from msprobe.errors import os_error_text

        error = MsprobeError(os_error_text(exc))
        error.exit_code = 2
        raise error from None
    if args.json:
        sys.stdout.write(json.dumps(findings.to_dict(), ensure_ascii=False, default=str) + "\n")
    else:
        sys.stdout.write("\n".join(printable(line) for line in findings.lines()) + "\n")
    return findings.exit_code
