"""One GRAPH_MODE training run for bench_ms_overhead.py --graph: an MLP of 8 blocks (Dense 256 -> BatchNorm1d ->
ReLU, `ops.relu` functional calls at mix/L1) on a batch of 64, `nn.TrainOneStepCell` with Momentum, CPU. Step 0
compiles the graph and is not timed; it prints "compile wall <s>s", and "train wall <s>s" and "train cpu <s>s" (the
process's CPU time, all threads: less sensitive to other work on a shared machine) for the other steps.
`--level none` trains without a debugger; `--idle` creates the debugger (the taps are compiled in) but records
no step after step 0 (`step: [0]`), which measures what the taps cost when they do not record."""

from __future__ import annotations

import argparse
import time

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops


class Block(nn.Cell):
    def __init__(self, width: int):
        super().__init__()
        self.dense = nn.Dense(width, width)
        self.norm = nn.BatchNorm1d(width)

    def construct(self, x):
        return ops.relu(self.norm(self.dense(x))) + x


class Net(nn.Cell):
    def __init__(self, width: int = 256, depth: int = 8):
        super().__init__()
        self.blocks = nn.CellList([Block(width) for _ in range(depth)])
        self.head = nn.Dense(width, 10)

    def construct(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--level", default="none", choices=["none", "L0", "mix", "L1"])
    ap.add_argument("--task", default="statistics", choices=["statistics", "md5", "tensor"])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--idle", action="store_true")
    ap.add_argument("--out", default="./ms_graph_dump")
    args = ap.parse_args()
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_seed(0)
    net = Net()
    debugger = None
    if args.level != "none":
        from msprobe.mindspore import PrecisionDebugger

        debugger = PrecisionDebugger(dump_path=args.out, level=args.level,
                                     task="tensor" if args.task == "tensor" else "statistics",
                                     summary_mode="md5" if args.task == "md5" else "statistics",
                                     step=[0] if args.idle else [])
    step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True,
                                                                                    reduction="mean")),
                               nn.Momentum(net.trainable_params(), 0.01, 0.9))
    step.set_train()
    rng = np.random.RandomState(0)
    x = Tensor(rng.randn(64, 256).astype(np.float32))
    y = Tensor(rng.randint(0, 10, 64).astype(np.int32))
    begin, cpu = time.perf_counter(), time.process_time()
    for index in range(args.steps + 1):
        if debugger is not None:
            debugger.start(net)
        loss = step(x, y).asnumpy()
        if debugger is not None:
            debugger.stop()
            debugger.step()
        if index == 0:
            print(f"compile wall {time.perf_counter() - begin:.3f}s")
            begin, cpu = time.perf_counter(), time.process_time()
    print(f"train wall {time.perf_counter() - begin:.3f}s")
    print(f"train cpu {time.process_time() - cpu:.3f}s")
    print(f"loss {float(loss):.9g}")


if __name__ == "__main__":
    main()
