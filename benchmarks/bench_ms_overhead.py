"""Dump overhead of the MindSpore collector (issue 26): the refdata GPT script `ms_gpt.py`, unchanged, trained
for 2 steps (PyNative, CPU) at levels L0, L1 and mix with task statistics, by our collector and by the
reference's (mindstudio-probe 26.2.0), against plain runs of the same script in each interpreter.

The script prints the wall time of its training loop ("train wall"), which includes debugger.start(), the
forward and backward pass, the optimizer step, stop() and step() (writing the dump). The overhead per step is
(loop with the debugger - loop without) / steps, taken from the fastest of `--repeats` child runs of each
configuration (the least disturbed by other work on a shared machine; the medians are printed too); the children
of all configurations are interleaved so that a busy machine slows all of them alike.

    python benchmarks/bench_ms_overhead.py                                  # reference at /work/venvs/ref-ms
    python benchmarks/bench_ms_overhead.py --ref-python none --repeats 3    # ours only

Our interpreter needs mindspore 2.10 (numpy<2) and this msprobe (`pip install -e ".[mindspore]"`); the
reference interpreter needs mindspore 2.10 and mindstudio-probe 26.2.0, and must not have ours installed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT_DIR = os.path.join(ROOT, "tests", "fixtures", "ms_gpt")
LEVELS = ("L0", "L1", "mix")
_WALL = re.compile(r"^train wall ([0-9.]+)s$", re.M)


def run_child(python: str, workdir: str, level: str | None, steps: int) -> float:
    """The training-loop wall time of one run of ms_gpt.py (level None: without a debugger)."""
    args = [python, os.path.join(workdir, "ms_gpt.py"), "--steps", str(steps)]
    if level is None:
        args.append("--no-dump")
    else:
        out = os.path.join(workdir, "out")
        shutil.rmtree(out, ignore_errors=True)
        args += ["--task", "statistics", "--level", level, "--out", out]
    env = dict(os.environ, GLOG_v="3", PYTHONWARNINGS="ignore")
    proc = subprocess.run(args, cwd=workdir, capture_output=True, text=True, env=env)
    found = _WALL.search(proc.stdout)
    if proc.returncode != 0 or found is None:
        raise RuntimeError(f"{python} ms_gpt.py {level or 'plain'} failed (rc {proc.returncode}):\n"
                           f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return float(found.group(1))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=sys.executable, help="interpreter with our msprobe (default: this one)")
    ap.add_argument("--ref-python", default="/work/venvs/ref-ms/bin/python",
                    help="interpreter with mindstudio-probe 26.2.0; 'none' to measure ours only")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5, help="child runs per configuration (the fastest taken)")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)
    tools = {"ours": args.python}
    if args.ref_python.lower() != "none":
        if os.path.exists(args.ref_python):
            tools["reference"] = args.ref_python
        else:
            print(f"reference interpreter {args.ref_python} not found: measuring ours only")
    walls: dict = {(tool, level): [] for tool in tools for level in (None, *LEVELS)}
    with tempfile.TemporaryDirectory(prefix="bench_ms_") as workdir:
        for name in ("ms_gpt.py", "common_init.py"):
            shutil.copy(os.path.join(SCRIPT_DIR, name), workdir)
        for repeat in range(args.repeats):
            for tool, python in tools.items():
                for level in (None, *LEVELS):
                    wall = run_child(python, workdir, level, args.steps)
                    walls[(tool, level)].append(wall)
                    print(f"  run {repeat + 1}/{args.repeats} {tool:<9} {level or 'plain':<5} {wall:.3f} s",
                          flush=True)
    figures: dict = {"steps": args.steps, "repeats": args.repeats}
    for tool in tools:
        plain, plain_median = min(walls[(tool, None)]), statistics.median(walls[(tool, None)])
        figures[tool] = {"plain_loop_s": plain, "plain_loop_median_s": plain_median}
        for level in LEVELS:
            dumped, median = min(walls[(tool, level)]), statistics.median(walls[(tool, level)])
            figures[tool][level] = {"loop_s": dumped, "overhead_per_step_s": (dumped - plain) / args.steps,
                                    "loop_median_s": median,
                                    "overhead_per_step_median_s": (median - plain_median) / args.steps}
    print()
    print(f"ms_gpt.py, {args.steps} steps, task statistics; fastest of {args.repeats} runs (median in brackets); "
          "overhead per step = (loop with the debugger - plain loop) / steps")
    print("| level | " + " | ".join(f"{t} plain loop | {t} loop | {t} overhead/step" for t in tools)
          + (" | ours / reference |" if "reference" in tools else " |"))
    print("|---" * (1 + 3 * len(tools) + ("reference" in tools)) + "|")
    for level in LEVELS:
        cells = []
        for tool in tools:
            f = figures[tool]
            cells += [f"{f['plain_loop_s']:.3f} s ({f['plain_loop_median_s']:.3f})",
                      f"{f[level]['loop_s']:.3f} s ({f[level]['loop_median_s']:.3f})",
                      f"{f[level]['overhead_per_step_s']:.3f} s ({f[level]['overhead_per_step_median_s']:.3f})"]
        if "reference" in tools:
            ratio = (figures["ours"][level]["overhead_per_step_s"]
                     / figures["reference"][level]["overhead_per_step_s"])
            figures.setdefault("ratio", {})[level] = ratio
            cells.append(f"{ratio:.2f} ({'ok' if ratio <= 1 / 3 else 'MISSED'}: goal <= 0.33)")
        print(f"| {level} | " + " | ".join(cells) + " |")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(figures, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
