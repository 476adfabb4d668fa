#!/usr/bin/env python3
"""A tiny random-initialised `transformers` Llama, bfloat16 autocast target against float32: what do the table
(`msprobe compare -da`, with and without -fm) and `msprobe graph` name, and how many graph nodes sit in the 0.85
band "the precision drops here"?

    pip install transformers            # not a dependency of msprobe; this script only
    python benchmarks/verdict_llama.py [--keep DIR]

Cases: clean (autocast only), q_proj x1.01 (a forward hook scaling layer 1's q_proj output: one extra
Tensor.__mul__ call, which shifts the call counts of every later Tensor.__mul__), RMSNorm eps 0.3 (layer 1's
post-attention norm). Each target runs one AdamW step at level mix, statistics, against the float32 run.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

CASES = ("clean", "q_proj x1.01", "RMSNorm eps 0.3")
PLANTED = {"clean": None, "q_proj x1.01": "Tensor.__mul__.15.forward", "RMSNorm eps 0.3": "Tensor.__add__.15.forward"}
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def dump(case: str, target: bool, out: str) -> str:
    """One training step of the tiny Llama in a child process (collector state stays out of this one)."""
    code = f"""
import sys, torch
sys.path.insert(0, {ROOT!r})
from transformers import LlamaConfig, LlamaForCausalLM
from msprobe.pytorch import PrecisionDebugger
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
cfg._attn_implementation = "eager"
m = LlamaForCausalLM(cfg)
case = {case!r}
if case == "q_proj x1.01":
    m.model.layers[1].self_attn.q_proj.register_forward_hook(lambda mod, i, o: o * 1.01)
if case == "RMSNorm eps 0.3":
    m.model.layers[1].post_attention_layernorm.variance_epsilon = 0.3
opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(1))
dbg = PrecisionDebugger(task="statistics", level="mix", dump_path={out!r})
dbg.start(m)
with torch.autocast("cpu", dtype=torch.bfloat16, enabled={target!r}):
    loss = m(input_ids=ids, labels=ids).loss
loss.backward(); opt.step(); opt.zero_grad()
dbg.stop()
"""
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    (folder,) = glob.glob(os.path.join(out, "step0", "*"))
    return folder


def cli(args: list) -> str:
    """Run `msprobe <args>` as a child process; its log (stdout and stderr)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (ROOT, os.environ.get("PYTHONPATH")))))
    done = subprocess.run([sys.executable, "-m", "msprobe", *args], capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(f"msprobe {args[0]} failed: {done.stderr.strip()}")
    return done.stdout + done.stderr


def analyse(target: str, golden: str, out: str, *options) -> tuple:
    cli(["compare", "-tp", target, "-gp", golden, "-o", out, "-da", *options])
    (path,) = glob.glob(os.path.join(out, "diff_analyze_*.json"))
    result = json.load(open(path))
    return result["dtype_aware"]["op_name"], result["culprit"]["op_name"]


def graph(target: str, golden: str, out: str) -> tuple:
    """The first node of the graph's printed Top 10 and the count of nodes at 0.85."""
    log = cli(["graph", "-tp", target, "-gp", golden, "-o", out])
    top = next(line.split("1. ", 1)[1].split()[0] for line in log.splitlines() if "    1. " in line)
    (path,) = glob.glob(os.path.join(out, "*.vis"))
    nodes = json.load(open(path))["NPU"]["node"]
    return top, sum(1 for node in nodes.values() if node.get("data", {}).get("precision_index") == 0.85)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", help="keep the dumps and outputs in this folder")
    args = parser.parse_args()
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("needs `pip install transformers`")
        return 2
    root = args.keep or tempfile.mkdtemp(prefix="llama_verdict_")
    shutil.rmtree(root, ignore_errors=True)
    golden = dump("clean", False, os.path.join(root, "golden"))
    print("| case | planted | -da dtype-aware | -da culprit | -fm dtype-aware | graph's hottest node | nodes at 0.85 |")
    print("|---|---|---|---|---|---|---|")
    for case in CASES:
        slug = case.split()[0].replace("_", "")
        target = dump(case, True, os.path.join(root, slug))
        aware, culprit = analyse(target, golden, os.path.join(root, slug + "_cmp"))
        fm_aware, _ = analyse(target, golden, os.path.join(root, slug + "_fm"), "-fm")
        top, band = graph(target, golden, os.path.join(root, slug + "_graph"))
        print(f"| {case} | {PLANTED[case] or '-'} | {aware} | {culprit} | {fm_aware} | {top} | {band} |", flush=True)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
