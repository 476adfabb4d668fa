"""Cost and memory of the collectors' step writer (issue 25): one long step of N typical API entries (two input
tensor records, one output, a stack) written by the streaming StepWriter of msprobe.collect, against the design it
replaced (every entry kept in a dict until stop(), then one orjson encode). Each mode runs in its own process;
peak memory is the process's VmHWM above its level before the step. No framework needed.

    python benchmarks/bench_writer.py                 # 200000 entries
    python benchmarks/bench_writer.py --entries 50000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile

CHILD = r'''
import json, os, sys, time
from msprobe.collect.writer import StepWriter
from msprobe.dump.reader import encode_dump_json

def hwm():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0

mode, entries, directory = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def tensor(i):
    return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [8, 128, 256], "Max": 3.25 + i,
            "Min": -2.5, "Mean": 0.0012345678, "Norm": 123.456789, "requires_grad": True}
stack = ("File /work/train.py, line 42, in forward, \n x = self.proj(x)",
         "File /work/train.py, line 7, in <module>, \n loss = model(x)")
before = hwm()
start = time.perf_counter()
if mode == "stream":
    writer = StepWriter("pytorch", "statistics", "mix")
    writer.open(directory)
    for i in range(entries):
        name = f"Functional.linear.{i}.forward"
        writer.add(name, {"input_args": [tensor(i), tensor(i)], "input_kwargs": {}, "output": [tensor(i)]}, stack)
        writer.add_construct(name, "Module.layers.0.Block.forward.0")
    writer.close()
else:
    data, construct, stacks = {}, {}, {}
    for i in range(entries):
        name = f"Functional.linear.{i}.forward"
        data[name] = {"input_args": [tensor(i), tensor(i)], "input_kwargs": {}, "output": [tensor(i)]}
        construct[name] = "Module.layers.0.Block.forward.0"
        stacks.setdefault(stack, []).append(name)
    for file, content in (("dump.json", {"task": "statistics", "level": "mix", "framework": "pytorch",
                                         "dump_data_dir": None, "data": data}),
                          ("construct.json", construct),
                          ("stack.json", {str(i): [n, list(s)] for i, (s, n) in enumerate(stacks.items())})):
        with open(os.path.join(directory, file), "wb") as handle:
            handle.write(encode_dump_json(content))
seconds = time.perf_counter() - start
size = os.path.getsize(os.path.join(directory, "dump.json"))
print("RESULT " + json.dumps({"seconds": seconds, "peak": hwm() - before, "bytes": size}))
'''


def run(mode: str, entries: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_writer_") as directory:
        proc = subprocess.run([sys.executable, "-c", CHILD, mode, str(entries), directory], capture_output=True,
                              text=True, check=True)
    return json.loads(proc.stdout.split("RESULT ", 1)[1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=3, help="runs per mode, interleaved; medians reported")
    args = ap.parse_args(argv)
    results: dict = {"stream": [], "in_memory": []}
    for _ in range(args.repeats):
        for mode in results:
            results[mode].append(run(mode, args.entries))
    print(f"{args.entries} entries per step; dump.json {results['stream'][0]['bytes'] / 1e6:.1f} MB")
    print("| writer | seconds per step | us per entry | peak memory above the start |")
    print("|---|---|---|---|")
    for mode, runs in results.items():
        seconds = sorted(r["seconds"] for r in runs)[len(runs) // 2]
        peak = sorted(r["peak"] for r in runs)[len(runs) // 2]
        print(f"| {mode} | {seconds:.2f} | {1e6 * seconds / args.entries:.1f} | {peak / 1e6:.0f} MB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
