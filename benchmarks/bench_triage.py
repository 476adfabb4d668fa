"""Cost and hit rate of `msprobe triage` (issues 35, 40) on a zoo of small training scripts with planted bugs.

The PyTorch zoo is examples/triage/train.py (a CNN, a transformer block, an LSTM; --bug picks the planted bug), the
MindSpore PyNative zoo tests/mindspore_collector/triage_zoo_ms.py (the same models and bugs). Each script is copied
into a fresh temporary folder and run as is (no msprobe in it): a triage of `--bug B` against the clean script
must name the planted op, whose source line holds the bug's marker text; a triage of the clean script against
itself must name nothing; `nondet` is triaged alone (the same command twice). `--amp` triages mixed-precision
targets (PyTorch bfloat16 autocast, MindSpore auto_mixed_precision O2) against the float32 script: the clean pair
must name nothing (the runs differ in dtype only), each planted bug its op. Reported: the hit rate, whether the
category is the planted bug's, the wall time of each triage and the number of runs per side.

    python benchmarks/bench_triage.py                          # PyTorch zoo, every model and bug
    python benchmarks/bench_triage.py --models cnn --bugs eps  # one case
    python benchmarks/bench_triage.py --amp                    # bfloat16 autocast targets against float32
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

from triage_zoo import AMP_BUGS, BUGS, MODELS, SCRIPTS, hit, right_category, triage_case  # noqa: E402


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
    parser.add_argument("--bugs", nargs="+")
    parser.add_argument("--amp", action="store_true", help="mixed-precision targets against the float32 script")
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
    known = BUGS[args.framework]
    bugs = args.bugs or ["none", *(bug for bug in (AMP_BUGS if args.amp else known) if bug in known)]
    work = tempfile.mkdtemp(prefix="bench_triage_")
    results = []
    print("| model | bug | culprit | category | source holds the bug | category right | triage s | runs per side | "
          "runs' wall s | one plain step s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for model in args.models:
        plain = plain_step(args.framework, model, work)
        for bug in bugs:
            findings, seconds, _folder = triage_case(args.framework, model, bug, work, amp=args.amp)
            rounds = [found.get("runs", []) for found in findings.rounds]
            runs = sum(1 for found in rounds for run in found if run["side"] == "target")
            wall = sum(max(run["seconds"] for run in found) for found in rounds if found)
            ok, right = hit(findings, bug), right_category(findings, bug)
            named = findings.culprit or (f"(dtype: {findings.dtype_change['op']})" if findings.dtype_change else "-")
            source = findings.source or (findings.dtype_change or {}).get("source") or "-"
            results.append({"model": model, "bug": bug, "amp": args.amp, "outcome": findings.outcome,
                            "culprit": findings.culprit, "category": findings.category, "source": source, "hit": ok,
                            "category_right": right, "seconds": round(seconds, 1), "runs": runs,
                            "runs_wall": round(wall, 1), "plain_step": round(plain, 1)})
            print(f"| {model} | {bug} | {named} | {findings.category or findings.outcome} | "
                  f"{'yes' if ok else 'NO: ' + source} | {'yes' if right else 'NO'} | {seconds:.1f} | {runs} | "
                  f"{wall:.1f} | {plain:.1f} |", flush=True)
    planted = [r for r in results if r["bug"] != "none"]
    clean = [r for r in results if r["bug"] == "none"]
    print(f"\nplanted bugs named: {sum(r['hit'] for r in planted)}/{len(planted)} (category right: "
          f"{sum(r['category_right'] for r in planted)}/{len(planted)}); clean pairs with no culprit: "
          f"{sum(r['hit'] for r in clean)}/{len(clean)}; median triage "
          f"{sorted(r['seconds'] for r in results)[len(results) // 2]:.1f} s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
