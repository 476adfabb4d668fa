"""Scale benchmarks.

Linear growth (issue 41, `--linear`): the statistics compare (`--csv`) and `msprobe graph` (compare of the pair, and
build of one dump) of make_dumps.py pairs of 1x, 5x and 25x the entries of the 20k pair (run.py's stats_20k,
stats_100k, stats_500k), each a child process (CPU time of the child from wait4, median of --repeat runs; peak RSS).
The cost per entry at 5x and 25x against 1x says whether the cost grows linearly with the work (1.0 = linear).

    python benchmarks/bench_scale.py --linear                 # 1x, 5x, 25x; about 10 minutes on 2 cores
    python benchmarks/bench_scale.py --linear --factors 1 5   # quicker

Scale-out (issue 11, the default): a step folder of N ranks compared with the local backend and with the Ray backend
(a Ray instance the command starts itself, and a running one), the resume of a finished run, and the same for
real-tensor ranks. Rank folders are hard links to one generated dump pair, so N ranks cost no extra disk; the
tensor files are therefore read from the page cache (warm), which measures the compute side, not the storage.

    python benchmarks/bench_scale.py                  # 16 statistics ranks, 8 tensor ranks; prints markdown
    python benchmarks/bench_scale.py --ranks 32 --tensor-ranks 0

Needs `pip install "msprobe-toolkit[ray]"` for the Ray cases (they are skipped without it). See docs/scaling.md for how
these figures size a cluster.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from run import DATA, OUT, ensure_dataset, msprobe_command, run_child  # noqa: E402

SIDES = ("target", "golden")


def _link_tree(source: str, target: str) -> None:
    for folder, _, files in os.walk(source):
        destination = os.path.join(target, os.path.relpath(folder, source))
        os.makedirs(destination, exist_ok=True)
        for name in files:
            if name == "meta.json":
                continue
            try:
                os.link(os.path.join(folder, name), os.path.join(destination, name))
            except OSError:
                shutil.copy(os.path.join(folder, name), os.path.join(destination, name))


def step_folder(dataset: str, ranks: int) -> tuple[str, str, int]:
    """<DATA>/<dataset>_scale<N>/{target,golden}/rank<i>: hard links to the dataset; returns the two folders and
    the bytes one rank holds (both sides: dump.json, stack.json, construct.json, tensor files)."""
    source = os.path.join(DATA, dataset)
    root = os.path.join(DATA, f"{dataset}_scale{ranks}")
    if not os.path.isdir(root):
        for side in SIDES:
            for rank in range(ranks):
                _link_tree(os.path.join(source, side), os.path.join(root, side, f"rank{rank}"))
    size = sum(os.path.getsize(os.path.join(folder, name))
               for side in SIDES for folder, _, files in os.walk(os.path.join(source, side)) for name in files)
    return os.path.join(root, "target"), os.path.join(root, "golden"), size


REPEAT = [1]   # runs per case; the fastest is reported (other load on the machine only ever slows a run down)


def measure(label: str, args: list, rows: list, ranks: int, rank_bytes: int, fresh: bool = True) -> None:
    out = os.path.join(OUT, "scale_out")
    log = os.path.join(OUT, "scale_" + "".join(c if c.isalnum() else "_" for c in label) + ".log")
    best = None
    for _ in range(REPEAT[0]):
        if fresh:
            shutil.rmtree(out, ignore_errors=True)
        wall, rss, code, _ = run_child(msprobe_command() + args + ["-o", out], log_path=log)
        if code != 0:
            raise SystemExit(f"{label} failed (exit {code}); see {log}")
        best = (wall, rss) if best is None or wall < best[0] else best
    rows.append((label, ranks, ranks * rank_bytes / 1e9, *best))


def cases(dataset: str, ranks: int, rows: list, address: str | None) -> None:
    """Without `address`: the local backend and a Ray instance started by the command; with it: a running
    cluster, then the re-run of that complete run."""
    target, golden, rank_bytes = step_folder(dataset, ranks)
    cores = os.cpu_count() or 1
    base = ["compare", "-tp", target, "-gp", golden, "--csv", "-c", "-j", str(cores)]
    name = f"{dataset} x {ranks}"
    if address is None:
        measure(f"{name}: local, -j {cores}", base, rows, ranks, rank_bytes)
        if ray_installed():
            measure(f"{name}: ray, local instance started by the command", base + ["--backend", "ray"], rows,
                    ranks, rank_bytes)
        return
    ray_args = base + ["--backend", "ray", "--ray-address", address]
    measure(f"{name}: ray, running cluster", ray_args, rows, ranks, rank_bytes)
    measure(f"{name}: ray, re-run of the complete run (resume)", ray_args, rows, ranks, rank_bytes, fresh=False)


LINEAR = {1: "stats_20k", 5: "stats_100k", 25: "stats_500k"}     # factor of the 20k pair -> run.py dataset
WORK = ("compare", "graph", "build")


def child_cpu(command: list) -> tuple[float, float, float]:
    """(wall s, CPU s of the child and its reaped children, peak RSS MB) of one run of ours, in a fresh output folder
    that is also its working directory (so `-m msprobe` takes this checkout, from PYTHONPATH)."""
    out = tempfile.mkdtemp(prefix="bench_linear_", dir=OUT)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
               PYTHONPYCACHEPREFIX=os.path.join(OUT, "pycache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    try:
        started = time.perf_counter()
        process = subprocess.Popen(command + ["-o", out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   env=env, cwd=out)
        _, status, usage = os.wait4(process.pid, 0)
        if os.waitstatus_to_exitcode(status):
            raise SystemExit(f"{' '.join(command)} failed")
        return time.perf_counter() - started, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024
    finally:
        shutil.rmtree(out, ignore_errors=True)


def linear(factors: list, repeat: int, kinds: list) -> None:
    """The three kinds of work at each factor; per-entry CPU against the 1x pair."""
    from run import DATASETS

    rows = []
    for factor in factors:
        dataset = LINEAR[factor]
        meta = ensure_dataset(dataset)
        root = os.path.join(DATA, dataset)
        target, golden = os.path.join(root, "target"), os.path.join(root, "golden")
        head = [sys.executable, "-m", "msprobe"]
        work = {"compare --csv": head + ["compare", "-tp", os.path.join(target, "dump.json"), "-gp",
                                         os.path.join(golden, "dump.json"), "--csv"],
                "graph (compare)": head + ["graph", "-tp", target, "-gp", golden],
                "graph (build)": head + ["graph", "-tp", target]}
        for label, command in work.items():
            if WORK[list(work).index(label)] not in kinds:
                continue
            runs = [child_cpu(command) for _ in range(repeat)]
            cpu = statistics.median(r[1] for r in runs)
            rows.append((label, factor, meta["entries"], statistics.median(r[0] for r in runs), cpu,
                         max(r[2] for r in runs)))
            print(f"  {label} x{factor} ({meta['entries']} entries, {DATASETS[dataset]}): CPU {cpu:.2f} s, "
                  f"peak RSS {rows[-1][5]:.0f} MB", flush=True)
    base = {label: cpu / entries for label, factor, entries, _, cpu, _ in rows if factor == min(factors)}
    base = {label: base.get(label, math.nan) for label, *_ in rows}
    print(f"\nload average {os.getloadavg()[0]:.1f}; medians of {repeat}\n")
    print("| work | x | entries | wall s | CPU s | CPU us per entry | per entry / at 1x | peak RSS MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, factor, entries, wall, cpu, rss in rows:
        print(f"| {label} | {factor} | {entries} | {wall:.2f} | {cpu:.2f} | {cpu / entries * 1e6:.1f} | "
              f"{cpu / entries / base[label]:.2f} | {rss:.0f} |")


def ray_installed() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=16, help="statistics ranks (stats_20k each)")
    parser.add_argument("--tensor-ranks", type=int, default=8, help="real-tensor ranks (tensor_0.6gb each)")
    parser.add_argument("--repeat", type=int, default=2, help="runs per case, the fastest reported (default 2); "
                        "with --linear the median (default 3)")
    parser.add_argument("--linear", action="store_true", help="compare and graph at 1x, 5x and 25x the entries")
    parser.add_argument("--factors", type=int, nargs="+", choices=sorted(LINEAR), default=sorted(LINEAR))
    parser.add_argument("--work", nargs="+", choices=WORK, default=list(WORK), help="with --linear: which work")
    args = parser.parse_args()
    REPEAT[0] = max(1, args.repeat)
    os.makedirs(OUT, exist_ok=True)
    if args.linear:
        linear(args.factors, args.repeat if "--repeat" in sys.argv else 3, args.work)
        return 0
    plan = [("stats_20k", args.ranks)] + ([("tensor_0.6gb", args.tensor_ranks)] if args.tensor_ranks else [])
    rows: list = []
    for dataset, ranks in plan:
        ensure_dataset(dataset)
        cases(dataset, ranks, rows, None)
    if ray_installed():
        import ray

        # a running cluster (here: one node, this machine's cores), as `ray start --head` would give
        ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, logging_level="warning")
        try:
            for dataset, ranks in plan:
                cases(dataset, ranks, rows, ray.get_runtime_context().gcs_address)
        finally:
            ray.shutdown()
    else:
        print('ray is not installed (pip install "msprobe-toolkit[ray]"): only the local backend is measured')
    print("| case | ranks | GB read | wall s | s per rank | s per GB | GB/s | peak RSS MB (largest process) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, ranks, gigabytes, wall, rss in rows:
        print(f"| {label} | {ranks} | {gigabytes:.2f} | {wall:.2f} | {wall / ranks:.3f} | {wall / gigabytes:.2f} | "
              f"{gigabytes / wall:.2f} | {rss:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
