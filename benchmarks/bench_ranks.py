"""Multi-rank benchmarks: an 8-rank step folder of 20k-entry dumps (issue 3) and merge_result over 64 rank
results of ~70k rows each, csv and xlsx (issue 5). Rank folders and result files are hard links to one
generated dump pair / one compare result, so the data costs no extra disk.

    python benchmarks/bench_ranks.py            # prints a markdown table
"""

from __future__ import annotations

import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from run import DATA, OUT, ensure_dataset, msprobe_command, run_child  # noqa: E402

RANKS = 8
MERGE_RANKS = 64
MERGE_CONFIG = "api:\n  - Functional.linear\n  - Distributed\n"


def _link(source: str, target: str) -> None:
    os.makedirs(os.path.dirname(target), exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy(source, target)


def step_folder(dataset: str, ranks: int) -> str:
    root = os.path.join(DATA, f"{os.path.basename(dataset)}_{ranks}ranks")
    if not os.path.isdir(root):
        for side in ("target", "golden"):
            for rank in range(ranks):
                for name in ("dump.json", "stack.json", "construct.json"):
                    _link(os.path.join(dataset, side, name), os.path.join(root, side, f"rank{rank}", name))
    return root


def run(label: str, args: list, rows: list) -> float:
    out = os.path.join(OUT, label)
    shutil.rmtree(out, ignore_errors=True)
    wall, rss, code, tree = run_child(msprobe_command() + args + ["-o", out], log_path=out + ".log", sample=True)
    if code != 0:
        raise SystemExit(f"{label} failed (exit {code}); see {out}.log")
    rows.append((label, wall, rss, tree))
    return wall


def main() -> int:
    ensure_dataset("stats_20k")
    dataset = os.path.join(DATA, "stats_20k")
    rows: list = []
    single = run("rank_single_serial", ["compare", "-tp", os.path.join(dataset, "target", "dump.json"), "-gp",
                                        os.path.join(dataset, "golden", "dump.json"), "--csv", "-c", "-j", "1"], rows)
    root = step_folder(dataset, RANKS)
    ranks = run(f"ranks_{RANKS}", ["compare", "-tp", os.path.join(root, "target"), "-gp", os.path.join(root, "golden"),
                                   "--csv", "-c"], rows)
    results = {}
    for fmt in ("csv", "xlsx"):
        source_dir = os.path.join(OUT, f"merge_source_{fmt}")
        shutil.rmtree(source_dir, ignore_errors=True)
        run_child(msprobe_command() + ["compare", "-tp", os.path.join(dataset, "target", "dump.json"), "-gp",
                                       os.path.join(dataset, "golden", "dump.json"), f"--{fmt}", "-c", "-o", source_dir])
        (result,) = [f for f in os.listdir(source_dir) if f.startswith("compare_result")]
        folder = os.path.join(DATA, f"merge_{MERGE_RANKS}_{fmt}")
        shutil.rmtree(folder, ignore_errors=True)
        for rank in range(MERGE_RANKS):
            _link(os.path.join(source_dir, result),
                  os.path.join(folder, f"compare_result_rank{rank}_20260101000000.{fmt}"))
        config = os.path.join(DATA, "merge_config.yaml")
        with open(config, "w") as handle:
            handle.write(MERGE_CONFIG)
        results[fmt] = run(f"merge_{MERGE_RANKS}_{fmt}", ["merge_result", "-i", folder, "-config", config], rows)
    print("| case | wall s | peak RSS MB (largest process) | peak PSS MB (process tree) |")
    print("|---|---:|---:|---:|")
    for label, wall, rss, tree in rows:
        print(f"| {label} | {wall:.2f} | {rss:.0f} | {tree:.0f} |")
    cores = os.cpu_count() or 1
    print(f"\n{RANKS} ranks: {ranks:.2f} s; ideal single-rank x {RANKS} / {cores} cores = "
          f"{single * RANKS / cores:.2f} s (ratio {ranks / (single * RANKS / cores):.2f})")
    print(f"merge of {MERGE_RANKS} results: csv {results['csv']:.2f} s, xlsx {results['xlsx']:.2f} s (target < 10 s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
