"""Cost and hit rate of `msprobe triage` (issue 35) on a zoo of small training scripts with planted bugs.

The PyTorch zoo is examples/triage/train.py (a CNN, a transformer block, an LSTM; --bug picks the planted bug), the
MindSpore PyNative zoo tests/mindspore_collector/triage_zoo_ms.py (the same models and bugs). Each script is copied
into a fresh temporary folder and run as is (no msprobe in it): a triage of `--bug B` against the clean script
must name the planted op, whose source line holds the bug's marker text; a triage of the clean script against
itself must name nothing; `nondet` is triaged alone (the same command twice). Reported: the hit rate, the wall time
of each triage and the number of runs per side.

    python benchmarks/bench_triage.py                          # PyTorch zoo, every model and bug
    python benchmarks/bench_triage.py --models cnn --bugs eps  # one case
    python benchmarks/bench_triage.py --framework mindspore    # in an interpreter with mindspore
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

from triage_zoo import BUGS, MODELS, SCRIPTS, hit, triage_case  # noqa: E402


def plain_step(framework: str, model: str, work: str) -> float:
    """Wall time of the script's own one-step run (no msprobe): the unit a triage's runs are measured in."""
    import subprocess
    import time

    folder = tempfile.mkdtemp(prefix=f"plain_{model}_", dir=work)
    shutil.copy(SCRIPTS[framework], os.path.join(folder, "train.py"))
    start = time.perf_counter()
    subprocess.run([sys.executable, "train.py", "--model", model, "--steps", "1"], cwd=folder, check=True,
                   capture_output=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=sorted(SCRIPTS), default="pytorch")
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--bugs", nargs="+", default=["none", *BUGS])
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench_triage_")
    results = []
    print("| model | bug | culprit | category | source holds the bug | triage s | runs per side | runs' wall s | "
          "one plain step s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model in args.models:
        plain = plain_step(args.framework, model, work)
        for bug in args.bugs:
            findings, seconds, _folder = triage_case(args.framework, model, bug, work)
            rounds = [found.get("runs", []) for found in findings.rounds]
            runs = sum(1 for found in rounds for run in found if run["side"] == "target")
            wall = sum(max(run["seconds"] for run in found) for found in rounds if found)
            ok = hit(findings, bug)
            results.append({"model": model, "bug": bug, "culprit": findings.culprit, "category": findings.category,
                            "source": findings.source, "hit": ok, "seconds": round(seconds, 1), "runs": runs,
                            "runs_wall": round(wall, 1), "plain_step": round(plain, 1)})
            print(f"| {model} | {bug} | {findings.culprit or '-'} | {findings.category or '-'} | "
                  f"{'yes' if ok else 'NO: ' + (findings.source or '-')} | {seconds:.1f} | {runs} | {wall:.1f} | "
                  f"{plain:.1f} |", flush=True)
    planted = [r for r in results if r["bug"] != "none"]
    clean = [r for r in results if r["bug"] == "none"]
    print(f"\nplanted bugs named: {sum(r['hit'] for r in planted)}/{len(planted)}; clean pairs with no culprit: "
          f"{sum(r['hit'] for r in clean)}/{len(clean)}; median triage "
          f"{sorted(r['seconds'] for r in results)[len(results) // 2]:.1f} s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
