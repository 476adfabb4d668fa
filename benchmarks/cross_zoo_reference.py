"""The MindSpore/PyTorch twin zoo (tests/fixtures/cross_zoo/make.py) dumped by the REFERENCE's collectors
(mindstudio-probe, PyPI) and compared by ours: do `msprobe compare -am` and `-da` pair, stay calm and name the planted
op on dumps another tool wrote, and on mixed pairs (one side ours, the other the reference's)?

Not part of the test suite: it needs two environments of the reference (MindSpore and PyTorch, each with
mindstudio-probe installed; the reference's MindSpore statistics call mint.norm, which has no CPU kernel, so the
dumping worker replaces it by a numpy L2 norm first, as one would to run it on CPU at all).

    # 1. dump (each case and level in its own process: the reference's debugger is a process-wide singleton)
    python benchmarks/cross_zoo_reference.py dump --ms-python REF_MS/bin/python --pt-python REF_PT/bin/python \\
        --out /tmp/refzoo
    # 2. compare with ours (the project's environment; our own twin dumps come from tests/fixtures/cross_zoo.tar.gz)
    PYTHONPATH=. python benchmarks/cross_zoo_reference.py compare --out /tmp/refzoo [--json figures.json]

Pairs: ref-MS vs ref-PT, ref-MS vs our-PT, our-MS vs ref-PT (target vs golden), at levels L1 and mix. Per pair:
warning/error rows (0 on a clean pair), whether the compare's culprit (which -da reads) names the planted op, and
the share of the target's rows matched.

The `worker` sub-command is what the reference's interpreters run; it imports nothing of this project but make.py.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ZOO = ROOT / "tests" / "fixtures" / "cross_zoo"
OURS = ROOT / "tests" / "fixtures" / "cross_zoo.tar.gz"


def _make():
    sys.path.insert(0, str(ZOO))
    import make

    return make


# ------------------------------------------------------------------ worker: runs in the reference's environment
def _reference_debugger(framework: str, out_dir: Path):
    """A stand-in for our PrecisionDebugger(dump_path=, level=) that make.py calls: the reference's debugger,
    configured through a config.json as its users do (statistics, all data), written on stop()."""
    if framework == "mindspore":
        import numpy as np
        from mindspore import Tensor, mint

        def cpu_norm(x, *args, **kwargs):  # the reference's statistics call mint.norm: no CPU kernel
            arr = x.asnumpy()
            return Tensor(np.asarray(np.linalg.norm(arr.astype(np.float64).ravel()), dtype=arr.dtype))

        mint.norm = cpu_norm
        import msprobe.mindspore as package
    else:
        import msprobe.pytorch as package
    reference = package.PrecisionDebugger

    class Debugger:
        def __init__(self, dump_path, level):
            config = {"task": "statistics", "dump_path": str(dump_path), "rank": [], "step": [], "level": level,
                      "async_dump": False,
                      "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}
            path = out_dir / f"config_{level}.json"
            path.write_text(json.dumps(config), encoding="utf-8")
            self.debugger = reference(config_path=str(path))

        def start(self, model):
            self.debugger.start(model)

        def stop(self):
            self.debugger.stop()
            self.debugger.step()

    package.PrecisionDebugger = Debugger


def worker(framework: str, case: str, level: str, out: Path) -> None:
    make = _make()
    out.mkdir(parents=True, exist_ok=True)
    _reference_debugger(framework, out)
    make.HERE = out
    make.LEVELS = (level,)
    sys.argv = [sys.argv[0], framework]
    if framework == "mindspore":
        make.CASES = {case: make.CASES[case]}
        make.run_mindspore()
    else:
        model, variant = case.split("_", 1)
        make.GOLDEN = {(model, variant)}
        make.run_pytorch()


# ------------------------------------------------------------------ dump: drives the workers
def dump(ms_python: str, pt_python: str, out: Path, only: list[str]) -> None:
    make = _make()
    jobs = [("mindspore", case) for case in make.CASES] + [("pytorch", f"{m}_{v}") for m, v in sorted(make.GOLDEN)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the reference's msprobe, not ours
    for framework, case in jobs:
        if only and not case.startswith(tuple(only)):
            continue
        for level in make.LEVELS:
            side = "ms" if framework == "mindspore" else "pt"
            if (out / f"{side}_{case}_{level}" / "dump.json").exists():
                continue
            start = time.time()
            python = ms_python if framework == "mindspore" else pt_python
            run = subprocess.run([python, __file__, "worker", framework, case, level, str(out)], env=env,
                                 cwd=tempfile.gettempdir(), capture_output=True, text=True)
            tail = (run.stdout + run.stderr).strip().splitlines()[-1:] if run.returncode else []
            print(f"{side} {case} {level}: rc {run.returncode} {time.time() - start:.0f}s {' '.join(tail)}",
                  flush=True)


# ------------------------------------------------------------------ compare: our msprobe on every pair
def _figures(target: Path, golden: Path, want: str | None) -> dict:
    import msprobe
    from msprobe.compare.mapping import UNMATCHED_OTHER

    result = msprobe.compare(target, golden, api_mapping=True)
    analysis = msprobe.diff_analyze(target, golden, api_mapping=True)
    rows = result.rows
    matched = sum(r["Bench Name"] != "N/A" for r in rows)
    other = sum(r["Bench Name"] == "N/A" and UNMATCHED_OTHER.split("{op}")[0] in r["Err_message"] for r in rows)
    culprit = result.summary.first_error
    return {"rows": len(rows), "matched": matched, "matchable": matched + other,
            "warning": result.summary.counts["warning"], "error": result.summary.counts["error"],
            "culprit": culprit, "da_culprit": analysis.culprit["op_name"],
            "named": None if want is None else bool(culprit and want in culprit)}


def compare(out: Path) -> dict:
    make = _make()
    ours = Path(tempfile.mkdtemp(prefix="cross_zoo_ours_"))
    with tarfile.open(OURS) as tar:
        tar.extractall(ours, filter="data")
    sides = {"ref": out, "our": ours}
    figures = {}
    for case, (model, variant, _, want) in make.CASES.items():
        for level in make.LEVELS:
            for t_side, g_side in (("ref", "ref"), ("ref", "our"), ("our", "ref")):
                target = sides[t_side] / f"ms_{case}_{level}" / "dump.json"
                golden = sides[g_side] / f"pt_{model}_{variant}_{level}" / "dump.json"
                if not (target.exists() and golden.exists()):
                    continue
                key = f"{t_side}-MS/{g_side}-PT {case} {level}"
                figures[key] = _figures(target, golden, want)
                print(key, json.dumps(figures[key]), flush=True)
    return figures


def summary(figures: dict) -> None:
    by_pair: dict = {}
    for key, f in figures.items():
        pair, case, level = key.split()
        p = by_pair.setdefault(pair, {"clean_alarms": 0, "clean": 0, "named": 0, "bugs": 0, "matched": 0,
                                      "matchable": 0, "rows": 0})
        if f["named"] is None:
            p["clean"] += 1
            p["clean_alarms"] += f["warning"] + f["error"]
            p["matched"] += f["matched"]
            p["matchable"] += f["matchable"]
            p["rows"] += f["rows"]
        else:
            p["bugs"] += 1
            p["named"] += f["named"]
    for pair, p in by_pair.items():
        print(f"{pair}: clean pairs {p['clean']} with {p['clean_alarms']} warning/error rows; culprit named "
              f"{p['named']}/{p['bugs']}; clean rows matched {p['matched']}/{p['rows']} "
              f"({p['matched']}/{p['matchable']} of those with a golden counterpart)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("dump")
    p.add_argument("--ms-python", required=True)
    p.add_argument("--pt-python", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("only", nargs="*", help="cases whose names start so (default: all)")
    p = sub.add_parser("compare")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--json", type=Path)
    p = sub.add_parser("worker")
    p.add_argument("framework", choices=("mindspore", "pytorch"))
    p.add_argument("case")
    p.add_argument("level")
    p.add_argument("out", type=Path)
    args = parser.parse_args()
    if args.command == "worker":
        worker(args.framework, args.case, args.level, args.out)
    elif args.command == "dump":
        dump(args.ms_python, args.pt_python, args.out, args.only)
    else:
        figures = compare(args.out)
        summary(figures)
        if args.json:
            args.json.write_text(json.dumps(figures, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
