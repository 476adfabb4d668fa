"""Overhead of the training monitor (issue 39): CPU time per training step with TrainerMon against a run without it,
ours and the reference's side by side in one run.

A tiny GPT (tests/fixtures/pytorch_model/tiny_gpt.py: 4 layers, d_model 128, AdamW) trains in child processes, one
CPU thread each, for --warmup unmeasured and --steps measured steps; each child reports the CPU time
(time.process_time) of its measured steps. Children: plain training and training with TrainerMon, in the system
Python (ours: msprobe from this checkout) and in the reference's interpreter (mindstudio-probe), for each config:

    grads+mv   wg_distribution + mv_distribution (weight gradients before/after reduction, Adam's m and v)
    +actv      the same + xy_distribution with all_xy (every module's inputs and outputs, forward and backward)

and, ours only (--configs): +actv+rules (with the parameters and the alert rules), +actv+golden (the live golden
watch against a golden run of the same data: every step identical) and +actv+golden-differs (of other data: every
step judged by the verdict), +actv+param (their baseline: +actv with the parameters).

The overhead of a tool is its median CPU time per step over its own interpreter's plain median; runs are
interleaved (A, B, A, B...) and repeated --repeats times.

    python benchmarks/bench_monitor.py                                   # reference at /work/venvs/ref-pt/bin/python
    python benchmarks/bench_monitor.py --ref-python none --repeats 5     # ours only
    python benchmarks/bench_monitor.py --profile +actv                   # cProfile of ours, top functions
    python benchmarks/bench_monitor.py --judgements                      # the rules and the golden watch alone
    python benchmarks/bench_monitor.py --framework mindspore             # MindSpore: ours in /work/msenv, the
                                                                         # reference at /work/venvs/ref-ms

--framework mindspore trains the MindSpore twin of the tiny GPT (bench_monitor_ms_child.py: nn.AdamWeightDecay, a
value_and_grad step, PyNative on the CPU with synchronous kernels) under msprobe.mindspore's TrainerMon, in
--python (ours) and --ref-python (the reference); what the reference's MindSpore monitor needs to run (MS_JIT=0,
param.grad set by the script, a numpy mint.norm) is done in every child alike, see that file.

--judgements records two runs (+actv+param, two data seeds) and times, in this process, the alert rules
(AnomalyDetector.observe) and the golden watch (GoldenWatch.check, the golden's CSVs read as it goes) over the first
run's steps: against itself (every step identical) and against the other (every step judged).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_DIR = os.path.join(ROOT, "tests", "fixtures", "pytorch_model")
OPS = ["min", "max", "norm", "zeros", "nans", "mean"]       # the reference's documented full list
CONFIGS = {
    "grads+mv": {"targets": {}, "wg_distribution": True, "mv_distribution": True, "format": "csv", "ops": OPS},
    "+actv": {"targets": {}, "wg_distribution": True, "mv_distribution": True, "xy_distribution": True,
              "all_xy": True, "format": "csv", "ops": OPS},
    # diagnostics (ours only): the same as grads+mv without files, with one statistic
    "grads+mv-api": {"targets": {}, "wg_distribution": True, "mv_distribution": True, "format": "api", "ops": OPS},
    "grads+mv-norm": {"targets": {}, "wg_distribution": True, "mv_distribution": True, "format": "csv",
                      "ops": ["norm"]},
    # the judgements (ours only): +actv with the parameters, and the alert rules (the reference's documented ones)
    "+actv+rules": {"targets": {}, "wg_distribution": True, "mv_distribution": True, "xy_distribution": True,
                    "all_xy": True, "param_distribution": True, "format": "csv", "ops": OPS,
                    "alert": {"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 0.5}},
                                        {"rule_name": "AnomalyNan", "args": {"threshold": 1e10}}]}},
    # ... or the live golden watch against a golden run recorded first (the same config without golden): the same
    # data (every step identical: the golden's reading), or other data (every step differs: the verdict each step)
    "+actv+golden": {"targets": {}, "wg_distribution": True, "mv_distribution": True, "xy_distribution": True,
                     "all_xy": True, "param_distribution": True, "format": "csv", "ops": OPS, "golden": 42},
    "+actv+golden-differs": {"targets": {}, "wg_distribution": True, "mv_distribution": True, "xy_distribution": True,
                             "all_xy": True, "param_distribution": True, "format": "csv", "ops": OPS,
                             "golden": 43},
    "+actv+param": {"targets": {}, "wg_distribution": True, "mv_distribution": True, "xy_distribution": True,
                    "all_xy": True, "param_distribution": True, "format": "csv", "ops": OPS},
}
MAIN = ("grads+mv", "+actv")
MS_CHILD = os.path.join(ROOT, "benchmarks", "bench_monitor_ms_child.py")
MS_PYTHON = "/work/msenv/bin/python"             # ours with MindSpore (mindspore 2.10 needs numpy<2)
REF_PYTHON = {"pytorch": "/work/venvs/ref-pt/bin/python", "mindspore": "/work/venvs/ref-ms/bin/python"}

CHILD = r'''
import json, os, sys, time
sys.path.insert(0, {model_dir!r})
import torch
args = json.loads(sys.argv[1])
torch.set_num_threads(1)
torch.manual_seed(1234)
from tiny_gpt import TinyGPT
model = TinyGPT(vocab=args["vocab"], d_model=args["d_model"], n_head=4, n_layer=args["n_layer"], max_seq=args["seq"])
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
g = torch.Generator().manual_seed(args.get("data_seed", 42))
total = args["warmup"] + args["steps"]
data = [(torch.randint(0, args["vocab"], (args["batch"], args["seq"]), generator=g),
         torch.randint(0, args["vocab"], (args["batch"], args["seq"]), generator=g)) for _ in range(total)]
if args["config"]:
    os.environ["MONITOR_OUTPUT_DIR"] = args["out"]
    from msprobe.pytorch import TrainerMon
    monitor = TrainerMon(args["config"], params_have_main_grad=False)
    monitor.set_monitor(model, optimizer=opt, grad_acc_steps=1)
profiler = None
if args["profile"]:
    import cProfile
    profiler = cProfile.Profile()
for i, (idx, tgt) in enumerate(data):
    if i == args["warmup"]:
        start = time.process_time()
        if profiler:
            profiler.enable()
    _, loss = model(idx, tgt)
    loss.backward()
    opt.step()
    opt.zero_grad()
    loss.item()
cpu = time.process_time() - start
if profiler:
    import pstats
    profiler.disable()
    pstats.Stats(profiler, stream=sys.stderr).sort_stats(args.get("sort", "tottime")).print_stats(25)
print(json.dumps({{"cpu_per_step": cpu / args["steps"], "loss": loss.item()}}))
'''


_GOLDENS: dict = {}       # data seed -> the MONITOR_OUTPUT_DIR of a golden run made with it (kept while the run lasts)


def golden_run(seed: int, base: dict, env: dict, python: str = sys.executable) -> str:
    """A golden run for the golden-watch configs: +actv+param on the data of `seed`, recorded once."""
    if seed not in _GOLDENS:
        keep = tempfile.mkdtemp(prefix="bench_monitor_golden_")
        run_child(python, dict(base, config=CONFIGS["+actv+param"], data_seed=seed), env,
                  out=os.path.join(keep, "out"))
        _GOLDENS[seed] = os.path.join(keep, "out")
    return _GOLDENS[seed]


def run_child(python: str, args: dict, env: dict, out: str | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_monitor_") as tmp:
        args = dict(args, out=out or os.path.join(tmp, "out"))
        if args["config"] is not None:
            path = os.path.join(tmp, "monitor.json")
            with open(path, "w") as handle:
                json.dump(args["config"], handle)
            args["config"] = path
        if args.get("framework") == "mindspore":
            command = [python, MS_CHILD, json.dumps(args)]
            env = dict(env, MS_JIT="0", GLOG_v="3", PYTHONWARNINGS="ignore")
        else:
            command = [python, "-c", CHILD.format(model_dir=MODEL_DIR), json.dumps(args)]
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp, check=False)
    if done.returncode != 0:
        raise SystemExit(f"child failed ({python}):\n{done.stderr[-3000:]}")
    if args["profile"]:
        sys.stderr.write(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--framework", choices=("pytorch", "mindspore"), default="pytorch")
    parser.add_argument("--python", help="our interpreter (default: this one; for MindSpore /work/msenv/bin/python)")
    parser.add_argument("--ref-python", help="the reference's interpreter (mindstudio-probe installed; default "
                        "/work/venvs/ref-pt/bin/python, for MindSpore /work/venvs/ref-ms/bin/python), 'none' to "
                        "skip it")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--n-layer", type=int, default=4)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--configs", nargs="*", default=list(MAIN), choices=list(CONFIGS))
    parser.add_argument("--profile", choices=list(CONFIGS), help="profile ours with this config and stop")
    parser.add_argument("--sort", default="tottime", help="the profile's order (tottime, cumulative)")
    parser.add_argument("--judgements", action="store_true", help="time the rules and the golden watch alone")
    options = parser.parse_args()
    mindspore = options.framework == "mindspore"
    ours_python = options.python or (MS_PYTHON if mindspore and os.path.exists(MS_PYTHON) else sys.executable)
    options.ref_python = options.ref_python or REF_PYTHON[options.framework]
    base = {"d_model": options.d_model, "n_layer": options.n_layer, "seq": options.seq, "batch": options.batch,
            "vocab": options.vocab, "steps": options.steps, "warmup": options.warmup, "profile": False,
            "framework": options.framework}
    ours_env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
                    OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    ref_env = {k: v for k, v in ours_env.items() if k != "PYTHONPATH"}
    if options.profile:
        run_child(ours_python, dict(base, config=CONFIGS[options.profile], profile=True, sort=options.sort),
                  ours_env)
        return
    if options.judgements:
        judgements(base, ours_env, options.repeats)
        return
    tools = [("ours", ours_python, ours_env)]
    if options.ref_python != "none":
        tools.append(("reference", options.ref_python, ref_env))
    variants = [(tool, python, env, name) for tool, python, env in tools for name in [None, *options.configs]
                if tool == "ours" or name in (None, *MAIN)]
    times: dict = {}
    losses: dict = {}
    for repeat in range(options.repeats):
        for tool, python, env, name in variants:
            config = CONFIGS[name] if name else None
            if config and "golden" in config:
                config = dict(config, golden=golden_run(config["golden"], base, env, python))
            result = run_child(python, dict(base, config=config, reference=tool == "reference"), env)
            times.setdefault((tool, name), []).append(result["cpu_per_step"])
            losses[(tool, name)] = result["loss"]
            print(f"repeat {repeat} {tool:9s} {name or 'plain':9s} {result['cpu_per_step'] * 1000:8.1f} ms/step",
                  file=sys.stderr)
    print(f"\ntiny GPT ({options.framework}): {options.n_layer} layers, d_model {options.d_model}, seq {options.seq}, "
          f"batch {options.batch}, vocab {options.vocab}, {'AdamWeightDecay' if mindspore else 'AdamW'}, "
          f"{options.steps} steps, 1 thread; median of "
          f"{options.repeats} (CPU time per step)\n")
    print("| tool | config | ms/step | overhead |")
    print("|---|---|---:|---:|")
    overheads: dict = {}
    for tool, _, _ in tools:
        plain = statistics.median(times[(tool, None)])
        print(f"| {tool} | plain | {plain * 1000:.1f} | |")
        for name in options.configs:
            if (tool, name) not in times:
                continue
            median = statistics.median(times[(tool, name)])
            overheads[(tool, name)] = median / plain - 1
            print(f"| {tool} | {name} | {median * 1000:.1f} | +{overheads[(tool, name)] * 100:.0f} % |")
    if len(tools) == 2:
        print("\n| config | ours / reference overhead |")
        print("|---|---:|")
        for name in (n for n in options.configs if n in MAIN):
            ratio = overheads[("ours", name)] / overheads[("reference", name)]
            print(f"| {name} | {ratio:.2f} (target <= 0.25) |")
    for path in _GOLDENS.values():
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)
    for name in options.configs:        # the monitor must not change training
        if losses[("ours", None)] != losses[("ours", name)]:
            print(f"WARNING: ours with {name} ended with loss {losses[('ours', name)]!r}, without "
                  f"{losses[('ours', None)]!r}", file=sys.stderr)


def judgements(base: dict, env: dict, repeats: int) -> None:
    """CPU time per step of the alert rules and the golden watch on recorded runs (see the module docstring)."""
    import time

    sys.path.insert(0, ROOT)
    from msprobe.monitor.anomaly import AnomalyDetector
    from msprobe.monitor.golden import GoldenWatch
    from msprobe.monitor.layout import read_run

    base = dict(base, steps=base["steps"] + base["warmup"], warmup=0)
    with tempfile.TemporaryDirectory(prefix="bench_monitor_judge_") as tmp:
        runs = {}
        for seed in (42, 43):
            runs[seed] = os.path.join(tmp, f"run{seed}")
            run_child(sys.executable, dict(base, config=CONFIGS["+actv+param"], data_seed=seed), env, out=runs[seed])
        steps = list(read_run(runs[42])[0])
        rules = CONFIGS["+actv+rules"]["alert"]["rules"]
        times: dict = {}
        for _ in range(repeats):
            detector, start = AnomalyDetector(rules), time.process_time()
            for records in steps:
                detector.observe(records)
            times.setdefault("alert rules", []).append((time.process_time() - start) / len(steps))
            for name, seed in (("golden watch, identical steps", 42), ("golden watch, every step judged", 43)):
                watch, start = GoldenWatch(runs[seed], 0), time.process_time()
                for records in steps:
                    watch.check(records)
                times.setdefault(name, []).append((time.process_time() - start) / len(steps))
    print(f"\ntiny GPT: {base['n_layer']} layers, d_model {base['d_model']}: {len(steps[0])} rows a step, "
          f"{len(steps)} steps; median of {repeats} (CPU time per step, in this process)\n")
    print("| judgement | ms/step |")
    print("|---|---:|")
    for name, values in times.items():
        print(f"| {name} | {statistics.median(values) * 1000:.2f} |")


if __name__ == "__main__":
    main()
