#!/usr/bin/env python3
"""The bug zoo: does `msprobe compare -da` name the op a bug was injected at, and only then?

    python benchmarks/bug_zoo/run.py                    # dumps into a temporary folder, removed afterwards
    python benchmarks/bug_zoo/run.py --keep /tmp/zoo    # keep the dumps and the -da outputs
    python benchmarks/bug_zoo/run.py --reference /venv/bin/msprobe   # also the reference msprobe's answer

Three model families (benchmarks/bug_zoo/families.py) x injected bugs (benchmarks/bug_zoo/kernels.py), each
dumped with our collector (msprobe.pytorch.PrecisionDebugger, level L1, forward and backward) as target =
bfloat16 autocast + the bug against golden = float32, in statistics and in tensor mode; plus one clean pair
(bfloat16 autocast, no bug) per family. For every pair `msprobe compare -da` runs and the table shows
`dtype_aware.op_name` against the injected op. The summary gives per mode the share of bug cases where it is the
injected op and the share of clean cases where it is null.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

import kernels as K  # noqa: E402
import torch  # noqa: E402
from families import FAMILIES  # noqa: E402

from msprobe.pytorch import PrecisionDebugger  # noqa: E402

MODES = ("statistics", "tensor")
SEED = 7

# family -> [(bug, call site, API prefix, API name, kernel)]
BUGS = {
    "transformer": [
        ("bf16 accumulation (fc2 linear)", "fc2", "Functional", "linear", K.linear_bf16_accumulation),
        ("low-precision layer_norm", "ln1", "Functional", "layer_norm", K.layer_norm_low_precision),
        ("wrong epsilon (layer_norm)", "ln2", "Functional", "layer_norm", K.layer_norm_wrong_eps),
        ("doubled attention scale", "scale", "Tensor", "__mul__", lambda a, s: a * (2 * s)),
        ("GELU tanh for erf", "gelu", "Functional", "gelu", K.gelu_tanh),
        ("softmax over the wrong dim", "softmax", "Functional", "softmax", K.softmax_wrong_dim),
        ("fp16 overflow (cross_entropy)", "loss", "Functional", "cross_entropy", K.cross_entropy_fp16),
        # issue 32: regressions of a hidden zoo (a bf16 accumulator in a short linear, a dropped qkv bias)
        ("bf16 accumulation (fc1 linear, K=64)", "fc1", "Functional", "linear", K.linear_bf16_accumulation),
        ("dropped bias (qkv linear)", "qkv", "Functional", "linear", K.linear_without_bias),
    ],
    "cnn": [
        ("bf16 accumulation (conv3)", "conv3", "Functional", "conv2d", K.conv2d_bf16_accumulation),
        ("low-precision batch_norm", "bn2", "Functional", "batch_norm", K.batch_norm_low_precision),
        ("wrong epsilon (batch_norm)", "bn3", "Functional", "batch_norm", K.batch_norm_wrong_eps),
        ("missing 1/(H*W) scale (avg pool)", "pool", "Functional", "adaptive_avg_pool2d",
         K.adaptive_avg_pool2d_sum),
        ("GELU tanh for erf", "gelu", "Functional", "gelu", K.gelu_tanh),
        ("mean over the wrong dim", "se_mean", "Tensor", "mean", K.mean_wrong_dim),
        ("fp16 overflow (cross_entropy)", "loss", "Functional", "cross_entropy", K.cross_entropy_fp16),
        ("conv weight transposed (conv3)", "conv3", "Functional", "conv2d", K.conv2d_transposed_weight),
    ],
    "gru": [
        ("bf16 accumulation (fc2 linear)", "fc2", "Functional", "linear", K.linear_bf16_accumulation),
        ("low-precision layer_norm", "ln", "Functional", "layer_norm", K.layer_norm_low_precision),
        ("wrong epsilon (layer_norm)", "ln", "Functional", "layer_norm", K.layer_norm_wrong_eps),
        ("doubled attention scale", "scale", "Tensor", "__mul__", lambda a, s: a * (2 * s)),
        ("GELU tanh for erf", "gelu", "Functional", "gelu", K.gelu_tanh),
        ("softmax over the wrong dim", "softmax", "Functional", "softmax", K.softmax_wrong_dim),
        ("fp16 overflow (cross_entropy)", "loss", "Functional", "cross_entropy", K.cross_entropy_fp16),
    ],
}


def dump(family: str, mode: str, path: str, bug=None, low_precision: bool = True) -> str | None:
    """One forward and backward step dumped to path; returns the injected op's entry name (None: no bug)."""
    cls = FAMILIES[family]
    model = cls(SEED)
    x, target = cls.inputs(SEED)
    kernels = K.Kernels()
    sites = dict(cls.DEFAULT_SITES)
    if bug is not None:
        _, site, prefix, name, impl = bug
        sites[site] = kernels.make(prefix, name, impl)
    ops = SimpleNamespace(**sites)
    debugger = PrecisionDebugger(task=mode, level="L1", dump_path=path)
    kernels.collector = debugger.collector
    debugger.start()
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=low_precision):
            loss = model(x, target, ops)
        loss.backward()
    finally:
        debugger.stop()
    return kernels.calls[0] if kernels.calls else None


