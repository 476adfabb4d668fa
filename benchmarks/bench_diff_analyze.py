#!/usr/bin/env python3
"""Peak memory of `msprobe compare -da` against the plain compare of the same statistics dump pair (issue 28).

    python benchmarks/bench_diff_analyze.py                 # 50k entries (about 175k result rows)
    python benchmarks/bench_diff_analyze.py --entries 200000

The dump pair comes from make_dumps.py (benchmarks/data/stats_<N>, generated when missing). Each case runs as a
child process; its peak RSS is read by GNU time (or os.wait4) and the PSS of its process tree is sampled (run.py's
run_child), its wall time measured around it. The target: `-da` within 1.3x of the plain compare's peak memory.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import run  # noqa: E402

CASES = (("plain compare (xlsx)", []), ("plain compare (--csv)", ["--csv"]), ("compare -da", ["-da"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=50_000)
    args = parser.parse_args()
    dataset = f"stats_{args.entries // 1000}k"
    run.DATASETS.setdefault(dataset, {"entries": args.entries})
    run.ensure_dataset(dataset)
    data = os.path.join(run.DATA, dataset)
    target, golden = (os.path.join(data, side, "dump.json") for side in ("target", "golden"))
    os.makedirs(run.OUT, exist_ok=True)
    rows = []
    peaks = {}
    for label, extra in CASES:
        out = os.path.join(run.OUT, "diff_analyze_" + "".join(c for c in label if c.isalnum()))
        shutil.rmtree(out, ignore_errors=True)
        cmd = run.msprobe_command() + ["compare", "-tp", target, "-gp", golden, "-o", out, *extra]
        wall, rss, code, tree = run.run_child(cmd, log_path=out + ".log", sample=True)
        if code:
            print(f"{label}: exit code {code}, see {out}.log", file=sys.stderr)
            return 1
        peaks[label] = rss
        rows.append((label, wall, rss, tree))
    plain = peaks["plain compare (xlsx)"]
    print(f"| {dataset} | wall s | peak RSS MB | tree PSS MB | RSS / plain compare |")
    print("|---|---|---|---|---|")
    for label, wall, rss, tree in rows:
        print(f"| {label} | {wall:.1f} | {rss:.0f} | {tree:.0f} | {rss / plain:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
