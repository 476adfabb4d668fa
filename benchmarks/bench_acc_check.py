#!/usr/bin/env python3
"""Benchmark of `msprobe acc_check`: APIs per second on the TinyGPT L1 statistics dump (random-data mode, CPU
device vs CPU float64 benchmark), the whole command in-process including reading the dump and writing the CSVs.

    python benchmarks/bench_acc_check.py                  # tests/fixtures/stats_L1_step0/target/dump.json
    python benchmarks/bench_acc_check.py --dump path/to/dump.json --runs 5
    # the refdata MindSpore 2.10 L1 dump (tests/fixtures/ms_stat_L1_step0), in an environment with mindspore
    /tmp/msenv/bin/python benchmarks/bench_acc_check.py --mindspore
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DUMP = os.path.join(HERE, "..", "tests", "fixtures", "stats_L1_step0", "target", "dump.json")
MINDSPORE_DUMP = os.path.join(HERE, "..", "tests", "fixtures", "ms_stat_L1_step0", "dump.json")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dump", default=DEFAULT_DUMP, help="dump.json to check (default: the TinyGPT L1 dump)")
    parser.add_argument("--mindspore", action="store_true",
                        help="check the refdata MindSpore L1 dump instead (needs mindspore)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs (the median is reported)")
    args = parser.parse_args()
    if args.mindspore:
        args.dump = MINDSPORE_DUMP

    os.environ.setdefault("MSPROBE_LOG_LEVEL", "2")
    from msprobe.acc_check.check import run_acc_check
    from msprobe.log import setup_logging

    setup_logging()
    times, checked = [], 0
    for run in range(args.runs + 1):      # the first run warms up the framework's kernels and is not counted
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            summary = run_acc_check(args.dump, out)
            elapsed = time.perf_counter() - start
        checked = summary.checked
        if run:
            times.append(elapsed)
    median = statistics.median(times)
    print(f"acc_check {os.path.basename(os.path.dirname(os.path.abspath(args.dump)))}/dump.json "
          f"({summary.framework}): {checked} APIs ({summary.passed} passed, {summary.failed} failed, "
          f"{summary.skipped} skipped) in {median:.2f} s (median of {len(times)}) = {checked / median:.0f} APIs/s "
          f"on {summary.device}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
