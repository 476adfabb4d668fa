"""Dump overhead of the PyTorch collector (issues 9, 41): the refdata TinyGPT at a larger size (by default the
6-layer GPT of issue 41: d_model 384, seq 128, batch 8, AdamW, 1 thread), L1 statistics.

Runs child processes: plain training and training with ``PrecisionDebugger`` in the given Python with this
checkout's msprobe (ours, PYTHONPATH set to it), and the same two in the reference's interpreter
(``mindstudio-probe`` installed in a separate venv, so that each tool's slowdown is taken against a plain run in
its own interpreter). Each child does ``--warmup`` unmeasured steps and ``--steps`` measured steps; a step is
timed from ``debugger.start()`` to after ``debugger.step()`` (forward, backward, clip, AdamW, dump writing), in
CPU time of the process (``time.process_time``: the measure on a shared machine) and in wall time. The overhead
is (median CPU per step with the dump) / (median plain) - 1; the goal of issue 41 is ours <= 1/4 of the
reference's. The rounds are interleaved and the first tool of a round alternates.

    python benchmarks/bench_dump_overhead.py --quick               # reference at /work/venvs/ref-pt/bin/python
    python benchmarks/bench_dump_overhead.py --ref-python none     # ours only
    python benchmarks/bench_dump_overhead.py --d-model 256 --n-layer 4 --seq 128 --batch 8 --steps 5
    python benchmarks/bench_dump_overhead.py --baseline /tmp/msprobe_main --repeats 5   # before/after a change

Reference venv: python3 -m venv /tmp/refvenv && /tmp/refvenv/bin/pip install torch==2.13.0 &&
/tmp/refvenv/bin/pip install mindstudio-probe==26.2.0
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_DIR = os.path.join(ROOT, "tests", "fixtures", "pytorch_model")

CHILD = r'''
import json, os, sys, time
sys.path.insert(0, {model_dir!r})
import torch
from tiny_gpt import TinyGPT

args = json.loads(sys.argv[1])
torch.set_num_threads(args["threads"])
if args["dump"]:
    from msprobe.pytorch import PrecisionDebugger, seed_all
    seed_all(1234)
else:
    import random
    random.seed(1234)
    torch.manual_seed(1234)
model = TinyGPT(vocab=args["vocab"], d_model=args["d_model"], n_head=args["n_head"], n_layer=args["n_layer"],
                max_seq=args["seq"], perturb_layer=0)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
g = torch.Generator().manual_seed(42)
total = args["warmup"] + args["steps"]
data = [(torch.randint(0, args["vocab"], (args["batch"], args["seq"]), generator=g),
         torch.randint(0, args["vocab"], (args["batch"], args["seq"]), generator=g)) for _ in range(total)]
debugger = None
if args["dump"]:
    cfg = {{"task": "statistics", "dump_path": args["dump_path"], "rank": [], "step": [], "level": "L1",
           "extra_info": True, "async_dump": False,
           "statistics": {{"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}}}
    cfg_path = os.path.join(os.path.dirname(args["dump_path"]), "config.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    debugger = PrecisionDebugger(config_path=cfg_path)
times = []
cpus = []
for idx, tgt in data:
    t0 = time.perf_counter()
    c0 = time.process_time()
    if debugger:
        debugger.start(model=model)
    _, loss = model(idx, tgt)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad()
    if debugger:
        debugger.stop()
        debugger.step()
    loss_value = loss.item()
    cpus.append(time.process_time() - c0)
    times.append(time.perf_counter() - t0)
entries = 0
if args["dump"]:
    for base, _, files in os.walk(args["dump_path"]):
        if "dump.json" in files:
            with open(os.path.join(base, "dump.json")) as f:
                entries += len(json.load(f).get("data", {{}}))
print("RESULT " + json.dumps({{"times": times[args["warmup"]:], "cpus": cpus[args["warmup"]:], "loss": loss_value, "entries": entries,
                              "torch": torch.__version__}}))
'''


def run_child(python: str, script: str, params: dict, workdir: str, pythonpath: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    proc = subprocess.run([python, script, json.dumps(params)], cwd=workdir, capture_output=True, text=True, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{python} child failed (rc {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=sys.executable, help="interpreter with our msprobe (default: this one)")
    ap.add_argument("--ref-python", default="/work/venvs/ref-pt/bin/python",
                    help="interpreter with mindstudio-probe installed; 'none' to skip the reference")
    ap.add_argument("--baseline", metavar="TREE",
                    help="a checkout of msprobe (e.g. `git archive main | tar -x -C TREE`) measured too, with "
                         "PYTHONPATH=TREE and --python: our collector before and after a change")
    ap.add_argument("--d-model", type=int, default=384)
    ap.add_argument("--n-head", type=int, default=8)
    ap.add_argument("--n-layer", type=int, default=6)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3,
                    help="rounds; each round runs every configuration once, one after the other (on a shared "
                         "machine, interleaving spreads its load over all of them)")
    ap.add_argument("--quick", action="store_true", help="3 rounds of 3 measured steps (about 3 minutes on a quiet "
                                                         "machine); prints the same table")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads in the children")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)
    if args.quick:
        args.steps, args.repeats = 3, 3

    params = {"d_model": args.d_model, "n_head": args.n_head, "n_layer": args.n_layer, "seq": args.seq,
              "batch": args.batch, "vocab": args.vocab, "warmup": args.warmup, "steps": args.steps,
              "threads": args.threads}
    ref = args.ref_python if args.ref_python.lower() != "none" else None
    if ref and not os.path.exists(ref):
        print(f"reference interpreter {ref} not found: measuring ours only")
        ref = None
    tools = {"ours": (args.python, ROOT)}
    if args.baseline:
        tools["baseline"] = (args.python, os.path.abspath(args.baseline))
    if ref:
        tools["reference"] = (ref, None)
    print(f"GPT {params}, L1 statistics; {args.repeats} interleaved rounds; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    cpus: dict = {(tool, dump): [] for tool in tools for dump in (False, True)}
    walls: dict = {(tool, dump): [] for tool in tools for dump in (False, True)}
    entries: dict = {}
    losses: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench_dump_") as workdir:
        script = os.path.join(workdir, "child.py")
        with open(script, "w") as f:
            f.write(CHILD.format(model_dir=MODEL_DIR))
        for round_ in range(args.repeats):
            # the first tool of a round alternates, so that neither always runs after the other
            order = list(tools.items())
            order = order[round_ % len(order):] + order[:round_ % len(order)]
            for tool, (python, pythonpath) in order:
                for dump in (False, True):
                    run = dict(params, dump=dump, dump_path=os.path.join(workdir, f"{tool}_{round_}_{dump}", "dump"))
                    os.makedirs(os.path.dirname(run["dump_path"]), exist_ok=True)
                    result = run_child(python, script, run, workdir, pythonpath)
                    cpus[(tool, dump)].extend(result["cpus"])
                    walls[(tool, dump)].extend(result["times"])
                    losses.setdefault((tool, dump), set()).add(result["loss"])
                    if dump:
                        entries[tool] = result["entries"] // (args.warmup + args.steps)
                    print(f"  round {round_} {tool:<9} {'dump ' if dump else 'plain'} median CPU "
                          f"{statistics.median(result['cpus']):.4f} s/step, wall "
                          f"{statistics.median(result['times']):.4f} s/step", flush=True)
    figures: dict = {"params": params, "rounds": args.repeats, "load_average_end": os.getloadavg()}
    for tool in tools:
        plain, dump = statistics.median(cpus[(tool, False)]), statistics.median(cpus[(tool, True)])
        wall_plain, wall_dump = statistics.median(walls[(tool, False)]), statistics.median(walls[(tool, True)])
        figures[tool] = {"plain": plain, "dump": dump, "entries": entries.get(tool), "overhead": dump / plain - 1,
                         "wall_plain": wall_plain, "wall_dump": wall_dump, "wall_overhead": wall_dump / wall_plain - 1,
                         "same_loss": losses[(tool, False)] == losses[(tool, True)]
                         and len(losses[(tool, True)]) == 1}
    print()
    print("CPU time per step (user + system of the child, 1 thread), medians of all measured steps; wall beside")
    print("| tool | plain CPU s/step | with dump CPU s/step | CPU overhead | wall overhead | entries/step "
          "| loss the same with the dump |")
    print("|---|---|---|---|---|---|---|")
    for name in tools:
        f = figures[name]
        print(f"| {name} | {f['plain']:.4f} | {f['dump']:.4f} | {100 * f['overhead']:+.1f} % "
              f"| {100 * f['wall_overhead']:+.1f} % | {f['entries']} | {'yes' if f['same_loss'] else 'NO'} |")
    if "baseline" in figures:
        change = figures["ours"]["dump"] / figures["baseline"]["dump"] - 1
        print(f"\nours vs baseline, CPU per step with dump: {100 * change:+.1f} %")
        figures["vs_baseline"] = change
    if "reference" in figures:
        ratio = figures["ours"]["overhead"] / figures["reference"]["overhead"]
        ok = ratio <= 0.25
        figures["ratio"] = ratio
        figures["verdict"] = ok
        print(f"ours CPU overhead / reference CPU overhead = {ratio:.2f} -> "
              f"{'ok' if ok else 'MISSED'}: goal <= 0.25")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
