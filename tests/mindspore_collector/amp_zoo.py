"""Mixed precision in MindSpore's static graph, one process per list of cases (tests/mindspore_collector/test_amp.py
runs it): each case trains a small model two steps with an amp configuration, in GRAPH_MODE or with the amp'd
network under an @ms.jit cell in PyNative, once without a debugger and then once per recording (a level and a
task), and prints one JSON line per case: for each recording whether its losses and parameters equal the plain
run's bit for bit, what each step's dump.json holds, and any exception; with "oracle", also the entry names of the
same model recorded in PyNative (L0; under the @ms.jit cell's class without @ms.jit), the numbering the static
graph must give.

    python amp_zoo.py '<json list of cases>' <dump root>

A case is {"model": "cnn"|"transformer"|"lstm", "mode": "graph"|"jit", "amp": <below>, "runs": [[level, task],
...], "oracle": bool}, level L0|mix|L1, task statistics|md5|tensor, amp one of: O0, O1, O2, O3
(ms.amp.auto_mixed_precision), build-O2 and build-O3 (ms.amp.build_train_network; O2 with a fixed loss scale), custom-white and custom-black
(ms.amp.custom_mixed_precision), to_float-<path> (Cell.to_float(float16) on the cell at that path of the model: a
conv, a Dense, a whole block, a BatchNorm).

MindSpore compiles graphs from source files: the models live here, not in the test."""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops

STEPS = 2


def back(y, x):
    """A cell's output in its input's float type: a cell given to_float(float16) alone computes in float16 and
    hands float16 on, which the next cell (float32 weights) cannot take; a whole network in float16 is unchanged."""
    return y.astype(x.dtype)


