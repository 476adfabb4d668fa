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
    python benchmarks/bench_ms_overhead.py --graph --repeats 3              # GRAPH_MODE taps (graph_mode.py)

`--graph` measures the GRAPH_MODE collector instead (ours only: the reference's L0 needs TensorDump, which the
CPU lacks): `ms_graph_child.py`, an MLP of 8 Dense/BatchNorm1d/ReLU blocks trained with TrainOneStepCell, 10 timed
steps after the compiling one, at L0 (statistics, md5, tensor), mix and L1, and with the taps compiled in but no
step recorded (`idle`); the compile time of step 0 is reported beside.

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
    ap.add_argument("--graph", action="store_true", help="measure the GRAPH_MODE collector (ms_graph_child.py)")
    args = ap.parse_args(argv)
    if args.graph:
        return graph_main(args)
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


GRAPH_CASES = (("plain", ["--level", "none"]), ("L0 statistics", ["--level", "L0"]),
               ("L0 md5", ["--level", "L0", "--task", "md5"]), ("L0 tensor", ["--level", "L0", "--task", "tensor"]),
               ("mix statistics", ["--level", "mix"]), ("L1 statistics", ["--level", "L1"]),
               ("L0 idle", ["--level", "L0", "--idle"]))
_COMPILE = re.compile(r"^compile wall ([0-9.]+)s$", re.M)
_CPU = re.compile(r"^train cpu ([0-9.]+)s$", re.M)
GRAPH_STEPS = 10


def graph_child(python: str, workdir: str, options: list) -> tuple:
    """(timed-loop wall, compile wall, timed-loop CPU time) of one ms_graph_child.py run."""
    out = os.path.join(workdir, "out")
    shutil.rmtree(out, ignore_errors=True)
    args = [python, os.path.join(ROOT, "benchmarks", "ms_graph_child.py"), "--steps", str(GRAPH_STEPS), "--out", out,
            *options]
    env = dict(os.environ, GLOG_v="3", PYTHONWARNINGS="ignore")
    proc = subprocess.run(args, cwd=workdir, capture_output=True, text=True, env=env)
    wall, compiled, cpu = _WALL.search(proc.stdout), _COMPILE.search(proc.stdout), _CPU.search(proc.stdout)
    if proc.returncode != 0 or wall is None or compiled is None or cpu is None:
        raise RuntimeError(f"ms_graph_child.py {' '.join(options)} failed (rc {proc.returncode}):\n"
                           f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return float(wall.group(1)), float(compiled.group(1)), float(cpu.group(1))


def graph_main(args) -> int:
    walls: dict = {label: [] for label, _ in GRAPH_CASES}
    compiles: dict = {label: [] for label, _ in GRAPH_CASES}
    cpus: dict = {label: [] for label, _ in GRAPH_CASES}
    with tempfile.TemporaryDirectory(prefix="bench_ms_graph_") as workdir:
        for repeat in range(args.repeats):
            for label, options in GRAPH_CASES:
                wall, compiled, cpu = graph_child(args.python, workdir, options)
                walls[label].append(wall)
                compiles[label].append(compiled)
                cpus[label].append(cpu)
                print(f"  run {repeat + 1}/{args.repeats} {label:<15} {wall:.3f} s, cpu {cpu:.3f} s (compile "
                      f"{compiled:.3f} s)", flush=True)
    plain, plain_cpu = min(walls["plain"]), min(cpus["plain"])
    figures: dict = {"steps": GRAPH_STEPS, "repeats": args.repeats}
    print()
    print(f"GRAPH_MODE MLP (8 x Dense 256/BatchNorm1d/ReLU, batch 64), {GRAPH_STEPS} timed steps; fastest of "
          f"{args.repeats} runs (median in brackets)")
    print("| case | loop wall | per step | overhead/step | CPU per step | CPU overhead/step | compile (step 0) |")
    print("|---|---|---|---|---|---|---|")
    for label, _ in GRAPH_CASES:
        fastest, median = min(walls[label]), statistics.median(walls[label])
        cpu = min(cpus[label])
        figures[label] = {"loop_s": fastest, "loop_median_s": median, "compile_s": min(compiles[label]),
                          "overhead_per_step_s": (fastest - plain) / GRAPH_STEPS, "cpu_s": cpu,
                          "cpu_overhead_per_step_s": (cpu - plain_cpu) / GRAPH_STEPS}
        print(f"| {label} | {fastest:.3f} s ({median:.3f}) | {fastest / GRAPH_STEPS * 1e3:.1f} ms | "
              f"{(fastest - plain) / GRAPH_STEPS * 1e3:+.1f} ms | {cpu / GRAPH_STEPS * 1e3:.1f} ms | "
              f"{(cpu - plain_cpu) / GRAPH_STEPS * 1e3:+.1f} ms | {min(compiles[label]):.2f} s |")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(figures, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