def dump_json(path: str) -> str:
    (found,) = glob.glob(os.path.join(path, "step0", "*", "dump.json"))
    return found


def diff_analyze(target: str, golden: str, out: str) -> dict:
    from msprobe.cli.main import main

    with contextlib.redirect_stdout(io.StringIO()):
        code = main(["compare", "-tp", target, "-gp", golden, "-o", out, "-da"])
    if code != 0:
        raise RuntimeError(f"msprobe compare -da failed ({code}) on {target}")
    found = glob.glob(os.path.join(out, "diff_analyze_*.json"))
    return json.load(open(found[0])) if found else {}


def reference_answer(exe: str, target: str, golden: str, out: str) -> str:
    """The reference's -da origin, or its first error row when its -da names nothing. Its -da reads step folders of
    rank folders only, so both dumps are copied into <out>/{target,golden}/step0/rank0 first; it runs without our
    PYTHONPATH (both packages are called msprobe)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    steps = []
    for side, dump_file in (("target", target), ("golden", golden)):
        rank = os.path.join(out, side, "step0", "rank0")
        shutil.copytree(os.path.dirname(dump_file), rank, dirs_exist_ok=True)
        steps.append(os.path.dirname(rank))
    da_out = os.path.join(out, "da")
    subprocess.run([exe, "compare", "-tp", steps[0], "-gp", steps[1], "-o", da_out, "-da"], capture_output=True,
                   text=True, timeout=900, env=env)
    for found in glob.glob(os.path.join(da_out, "**", "diff_analyze*.json"), recursive=True):
        with open(found) as handle:
            data = json.load(handle)
        for nodes in data.values():
            if isinstance(nodes, list) and nodes and nodes[0].get("op_name"):
                return nodes[0]["op_name"]
    table_dir = os.path.join(out, "table")
    subprocess.run([exe, "compare", "-tp", target, "-gp", golden, "-o", table_dir], capture_output=True, text=True,
                   timeout=900, env=env)
    for name in glob.glob(os.path.join(table_dir, "compare_result_*.xlsx")):
        import openpyxl

        sheet = openpyxl.load_workbook(name, read_only=True).active
        rows = sheet.iter_rows(values_only=True)
        header = list(next(rows))
        for row in rows:
            if row[header.index("Result")] == "error":
                return f"{row[0]} (first error row)"
    return "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", help="folder for the dumps and outputs (kept)")
    parser.add_argument("--reference", help="the reference msprobe executable, for its answer on the same cases")
    parser.add_argument("--families", nargs="*", default=list(FAMILIES))
    parser.add_argument("--modes", nargs="*", default=list(MODES))
    args = parser.parse_args()
    root = args.keep or tempfile.mkdtemp(prefix="bug_zoo_")
    rows, score = [], {m: {"bug": [0, 0], "clean": [0, 0], "culprit": [0, 0]} for m in args.modes}
    try:
        for family in args.families:
            cases = [("clean", None)] + [(bug[0], bug) for bug in BUGS[family]]
            for mode in args.modes:
                golden = os.path.join(root, family, mode, "golden")
                dump(family, mode, golden, low_precision=False)
                for index, (label, bug) in enumerate(cases):
                    case_dir = os.path.join(root, family, mode, f"case{index}")
                    injected = dump(family, mode, os.path.join(case_dir, "target"), bug)
                    result = diff_analyze(dump_json(os.path.join(case_dir, "target")), dump_json(golden),
                                          os.path.join(case_dir, "da"))
                    aware = result.get("dtype_aware") or {}
                    named = aware.get("op_name")
                    culprit = (result.get("culprit") or {}).get("op_name")
                    first = next((nodes[0]["op_name"] for key, nodes in result.items()
                                  if key.startswith("rank_") and nodes), None)
                    ok = named is None if bug is None else named == injected
                    score[mode]["clean" if bug is None else "bug"][0] += ok
                    score[mode]["clean" if bug is None else "bug"][1] += 1
                    if bug is not None:
                        score[mode]["culprit"][0] += culprit == injected
                        score[mode]["culprit"][1] += 1
                    reference = ""
                    if args.reference:
                        reference = reference_answer(args.reference, dump_json(os.path.join(case_dir, "target")),
                                                     dump_json(golden), os.path.join(case_dir, "ref"))
                    rows.append((family, label, mode, injected or "-", named or "null", first or "-",
                                 "yes" if ok else "NO", culprit or "null", reference))
                    print(" | ".join(str(c) for c in rows[-1]), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    header = ["family", "bug", "mode", "injected op", "dtype_aware.op_name", "-da first divergence", "right",
              "culprit (the advisor's)"]
    if args.reference:
        header.append("reference")
    print()
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row[:len(header)]) + " |")
    print()
    for mode in args.modes:
        bug_ok, bug_all = score[mode]["bug"]
        clean_ok, clean_all = score[mode]["clean"]
        culprit_ok, culprit_all = score[mode]["culprit"]
        print(f"{mode}: injected op named in {bug_ok}/{bug_all} bug cases ({bug_ok / max(bug_all, 1):.0%}); "
              f"null in {clean_ok}/{clean_all} clean cases ({clean_ok / max(clean_all, 1):.0%}); the culprit "
              f"(advisor, summary, -da) is the injected op in {culprit_ok}/{culprit_all}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