class Block(nn.Cell):
    """conv -> BatchNorm -> ReLU with a residual add."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, pad_mode="same", has_bias=True)
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU()

    def construct(self, x):
        y = back(self.conv(x), x)
        return back(self.relu(back(self.bn(y), y)), y) + x


class Cnn(nn.Cell):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 4, 3, pad_mode="same")
        self.bn = nn.BatchNorm2d(4)
        self.block = Block()
        self.head = nn.Dense(4, 3)

    def construct(self, x):
        y = back(self.stem(x), x)
        y = ops.relu(back(self.bn(y), y))
        y = back(self.block(y), y)
        return self.head(y.mean(axis=(2, 3)))


class Attention(nn.Cell):
    """Single-head self-attention with a causal mask."""

    def __init__(self, width: int):
        super().__init__()
        self.qkv = nn.Dense(width, 3 * width)
        self.proj = nn.Dense(width, width)
        self.scale = float(1.0 / np.sqrt(width))
        self.mask = Tensor(np.triu(np.full((6, 6), -1e4, np.float32), 1))

    def construct(self, x):
        q, k, v = ops.split(back(self.qkv(x), x), x.shape[-1], axis=-1)
        scores = ops.matmul(q, k.swapaxes(-1, -2)) * self.scale + self.mask.astype(q.dtype)
        y = ops.matmul(ops.softmax(scores, axis=-1), v)
        return back(self.proj(y), y)


class Transformer(nn.Cell):
    """A pre-norm transformer block (LayerNorm, attention, GELU MLP) and a dense head."""

    def __init__(self, width: int = 8):
        super().__init__()
        self.ln1 = nn.LayerNorm((width,))
        self.attn = Attention(width)
        self.ln2 = nn.LayerNorm((width,))
        self.fc1 = nn.Dense(width, 2 * width)
        self.act = nn.GELU()
        self.fc2 = nn.Dense(2 * width, width)
        self.head = nn.Dense(width, 3)

    def construct(self, x):
        x = x + back(self.attn(back(self.ln1(x), x)), x)
        h = back(self.fc1(back(self.ln2(x), x)), x)
        x = x + back(self.fc2(back(self.act(h), h)), x)
        return self.head(x.mean(axis=1))


class Lstm(nn.Cell):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(4, 5, batch_first=True)
        self.head = nn.Dense(5, 3)

    def construct(self, x):
        out, _ = self.rnn(x)
        return self.head(back(out, x)[:, -1])


MODELS = {"cnn": (Cnn, (4, 1, 6, 6)), "transformer": (Transformer, (2, 6, 8)), "lstm": (Lstm, (2, 5, 4))}


def _wrap_init(self, network):
    nn.Cell.__init__(self)
    self.network = network


def _wrap_class(jit: bool):
    """The amp'd network under an @ms.jit cell called from PyNative, or the same cell without @ms.jit (the oracle);
    both named Wrap."""
    def construct(self, x):
        return self.network(x)

    return type("Wrap", (nn.Cell,), {"__init__": _wrap_init, "__module__": __name__,
                                     "construct": ms.jit(construct) if jit else construct})


WRAPS = {jit: _wrap_class(jit) for jit in (True, False)}


def cell_at(net, path: str):
    for part in path.split("."):
        net = net._cells[part]
    return net


def make(case: dict):
    """(the network given to the debugger: the training step, a training step: (x, labels) -> loss, its
    parameters)."""
    ms.set_seed(0)
    model, _shape = MODELS[case["model"]]
    net = model()
    amp = case["amp"]
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    if amp.startswith("to_float-"):
        cell_at(net, amp[len("to_float-"):]).to_float(ms.float16)
    elif amp.startswith("custom-"):
        lists = {"white": {"white_list": [nn.Dense, nn.Conv2d]}, "black": {"black_list": [nn.BatchNorm2d,
                                                                                          nn.LayerNorm]}}
        net = ms.amp.custom_mixed_precision(net, **lists[amp[len("custom-"):]])
    elif amp in ("O0", "O1", "O2", "O3"):
        net = ms.amp.auto_mixed_precision(net, amp)
    if case["mode"] in ("jit", "oracle"):
        net = WRAPS[case["mode"] == "jit"](net)
    params = net.trainable_params()
    opt = nn.Momentum(params, 0.05, 0.9)
    if amp.startswith("build-"):
        level = amp[len("build-"):]
        # O2 scales the loss: on CPU with a fixed scale (MindSpore's dynamic loss scaling needs GPU or Ascend)
        scaling = {"loss_scale_manager": ms.amp.FixedLossScaleManager(1024.0, drop_overflow_update=False)} \
            if level == "O2" else {}
        train = ms.amp.build_train_network(net, opt, loss_fn, level=level, **scaling)
    else:
        train = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), opt)
    train.set_train()
    return train, train, params


def data(case: dict):
    rng = np.random.RandomState(1)
    shape = MODELS[case["model"]][1]
    return Tensor(rng.randn(*shape).astype(np.float32)), Tensor(rng.randint(0, 3, shape[0]).astype(np.int32))


def train(case: dict, root: str | None, level: str = "L0", task: str = "statistics") -> dict:
    from msprobe.mindspore import PrecisionDebugger

    ms.set_context(mode=ms.GRAPH_MODE if case["mode"] == "graph" else ms.PYNATIVE_MODE)
    net, step, params = make(case)
    debugger = None
    if root is not None:
        debugger = PrecisionDebugger(dump_path=root, level=level, task="tensor" if task == "tensor" else "statistics",
                                     summary_mode="md5" if task == "md5" else "statistics")
    x, labels = data(case)
    losses = []
    for _ in range(STEPS):
        if debugger is not None:
            debugger.start(net)
        loss = step(x, labels)
        loss = loss[0] if isinstance(loss, tuple) else loss     # a loss-scaling step: (loss, overflow, scale)
        losses.append(loss.asnumpy().tobytes().hex())
        if debugger is not None:
            debugger.stop()
            debugger.step()
    return {"losses": losses, "params": {p.name: p.asnumpy().tobytes().hex() for p in params}}


def dumps(root: str) -> list:
    """What each step's dump.json holds: its folder, incomplete, entry names and the dtypes of each entry."""
    found = []
    for top, _dirs, files in sorted(os.walk(root)):
        if "dump.json" in files:
            with open(os.path.join(top, "dump.json")) as handle:
                dump = json.load(handle)
            dtypes = {name: sorted({r["dtype"] for section in ("input_args", "output", "input")
                                    for r in (body.get(section) or []) if isinstance(r, dict) and "dtype" in r})
                      for name, body in dump["data"].items()}
            found.append({"folder": os.path.relpath(top, root), "incomplete": dump.get("incomplete"),
                          "names": list(dump["data"]), "dtypes": dtypes})
    return found


def main() -> None:
    cases = json.loads(sys.argv[1])
    root = sys.argv[2]
    for number, case in enumerate(cases):
        result = {"case": case, "runs": []}
        try:
            plain = train(case, None)
            for level, task in case["runs"]:
                folder = os.path.join(root, f"{number}-{level}-{task}")
                began = time.process_time()
                recorded = train(case, folder, level, task)
                result["runs"].append({"level": level, "task": task, "folder": folder, "dumps": dumps(folder),
                                       "cpu": time.process_time() - began,
                                       "same_losses": plain["losses"] == recorded["losses"],
                                       "same_params": plain["params"] == recorded["params"]})
            if case.get("oracle"):
                folder = os.path.join(root, f"{number}-oracle")
                train(dict(case, mode="oracle" if case["mode"] == "jit" else "pynative"), folder)
                result["oracle"] = dumps(folder)
        except Exception:  # noqa: BLE001 - reported to the test
            result["error"] = traceback.format_exc()[-3000:]
        print("AMP " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
