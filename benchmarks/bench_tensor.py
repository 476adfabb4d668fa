#!/usr/bin/env python3
"""Tensor-mode `msprobe compare` on real GPT dumps (issue 41): ours beside the reference, interleaved.

The data (make_gpt_tensors.py, made once into benchmarks/data/): one training step of a 6-layer GPT (d_model 384,
seq 128, batch 8) dumped by our PyTorch collector at L1 in tensor mode, bfloat16 autocast target against float32
golden, as `.pt` files, and the same tensors in the MindSpore collector's `.npy` layout; a 24-layer twin is the
same dump at about 4x the bytes (linear cost), and `--memory` adds a batch-32 twin (tensors 4x larger).

Every case runs `msprobe compare -tp T -gp G -o OUT --csv` as a child process from a neutral folder (bytecode cached
under benchmarks/out/tensor/pycache, as an installed package has it), first once per tool unmeasured (it fills the
page cache and the bytecode cache: tensor throughput is measured warm), then `--rounds` rounds, each
running every tool once (interleaved, so a shared machine's load spreads over all of them). Reported: medians of
the wall time, of the child's user+system CPU time (os.wait4) and of its peak RSS; GB/s = bytes of both sides'
tensor files / median wall time of the whole command.

    python benchmarks/bench_tensor.py --quick                # 1x .pt and .npy, 3 rounds (about 3 min)
    python benchmarks/bench_tensor.py                        # + the 4x pair (linear cost), 3 rounds
    python benchmarks/bench_tensor.py --baseline TREE        # also a checkout of msprobe (before/after; --check
                                                             # compares the result tables cell by cell)
    python benchmarks/bench_tensor.py --memory               # + the batch-32 pair (peak memory vs largest tensor)

The reference is mindstudio-probe 26.2.0 in its own venvs (`--ref-pt`, `--ref-ms`: the MindSpore `.npy` pair
needs the MindSpore one); 'none' skips it.
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.path.join(HERE, "data")
OUT = os.path.join(HERE, "out", "tensor")
sys.path.insert(0, HERE)

import make_gpt_tensors  # noqa: E402  (benchmarks/ is not a package)

# dataset -> generate() arguments
DATASETS = {"gpt_l6": {"layers": 6, "npy": True}, "gpt_l24": {"layers": 24, "npy": True},
            "gpt_l6_b32": {"layers": 6, "batch": 32, "npy": False}}
# case -> (dataset, format, goal GB/s)
CASES = {"pt_1x": ("gpt_l6", "pt", 2.0), "npy_1x": ("gpt_l6", "npy", 3.0),
         "pt_4x": ("gpt_l24", "pt", 2.0), "npy_4x": ("gpt_l24", "npy", 3.0),
         "pt_1x_batch32": ("gpt_l6_b32", "pt", 2.0)}
QUICK = ["pt_1x", "npy_1x"]
FULL = ["pt_1x", "npy_1x", "pt_4x", "npy_4x"]


def ensure(name: str) -> dict:
    path = os.path.join(DATA, name)
    meta_path = os.path.join(path, "meta.json")
    if os.path.exists(meta_path):
        with open(meta_path) as handle:
            meta = json.load(handle)
        if meta.get("version") == make_gpt_tensors.VERSION and meta.get("request") == DATASETS[name]:
            return meta
    print(f"making {name} (make_gpt_tensors.py) ...", flush=True)
    os.makedirs(DATA, exist_ok=True)
    meta = make_gpt_tensors.generate(path, **DATASETS[name])
    meta["request"] = DATASETS[name]
    with open(meta_path, "w") as handle:
        json.dump(meta, handle, indent=1)
    return meta


def run(cmd: list, env: dict, cwd: str, log: str) -> dict:
    """Run a child; its wall time, user+system CPU time, peak RSS and exit code."""
    with open(log, "wb") as handle:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "sys": usage.ru_stime,
            "rss_mb": usage.ru_maxrss / 1024, "major_faults": usage.ru_majflt, "code": os.waitstatus_to_exitcode(status)}


def tools_for(fmt: str, args) -> dict:
    """tool -> (command prefix, environment)."""
    # bytecode cached as an installed package has it (pip compiles the reference's): written once, by the warm-up
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    clean["PYTHONPYCACHEPREFIX"] = os.path.join(OUT, "pycache")
    tools = {"ours": ([sys.executable, "-m", "msprobe"], dict(clean, PYTHONPATH=ROOT))}
    if args.baseline:
        tools["baseline"] = ([sys.executable, "-m", "msprobe"], dict(clean, PYTHONPATH=os.path.abspath(args.baseline)))
    ref = args.ref_pt if fmt == "pt" else args.ref_ms
    if ref.lower() != "none":
        if os.path.exists(ref):
            tools["reference"] = ([ref], clean)
        else:
            print(f"reference {ref} not found: skipped for .{fmt}")
    return tools


def result_rows(out_dir: str) -> list:
    found = glob.glob(os.path.join(out_dir, "compare_result_*.csv"))
    if len(found) != 1:
        return []
    with open(found[0], newline="") as handle:
        return list(csv.reader(handle))


METRICS = ("Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio",
           "Five Thousandths Err Ratio")


def agreement(ours: list, other: list) -> str:
    """How the six metric cells of two result tables agree, row by row (by NPU Name): equal texts, numbers equal,
    numbers within 1e-9 relative (the order of float64 sums), or different."""
    if not ours or not other:
        return "a result table is missing"
    index = {row[0]: row for row in other[1:]}
    counts = {"equal": 0, "within 1e-9": 0, "different": 0, "rows missing": 0}
    for row in ours[1:]:
        theirs = index.get(row[0])
        if theirs is None:
            counts["rows missing"] += 1
            continue
        for metric in METRICS:
            a, b = row[ours[0].index(metric)], theirs[other[0].index(metric)]
            if a == b:
                counts["equal"] += 1
                continue
            try:
                close = abs(float(a) - float(b)) <= 1e-9 * max(abs(float(a)), abs(float(b)))
            except ValueError:
                close = False
            counts["within 1e-9" if close else "different"] += 1
    return f"{len(ours) - 1} rows; cells " + ", ".join(f"{key} {value}" for key, value in counts.items())


def load_average() -> str:
    try:
        return " ".join(f"{v:.1f}" for v in os.getloadavg())
    except OSError:
        return "?"


def bench_case(case: str, args) -> list:
    dataset, fmt, goal = CASES[case]
    meta = ensure(dataset)
    info = meta["formats"][fmt]
    base = os.path.join(DATA, dataset, fmt)
    tools = tools_for(fmt, args)
    work = os.path.join(OUT, case)
    os.makedirs(work, exist_ok=True)
    figures = {tool: [] for tool in tools}
    print(f"{case}: {info['bytes'] / 1e9:.3f} GB in {info['files']} files, {info['entries']} entries; "
          f"tools {', '.join(tools)}", flush=True)
    for round_ in range(-1, args.rounds):        # round -1: warm-up, not counted
        for tool, (prefix, env) in tools.items():
            out_dir = os.path.join(work, tool)
            shutil.rmtree(out_dir, ignore_errors=True)
            cmd = prefix + ["compare", "-tp", os.path.join(base, "target", "dump.json"),
                            "-gp", os.path.join(base, "golden", "dump.json"), "-o", out_dir]
            if tool != "reference":
                cmd.append("--csv")
            figure = run(cmd, env, work, os.path.join(work, f"{tool}.log"))
            if figure["code"] != 0:
                raise SystemExit(f"{case} {tool} failed (exit {figure['code']}): see {work}/{tool}.log")
            if round_ >= 0:
                figures[tool].append(figure)
            print(f"  {'warm-up' if round_ < 0 else f'round {round_ + 1}'} {tool:<9} wall {figure['wall']:6.2f} s, "
                  f"CPU {figure['cpu']:6.2f} s ({figure['sys']:.2f} system), RSS {figure['rss_mb']:5.0f} MB, "
                  f"{figure['major_faults']} page faults that read the disk (load {load_average()})", flush=True)
    if args.check:
        ours = result_rows(os.path.join(work, "ours"))
        for other in ("baseline", "reference"):
            if other in tools:
                print(f"  metrics against the {other}: {agreement(ours, result_rows(os.path.join(work, other)))}",
                      flush=True)
    rows = []
    for tool, runs in figures.items():
        wall = statistics.median(r["wall"] for r in runs)
        rows.append({"case": case, "tool": tool, "gb": info["bytes"] / 1e9, "files": info["files"],
                     "wall": wall, "walls": [r["wall"] for r in runs],
                     "cpu": statistics.median(r["cpu"] for r in runs), "rss_mb": max(r["rss_mb"] for r in runs),
                     "gbps": info["bytes"] / 1e9 / wall, "goal": goal})
    return rows


PROFILE_CHILD = r'''
import json, os, sys, threading, time
started = time.process_time()
import msprobe.cli.main as cli  # first: it sets one BLAS thread per worker before numpy is imported
from msprobe.compare import pipeline
spent = {"read": 0.0, "kernel": 0.0}
lock = threading.Lock()

def timed(name, func):
    def wrapper(*args, **kwargs):
        begin = time.thread_time()
        try:
            return func(*args, **kwargs)
        finally:
            with lock:
                spent[name] += time.thread_time() - begin
    return wrapper

pipeline.read_tensor = timed("read", pipeline.read_tensor)
pipeline.compare_arrays = timed("kernel", pipeline.compare_arrays)
code = cli.main(sys.argv[1:])
spent["total"] = time.process_time() - started
print("PROFILE " + json.dumps(spent))
'''


def profile(case: str, args) -> str:
    """CPU time by stage of one run of ours with one worker thread (after a warm-up run): reading the tensor files
    (dump/tensors.read_tensor), the metrics (compare_arrays), the rest (start-up, imports, dump.json, matching,
    the verdict, the table)."""
    dataset, fmt, _ = CASES[case]
    meta = ensure(dataset)
    base = os.path.join(DATA, dataset, fmt)
    work = os.path.join(OUT, case, "profile")
    os.makedirs(work, exist_ok=True)
    script = os.path.join(work, "child.py")
    with open(script, "w") as handle:
        handle.write(PROFILE_CHILD)
    prefix, env = tools_for(fmt, argparse.Namespace(baseline=None, ref_pt="none", ref_ms="none"))["ours"]
    cmd = [sys.executable, script, "compare", "-tp", os.path.join(base, "target", "dump.json"),
           "-gp", os.path.join(base, "golden", "dump.json"), "-o", os.path.join(work, "out"), "--csv", "-j", "1"]
    found = []
    for _ in range(1 + args.rounds):
        shutil.rmtree(os.path.join(work, "out"), ignore_errors=True)
        output = subprocess.run(cmd, env=env, cwd=work, capture_output=True, text=True, check=True).stdout
        found.append(json.loads(output.split("PROFILE ", 1)[1]))
    runs = found[1:]
    median = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    elements = meta["formats"][fmt]["bytes"]
    rest = median["total"] - median["read"] - median["kernel"]
    return (f"{case} profile (-j 1, CPU s, median of {len(runs)}): total {median['total']:.2f} = reading the tensor "
            f"files {median['read']:.2f} + metrics {median['kernel']:.2f} ({median['kernel'] / elements * 1e9:.2f} "
            f"ns per file byte) + the rest {rest:.2f} (start-up, imports, dump.json, matching, verdict, table)")


def table(rows: list) -> str:
    lines = ["| case | tool | tensor GB | wall s (median; runs) | GB/s | CPU s (median) | peak RSS MB | goal |",
             "|---|---|---:|---|---:|---:|---:|---|"]
    for r in rows:
        goal = f">= {r['goal']} GB/s: {'ok' if r['gbps'] >= r['goal'] else 'MISSED'}" if r["tool"] == "ours" else ""
        runs = ", ".join(f"{w:.2f}" for w in r["walls"])
        lines.append(f"| {r['case']} | {r['tool']} | {r['gb']:.2f} | {r['wall']:.2f} ({runs}) | {r['gbps']:.2f} | "
                     f"{r['cpu']:.2f} | {r['rss_mb']:.0f} | {goal} |")
    return "\n".join(lines)


def summary(rows: list) -> list:
    by = {(r["case"], r["tool"]): r for r in rows}
    lines = []
    for case in CASES:
        ours, ref = by.get((case, "ours")), by.get((case, "reference"))
        if ours and ref:
            lines.append(f"{case}: ours {ref['wall'] / ours['wall']:.1f}x faster than the reference (wall), "
                         f"{ref['cpu'] / ours['cpu']:.1f}x less CPU")
        before = by.get((case, "baseline"))
        if ours and before:
            lines.append(f"{case}: ours / baseline: wall {ours['wall'] / before['wall']:.2f}, "
                         f"CPU {ours['cpu'] / before['cpu']:.2f}, RSS {ours['rss_mb']:.0f} / {before['rss_mb']:.0f} MB")
    for fmt in ("pt", "npy"):
        one, four = by.get((f"{fmt}_1x", "ours")), by.get((f"{fmt}_4x", "ours"))
        if one and four:
            lines.append(f"{fmt} 4x/1x: bytes x{four['gb'] / one['gb']:.2f}, wall x{four['wall'] / one['wall']:.2f}, "
                         f"CPU x{four['cpu'] / one['cpu']:.2f}, peak RSS {one['rss_mb']:.0f} -> {four['rss_mb']:.0f} MB")
    one, big = by.get(("pt_1x", "ours")), by.get(("pt_1x_batch32", "ours"))
    if one and big:
        lines.append(f"batch 32 / batch 8 (largest tensor x4): bytes x{big['gb'] / one['gb']:.2f}, "
                     f"peak RSS {one['rss_mb']:.0f} -> {big['rss_mb']:.0f} MB")
    return lines


def machine() -> str:
    model = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as handle:
            model = next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the 1x .pt and .npy pairs only")
    parser.add_argument("--cases", nargs="+", choices=sorted(CASES))
    parser.add_argument("--memory", action="store_true", help="also the batch-32 pair (largest tensor x4)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", metavar="TREE", help="a checkout of msprobe measured too (PYTHONPATH=TREE)")
    parser.add_argument("--check", action="store_true",
                        help="compare the metric cells of our result table with the baseline's and the reference's")
    parser.add_argument("--ref-pt", default="/work/venvs/ref-pt/bin/msprobe", help="the reference CLI for .pt")
    parser.add_argument("--ref-ms", default="/work/venvs/ref-ms/bin/msprobe", help="the reference CLI for .npy")
    parser.add_argument("--profile", action="store_true",
                        help="also the CPU time by stage of ours (one worker thread): reading, metrics, the rest")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    cases = args.cases or (QUICK if args.quick else FULL) + (["pt_1x_batch32"] if args.memory else [])
    for dataset in dict.fromkeys(CASES[c][0] for c in cases):
        ensure(dataset)
    started, load_before = time.time(), load_average()
    rows = []
    for case in cases:
        rows += bench_case(case, args)
    header = (f"bench_tensor.py, {time.strftime('%Y-%m-%d %H:%M')}, {machine()}; {args.rounds} rounds; load average "
              f"{load_before} at the start, {load_average()} at the end; {time.time() - started:.0f} s")
    notes = summary(rows) + ([profile(case, args) for case in cases] if args.profile else [])
    text = "\n".join([header, "", table(rows), ""] + notes)
    print("\n" + text)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"header": header, "rows": rows}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
