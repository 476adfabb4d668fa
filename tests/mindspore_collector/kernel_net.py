"""A small GRAPH_MODE training run for the level L2 tests (test_kernel_dump.py), one process per configuration
because MindSpore reads its kernel dump configuration once per process:

    python kernel_net.py OUT.json [--config JSON] [--fp16] [--late JSON] [--pynative] [--steps N] [--record LIST]

conv -> BatchNorm -> ReLU -> dense, softmax cross entropy, Momentum, 2 steps (nn.TrainOneStepCell, jit_level O0 =
kernel by kernel). --config makes a PrecisionDebugger(**JSON) before the network is built; --fp16 runs the dense
cell in float16; --late JSON makes a PrecisionDebugger(**JSON) after the first step and uses it for the second.
--pynative runs in PyNative mode. --steps N trains N steps (default 2); --record 0,2 calls start() and stop() in
those steps only (step() in every step). OUT.json gets the losses and the final parameters as hex bytes."""

import json
import sys

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn

STEPS = 2


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, pad_mode="pad", padding=1, has_bias=True)
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU()
        self.flat = nn.Flatten()
        self.fc = nn.Dense(4 * 6 * 6, 5)

    def construct(self, x):
        return self.fc(self.flat(self.relu(self.bn(self.conv(x)))))


def batch(step: int):
    rng = np.random.RandomState(step)
    return Tensor(rng.randn(2, 3, 6, 6).astype(np.float32)), Tensor(rng.randint(0, 5, (2,)).astype(np.int32))


def main(argv: list) -> None:
    out = argv[0]
    config = json.loads(argv[argv.index("--config") + 1]) if "--config" in argv else None
    ms.set_context(mode=ms.PYNATIVE_MODE if "--pynative" in argv else ms.GRAPH_MODE, jit_config={"jit_level": "O0"})
    ms.set_device("CPU")
    steps = int(argv[argv.index("--steps") + 1]) if "--steps" in argv else STEPS
    record = ({int(step) for step in argv[argv.index("--record") + 1].split(",")} if "--record" in argv
              else set(range(steps)))
    result = {"losses": []}
    debugger = None
    if config is not None:
        from msprobe.mindspore import PrecisionDebugger

        debugger = PrecisionDebugger(**config)
    net = Net()
    for index, param in enumerate(net.trainable_params()):
        param.set_data(Tensor(np.random.RandomState(index).randn(*param.shape).astype(np.float32) * 0.1))
    if "--fp16" in argv:
        net.fc.to_float(ms.float16)
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    train = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), nn.Momentum(net.trainable_params(), 0.01, 0.9))
    train.set_train()
    for step in range(steps):
        if debugger is not None and step in record:
            debugger.start()
        loss = train(*batch(step))
        if debugger is not None:
            if step in record:
                debugger.stop()
            debugger.step()
        result["losses"].append(loss.asnumpy().tobytes().hex())
        if "--late" in argv and step == 0:
            from msprobe.mindspore import PrecisionDebugger

            debugger = PrecisionDebugger(**json.loads(argv[argv.index("--late") + 1]))
    result["params"] = {p.name: p.asnumpy().tobytes().hex() for p in net.trainable_params()}
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(result, handle)


if __name__ == "__main__":
    main(sys.argv[1:])
