#!/usr/bin/env python3
"""Benchmark of `msprobe graph` compare on the synthetic 20k-entry mix dump pair: wall time, CPU time and peak
memory (max RSS of the msprobe process or its largest worker, from wait4).

    python benchmarks/bench_graph.py                      # makes /tmp/b20 with make_dumps.py when missing
    python benchmarks/bench_graph.py --dumps /tmp/b20 --runs 3 --format db
    python benchmarks/bench_graph.py --ranks 8 -j 2 --baseline /path/to/other/checkout --runs 4

--ranks N compares a step folder of N ranks (hard links to the one pair). --baseline runs the same command with
another checkout of msprobe (its directory on PYTHONPATH) in turns with this one (ABBA order), so that both see the
same load of a shared machine.

Targets (issue 19): the 20k pair <= 3.5 s wall and <= 300 MB on 2 cores; 8 ranks with -j 2 no slower than the
code before issue 19."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
THIS = os.path.dirname(HERE)


def step_folder(dumps: str, ranks: int) -> str:
    """A step folder of `ranks` rank folders, each a hard link (or copy) of the pair in dumps."""
    root = os.path.join(dumps, f"ranks{ranks}")
    for side in ("target", "golden"):
        for rank in range(ranks):
            folder = os.path.join(root, side, f"rank{rank}")
            os.makedirs(folder, exist_ok=True)
            for name in ("dump.json", "stack.json", "construct.json"):
                target = os.path.join(folder, name)
                if not os.path.exists(target):
                    try:
                        os.link(os.path.join(dumps, side, name), target)
                    except OSError:
                        shutil.copy(os.path.join(dumps, side, name), target)
    return root


def run_once(code: str, inputs: str, fmt: str, jobs: int | None) -> tuple[float, float, float]:
    """(wall s, CPU s of the command and its workers, peak RSS MB of the largest process)."""
    out = tempfile.mkdtemp(prefix="bench_graph_")
    try:
        command = [sys.executable, "-c", "from msprobe.cli.main import console_main; console_main()", "graph",
                   "-tp", os.path.join(inputs, "target"), "-gp", os.path.join(inputs, "golden"), "-o", out,
                   "--format", fmt] + (["-j", str(jobs)] if jobs else [])
        start = time.perf_counter()
        # run in the output folder: `python -c` puts the working directory first on sys.path, before PYTHONPATH
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=code),
                                   cwd=out)
        _, status, usage = os.wait4(process.pid, 0)     # this command's usage (with its reaped workers)
        wall = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode:
            raise SystemExit(f"{' '.join(command)} failed (exit {process.returncode})")
        return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dumps", default="/tmp/b20", help="folder with target/ and golden/ (made when missing)")
    parser.add_argument("--entries", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--format", choices=("json", "db"), default="json")
    parser.add_argument("--ranks", type=int, default=0, help="compare a step folder of this many ranks")
    parser.add_argument("-j", "--jobs", type=int, default=None, help="passed to msprobe graph")
    parser.add_argument("--baseline", help="another msprobe checkout, run in turns with this one")
    args = parser.parse_args()
    if not os.path.isdir(os.path.join(args.dumps, "target")):
        subprocess.run([sys.executable, os.path.join(HERE, "make_dumps.py"), "--entries", str(args.entries),
                        args.dumps], check=True, stdout=subprocess.DEVNULL)
    dumps = os.path.abspath(args.dumps)
    inputs = step_folder(dumps, args.ranks) if args.ranks else dumps
    codes = {"this": THIS, **({"baseline": os.path.abspath(args.baseline)} if args.baseline else {})}
    results: dict = {name: [] for name in codes}
    for run in range(args.runs):
        order = list(codes) if run % 2 == 0 else list(codes)[::-1]
        for name in order:
            results[name].append(run_once(codes[name], inputs, args.format, args.jobs))
    what = f"{args.ranks} ranks" if args.ranks else "one pair"
    for name, runs in results.items():
        walls = [r[0] for r in runs]
        print(f"{name}: graph compare ({args.format}, {what}, {args.entries} entries, -j {args.jobs or 'default'}): "
              f"wall median {statistics.median(walls):.2f} s (min {min(walls):.2f}), CPU median "
              f"{statistics.median(r[1] for r in runs):.2f} s, peak RSS {max(r[2] for r in runs):.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
