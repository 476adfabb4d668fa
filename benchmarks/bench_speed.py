#!/usr/bin/env python3
"""Speed of the statistics compare and of `msprobe graph` beside the reference tool, in one run (issue 41).

    python benchmarks/bench_speed.py --quick          # 3 interleaved rounds, prints the table (~4 minutes)
    python benchmarks/bench_speed.py --runs 5         # 5 rounds
    python benchmarks/bench_speed.py --no-ref         # ours and the parse floor only (seconds)
    python benchmarks/bench_speed.py --ref /path/to/reference/bin/msprobe --cases compare build

Cases, on the 20k-entry statistics pair of run.py (benchmarks/data/stats_20k, two 18 MB dump.json; made when
missing):

  compare   `msprobe compare -tp target/dump.json -gp golden/dump.json --csv` (the reference: its default, csv)
  graph     `msprobe graph -tp target -gp golden` (the reference: `msprobe graph_visualize`)
  build     `msprobe graph -tp target` (the reference: `msprobe graph_visualize -tp target`)
  floor     the parse floor: one process of ours that imports the reader and reads both dump.json
            (msprobe.dump.reader.read_dump, the garbage collector paused as msprobe pauses it)

Every round runs every case of both tools as child processes, the tools in turns (ABBA: the first tool of a round
alternates), so that both see the same load of a shared machine. Per run: wall time, CPU time (user + system of
the child and its reaped children, from wait4) and peak RSS (the largest process, from wait4). Medians over the
rounds are reported; ratios are taken of the medians, by wall time and by CPU time (the CPU ratio is the one to
trust on a loaded machine). Our children run with a bytecode cache (PYTHONPYCACHEPREFIX under benchmarks/out), as an
installed package has one, and one warm-up run of each case fills it first. The load average before and after is
printed: wall times of a loaded machine mean little.

Goals (issue 41): compare <= 3x the parse floor and <= 200 MB; graph and build >= 8x the reference.
The table and the raw runs go to benchmarks/out/speed.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from run import DATA, OUT, ensure_dataset, msprobe_revision  # noqa: E402

REFERENCE = "/work/venvs/ref-pt/bin/msprobe"
CASES = ("compare", "graph", "build")
FLOOR = ("import gc, sys; gc.disable(); from msprobe.dump.reader import read_dump; "
         "read_dump(sys.argv[1], 'target', with_stack=False); read_dump(sys.argv[2], 'golden', with_stack=False)")
GOALS = {"compare": ("floor", 3.0, 200.0), "graph": ("reference", 8.0, None), "build": ("reference", 8.0, None)}


def commands(tool: str, case: str, dataset: str, out: str, reference: str) -> list:
    target, golden = os.path.join(dataset, "target"), os.path.join(dataset, "golden")
    if tool == "ours":
        head = [sys.executable, "-m", "msprobe"]
        if case == "compare":
            return head + ["compare", "-tp", os.path.join(target, "dump.json"), "-gp", os.path.join(golden, "dump.json"),
                           "-o", out, "--csv"]
        return head + ["graph", "-tp", target] + (["-gp", golden] if case == "graph" else []) + ["-o", out]
    if case == "compare":
        return [reference, "compare", "-tp", os.path.join(target, "dump.json"), "-gp",
                os.path.join(golden, "dump.json"), "-o", out]
    return [reference, "graph_visualize", "-tp", target] + (["-gp", golden] if case == "graph" else []) + ["-o", out]


def our_environment() -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHONPYCACHEPREFIX=os.path.join(OUT, "pycache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run_once(command: list, env: dict, log: str) -> dict:
    """Run one child in a fresh output folder (also its working directory: `-m msprobe` would otherwise find a
    checkout in the current directory before PYTHONPATH); wall, CPU and peak RSS."""
    out = tempfile.mkdtemp(prefix="bench_speed_", dir=OUT)
    command = [out if part == "{out}" else part for part in command]
    try:
        with open(log, "ab") as handle:
            started = time.perf_counter()
            process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=out)
            _, status, usage = os.wait4(process.pid, 0)
            wall = time.perf_counter() - started
        code = os.waitstatus_to_exitcode(status)
        if code:
            raise SystemExit(f"{' '.join(command)} failed (exit {code}); see {log}")
        return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024}
    finally:
        shutil.rmtree(out, ignore_errors=True)


def plan(cases: list, with_reference: bool) -> list:
    """(tool, case) pairs of one round; the floor goes with the compare."""
    pairs = []
    for case in cases:
        pairs.append(("ours", case))
        if with_reference:
            pairs.append(("reference", case))
        if case == "compare":
            pairs.append(("ours", "floor"))
    return pairs


def measure(args) -> dict:
    ensure_dataset("stats_20k")
    dataset = os.path.join(DATA, "stats_20k")
    os.makedirs(OUT, exist_ok=True)
    reference = args.ref if args.ref and os.path.exists(args.ref) else None
    if args.ref and not reference and not args.no_ref:
        print(f"reference {args.ref} not found: ours only")
    env_ours = our_environment()
    env_reference = dict(os.environ)
    env_reference.pop("PYTHONPATH", None)
    pairs = plan(args.cases, reference is not None and not args.no_ref)
    log = os.path.join(OUT, "speed.log")
    open(log, "wb").close()

    def child(tool: str, case: str) -> dict:
        if case == "floor":
            command = [sys.executable, "-c", FLOOR, os.path.join(dataset, "target", "dump.json"),
                       os.path.join(dataset, "golden", "dump.json")]
        else:
            command = commands(tool, case, dataset, "{out}", reference or "")
        return run_once(command, env_ours if tool == "ours" else env_reference, log)

    for tool, case in pairs:            # warm-up: the bytecode cache, the page cache
        if tool == "ours":
            child(tool, case)
    runs: dict = {f"{tool}:{case}": [] for tool, case in pairs}
    for round_ in range(args.runs):
        order = pairs if round_ % 2 == 0 else pairs[::-1]
        for tool, case in order:
            result = child(tool, case)
            runs[f"{tool}:{case}"].append(result)
            print(f"  round {round_ + 1}/{args.runs} {tool:9s} {case:7s} wall {result['wall']:6.2f} s  CPU "
                  f"{result['cpu']:6.2f} s  {result['rss_mb']:5.0f} MB", flush=True)
    return runs


def median(runs: list, key: str) -> float:
    return statistics.median(run[key] for run in runs)


def table(runs: dict, cases: list) -> str:
    lines = ["| work | reference: wall / CPU / peak RSS | ours: wall / CPU / peak RSS | reference / ours "
             "(wall, CPU) | ours / parse floor (wall, CPU) | goal | met (by CPU) |",
             "|---|---|---|---|---|---|---|"]
    floor = runs.get("ours:floor")
    for case in cases:
        ours = runs[f"ours:{case}"]
        ref = runs.get(f"reference:{case}")
        cells = [case]
        cells.append(f"{median(ref, 'wall'):.2f} s / {median(ref, 'cpu'):.2f} s / {max(r['rss_mb'] for r in ref):.0f} MB"
                     if ref else "-")
        cells.append(f"{median(ours, 'wall'):.2f} s / {median(ours, 'cpu'):.2f} s / "
                     f"{max(r['rss_mb'] for r in ours):.0f} MB")
        speedup = (median(ref, "wall") / median(ours, "wall"), median(ref, "cpu") / median(ours, "cpu")) if ref \
            else None
        cells.append(f"x{speedup[0]:.1f}, x{speedup[1]:.1f}" if speedup else "-")
        over_floor = (median(ours, "wall") / median(floor, "wall"), median(ours, "cpu") / median(floor, "cpu")) \
            if floor and case == "compare" else None
        cells.append(f"{over_floor[0]:.2f}x, {over_floor[1]:.2f}x" if over_floor else "-")
        against, factor, memory = GOALS[case]
        if against == "floor":
            cells.append(f"<= {factor:g}x the floor" + (f", <= {memory:g} MB" if memory else ""))
            met = over_floor is not None and over_floor[1] <= factor and (
                memory is None or max(r["rss_mb"] for r in ours) <= memory)
        else:
            cells.append(f">= {factor:g}x the reference")
            met = speedup is not None and speedup[1] >= factor
        cells.append("yes" if met else "no" if (over_floor or speedup) else "-")
        lines.append("| " + " | ".join(cells) + " |")
    if floor:
        lines.append(f"| parse floor (ours, reads both dump.json) | - | {median(floor, 'wall'):.2f} s / "
                     f"{median(floor, 'cpu'):.2f} s / {max(r['rss_mb'] for r in floor):.0f} MB | - | 1x | - | - |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="3 rounds (the default is 5)")
    parser.add_argument("--runs", type=int, default=None, help="rounds (at least 3 for a median worth the name)")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--ref", default=REFERENCE, help=f"the reference's msprobe command (default {REFERENCE})")
    parser.add_argument("--no-ref", action="store_true", help="ours and the parse floor only")
    args = parser.parse_args(argv)
    args.runs = args.runs or (3 if args.quick else 5)
    load_before = os.getloadavg()
    started = time.perf_counter()
    runs = measure(args)
    load_after = os.getloadavg()
    header = (f"bench_speed.py, {time.strftime('%Y-%m-%d %H:%M')}, {platform.node()}, {os.cpu_count()} cores, "
              f"python {platform.python_version()}, {msprobe_revision()}; {args.runs} interleaved rounds, medians; "
              f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after; "
              f"{time.perf_counter() - started:.0f} s")
    text = header + "\n\n" + table(runs, args.cases)
    print("\n" + text)
    with open(os.path.join(OUT, "speed.md"), "w") as handle:
        handle.write(text + "\n")
    with open(os.path.join(OUT, "speed.json"), "w") as handle:
        json.dump({"header": header, "runs": runs}, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
