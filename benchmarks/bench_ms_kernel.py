"""Overhead of level L2 (MindSpore's kernel dump driven by the debugger, issue 33): the refdata GPT
(tests/fixtures/ms_gpt) trained in GRAPH_MODE (jit_level O0, kernel by kernel, CPU) with nn.TrainOneStepCell, per
step, without a debugger, with ours at L2 task tensor and task statistics (statistic.csv computed from the dumped
tensors, which are then removed), and with the reference's (mindstudio-probe 26.2.0) at L2 task tensor (its task
statistics cannot run on CPU).

The time of a step is the wall time of start(), the training step, its loss's asnumpy(), stop() and step() (the
debugger's calls alone are timed too: on CPU with task statistics they include the statistic.csv); the first step
(graph compilation) is left out, the median of the others is taken per child, the fastest child of
`--repeats` per configuration (the children interleaved, so that a busy machine slows all alike).

    python benchmarks/bench_ms_kernel.py --ref-python /work/scratch/kernel/refenv/bin/python
    python benchmarks/bench_ms_kernel.py --ref-python none --repeats 2 --steps 6

Our interpreter needs mindspore 2.10 (numpy<2) and this msprobe; the reference's needs mindspore 2.10 and
mindstudio-probe 26.2.0 and must not see ours (its children run without this checkout on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPT_DIR = os.path.join(ROOT, "tests", "fixtures", "ms_gpt")
CONFIGS = (("plain", None), ("ours", "tensor"), ("ours", "statistics"), ("reference", "tensor"))


def child(tool: str, task: str | None, steps: int, out: str) -> None:
    """One training run; prints the per-step times as JSON on the last line."""
    import mindspore as ms
    from mindspore import Tensor, nn

    sys.path.insert(0, GPT_DIR)
    ms.set_context(mode=ms.GRAPH_MODE, jit_config={"jit_level": "O0"})
    ms.set_device("CPU")
    import ms_gpt
    from common_init import make_batch

    debugger = None
    if task is not None:
        if tool == "reference":
            ms_gpt.patch_mint_norm_for_cpu()
        from msprobe.mindspore import PrecisionDebugger

        config = os.path.join(out, "config.json")
        with open(config, "w", encoding="utf-8") as handle:
            json.dump({"task": task, "level": "L2", "dump_path": os.path.join(out, "dump"), "step": [],
                       "rank": [], task: {"scope": [], "list": [], "data_mode": ["all"]}}, handle)
        debugger = PrecisionDebugger(config_path=config)
    model = ms_gpt.GPT()
    ms_gpt.load_weights(model)
    train = nn.TrainOneStepCell(model, nn.SGD(model.trainable_params(), learning_rate=ms_gpt.LR))
    train.set_train()
    times, calls = [], []
    for step in range(steps):
        ids, labels = make_batch(step % 2)
        begin = time.perf_counter()
        if debugger is not None:
            debugger.start()
        started = time.perf_counter()
        train(Tensor(ids, ms.int32), Tensor(labels, ms.int32)).asnumpy()
        trained = time.perf_counter()
        if debugger is not None:
            debugger.stop()
            debugger.step()
        end = time.perf_counter()
        times.append(end - begin)
        calls.append((started - begin) + (end - trained))
    print(json.dumps({"step": times, "calls": calls}))


def run_child(python: str, tool: str, task: str | None, steps: int, workdir: str) -> tuple:
    """(median step time, median time of the debugger's calls: start, stop and step) of one run, steps 2.."""
    out = tempfile.mkdtemp(dir=workdir)
    env = dict(os.environ, GLOG_v="3", PYTHONWARNINGS="ignore")
    env.pop("PYTHONPATH", None)
    if tool != "reference":
        env["PYTHONPATH"] = ROOT
    proc = subprocess.run([python, os.path.abspath(__file__), "--child", tool, task or "none", str(steps), out],
                          capture_output=True, text=True, env=env, cwd=out)
    if proc.returncode != 0:
        raise RuntimeError(f"{tool} {task} failed (rc {proc.returncode}):\n{proc.stdout[-2000:]}\n"
                           f"{proc.stderr[-3000:]}")
    times = json.loads(proc.stdout.strip().splitlines()[-1])
    return statistics.median(times["step"][1:]), statistics.median(times["calls"][1:])


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        tool, task, steps, out = argv[1:5]
        child(tool, None if task == "none" else task, int(steps), out)
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=sys.executable, help="interpreter with our msprobe (default: this one)")
    ap.add_argument("--ref-python", default="none", help="interpreter with mindstudio-probe 26.2.0, or 'none'")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    configs = [c for c in CONFIGS if c[0] != "reference" or args.ref_python.lower() != "none"]
    medians: dict = {config: [] for config in configs}
    with tempfile.TemporaryDirectory(prefix="bench_ms_kernel_") as workdir:
        for repeat in range(args.repeats):
            for tool, task in configs:
                python = args.ref_python if tool == "reference" else args.python
                seconds, calls = run_child(python, tool, task, args.steps, workdir)
                medians[(tool, task)].append((seconds, calls))
                print(f"  run {repeat + 1}/{args.repeats} {tool:<9} {task or '-':<10} {seconds * 1e3:8.1f} ms/step "
                      f"(debugger calls {calls * 1e3:.2f} ms)", flush=True)
    plain = min(medians[("plain", None)])[0]
    print(f"\nper step (median of steps 2..{args.steps} per run, fastest of {args.repeats} runs):")
    for (tool, task), values in medians.items():
        best, calls = min(values)
        extra = "" if tool == "plain" else (f"  (+{(best - plain) * 1e3:.1f} ms, x{best / plain:.2f}; "
                                            f"debugger calls {calls * 1e3:.2f} ms)")
        print(f"  {tool:<9} {task or 'no debugger':<12} {best * 1e3:8.1f} ms{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
