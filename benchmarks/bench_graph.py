#!/usr/bin/env python3
"""Benchmark of `msprobe graph` compare on the synthetic 20k-entry mix dump pair: wall time and peak memory
(max RSS of the whole command, from /usr/bin/time or resource.getrusage of the child).

    python benchmarks/bench_graph.py                      # makes /tmp/b20 with make_dumps.py when missing
    python benchmarks/bench_graph.py --dumps /tmp/b20 --runs 3 --format db

Targets (issue 7): graph compare <= 2 s wall and <= 300 MB peak."""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def run_once(dumps: str, fmt: str) -> tuple[float, float, int]:
    out = tempfile.mkdtemp(prefix="bench_graph_")
    try:
        command = [sys.executable, "-c", "from msprobe.cli.main import console_main; console_main()", "graph",
                   "-tp", os.path.join(dumps, "target"), "-gp", os.path.join(dumps, "golden"), "-o", out,
                   "--format", fmt]
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        start = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        size = sum(os.path.getsize(os.path.join(out, n)) for n in os.listdir(out))
        return wall, max(peak, before) / 1024, size
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dumps", default="/tmp/b20", help="folder with target/ and golden/ (made when missing)")
    parser.add_argument("--entries", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--format", choices=("json", "db"), default="json")
    args = parser.parse_args()
    if not os.path.isdir(os.path.join(args.dumps, "target")):
        subprocess.run([sys.executable, os.path.join(HERE, "make_dumps.py"), "--entries", str(args.entries),
                        args.dumps], check=True, stdout=subprocess.DEVNULL)
    results = [run_once(args.dumps, args.format) for _ in range(args.runs)]
    walls = [r[0] for r in results]
    # ru_maxrss of RUSAGE_CHILDREN is the largest child so far: the peak over all runs
    print(f"graph compare ({args.format}), {args.entries} entries: wall median {statistics.median(walls):.2f} s "
          f"(min {min(walls):.2f}), peak RSS {max(r[1] for r in results):.0f} MB, "
          f"output {results[-1][2] / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
