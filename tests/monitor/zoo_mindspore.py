"""The monitor zoo's MindSpore runner (tests/monitor/zoo.py: the cases, faults and expectations): the zoo's GPT, CNN
and LSTM built in MindSpore (PyNative, CPU) with the same cell names, trained by a `ms.value_and_grad` step with
nn.AdamWeightDecay under msprobe.mindspore's TrainerMon, the same faults planted at the same step. `autocast` runs
the Dense, Conv2d and Embedding cells in float16 and the normalisations and the LSTM in float32 (cell.to_float, as
MindSpore's amp level O2; the CPU has no bfloat16 matmul)."""

from __future__ import annotations

import math

import numpy as np

from tests.monitor.helpers import monitoring
from tests.monitor.zoo import AT, FC1


def _models():
    from mindspore import Tensor, nn, ops

    class Attention(nn.Cell):
        def __init__(self, d, heads=2, bug_from_length=None):
            super().__init__()
            self.qkv, self.proj, self.heads = nn.Dense(d, 3 * d), nn.Dense(d, d), heads
            self.bug_from_length = bug_from_length

        def construct(self, x):
            b, t, d = x.shape
            q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(0, 2, 1, 3)
                       for z in ops.split(self.qkv(x), d, axis=-1))
            scale = 1.0 / math.sqrt(d // self.heads)
            if self.bug_from_length is not None and t >= self.bug_from_length:
                scale *= 4.0            # the "long sequence" kernel path scales the scores wrongly
            scores = ops.matmul(q, k.transpose(0, 1, 3, 2)) * scale
            mask = Tensor(np.triu(np.ones((t, t), np.bool_), 1))
            a = ops.matmul(ops.softmax(ops.masked_fill(scores, mask, float("-inf")), -1), v)
            return self.proj(a.transpose(0, 2, 1, 3).reshape(b, t, d))

    class Block(nn.Cell):
        def __init__(self, d, bug_from_length=None):
            super().__init__()
            self.ln1, self.attn = nn.LayerNorm((d,)), Attention(d, bug_from_length=bug_from_length)
            self.ln2, self.fc1, self.act, self.fc2 = nn.LayerNorm((d,)), nn.Dense(d, 4 * d), nn.GELU(), \
                nn.Dense(4 * d, d)

        def construct(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.fc2(self.act(self.fc1(self.ln2(x))))

    class GPT(nn.Cell):
        def __init__(self, vocab=32, d=16, layers=2, bug_from_length=None):
            super().__init__()
            self.emb, self.pos = nn.Embedding(vocab, d), nn.Embedding(32, d)
            self.layers = nn.CellList([Block(d, bug_from_length if i == 1 else None) for i in range(layers)])
            self.lnf, self.head = nn.LayerNorm((d,)), nn.Dense(d, vocab)

        def construct(self, x):
            h = self.emb(x) + self.pos(Tensor(np.arange(x.shape[1], dtype=np.int32)))
            for layer in self.layers:
                h = layer(h)
            return self.head(self.lnf(h))

    class CNN(nn.Cell):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(3, 6, 3, pad_mode="pad", padding=1, has_bias=True)
            self.b1, self.r1 = nn.BatchNorm2d(6), nn.ReLU()
            self.c2 = nn.Conv2d(6, 8, 3, pad_mode="pad", padding=1, has_bias=True)
            self.b2, self.r2 = nn.BatchNorm2d(8), nn.ReLU()
            self.pool, self.fc1 = nn.AdaptiveAvgPool2d(1), nn.Dense(8, 10)

        def construct(self, x):
            x = ops.max_pool2d(self.r1(self.b1(self.c1(x))), 2, 2)
            return self.fc1(self.pool(self.r2(self.b2(self.c2(x)))).reshape(x.shape[0], -1))

    class LSTMNet(nn.Cell):
        def __init__(self, vocab=24, d=16):
            super().__init__()
            self.emb, self.lstm, self.fc1 = nn.Embedding(vocab, d), nn.LSTM(d, d, batch_first=True), nn.Dense(d, vocab)

        def construct(self, x):
            return self.fc1(self.lstm(self.emb(x))[0])

    return {"gpt": GPT, "cnn": CNN, "lstm": LSTMNet}


def batch(model: str, step: int, length: int = 8):
    """The step's batch (numpy): a fixed function of the step."""
    rng = np.random.default_rng(1000 + step)
    if model == "cnn":
        x = rng.standard_normal((8, 3, 8, 8)).astype(np.float32)
        return x, (np.clip(np.floor(x.mean((1, 2, 3)) * 10), -4, 5) + 4).astype(np.int32)
    vocab = 32 if model == "gpt" else 24
    x = rng.integers(0, vocab, (4, length)).astype(np.int32)
    return x, ((x * 3 + 1) % vocab).astype(np.int32)


def _initialise(net, seed: int) -> None:
    """The same weights on every run whatever MindSpore's initialisers draw, at PyTorch's scales (embeddings N(0, 1),
    weights U(-1, 1) / sqrt(fan_in))."""
    from mindspore import Tensor

    rng = np.random.default_rng(seed)
    for name, param in sorted(net.parameters_and_names()):
        if name.endswith(("moving_mean", "beta", "bias")):
            value = np.zeros(param.shape, np.float32)
        elif name.endswith(("moving_variance", "gamma")):
            value = np.ones(param.shape, np.float32)
        elif name.endswith("embedding_table"):
            value = rng.standard_normal(param.shape).astype(np.float32)      # as torch.nn.Embedding
        else:
            fan_in = int(np.prod(param.shape[1:])) if len(param.shape) > 1 else param.shape[0]
            value = (rng.uniform(-1, 1, param.shape) / math.sqrt(fan_in)).astype(np.float32)
        param.set_data(Tensor(value))


def train(model: str, out, steps: int, fault: str = "none", config: str | None = None, autocast: bool = False,
          long_from: int | None = None, bug: bool = False, seed: int = 0) -> list:
    """tests/monitor/zoo.py's runner contract, for MindSpore."""
    import mindspore as ms
    from mindspore import Tensor, mint, nn, ops

    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    ms.runtime.launch_blocking()        # synchronous kernels: tiny models train at a fifth of the CPU time
    net = _models()[model](**({"bug_from_length": 16} if bug and model == "gpt" else {}))
    _initialise(net, seed)
    net.set_train(True)                 # BatchNorm on batch statistics
    if autocast:        # MindSpore's amp level O2: the network in float16, its normalisations in float32
        for _, cell in net.cells_and_names():
            if isinstance(cell, (nn.Dense, nn.Conv2d, nn.Embedding)):
                cell.to_float(ms.float16)
            elif isinstance(cell, (nn.BatchNorm2d, nn.LayerNorm, nn.LSTM)):
                # MindSpore 2.10's LSTM given a float16 input returns a gradient for it ~1e4 too small (the
                # embedding's weight gradient collapses with it: the golden watch names lstm.rnn at step 0): it
                # gets its input cast to float32, as its weights
                cell.to_float(ms.float32)
    opt = nn.AdamWeightDecay(net.trainable_params(), learning_rate=1e-3, eps=1e-8, weight_decay=0.01)
    fc1 = dict(net.cells_and_names())[FC1[model]]
    current = [0]
    if fault == "nan":
        def nan_hook(cell, inputs, output):
            if current[0] != AT:
                return None
            mask = np.zeros(output.shape, np.bool_)
            mask.reshape(-1)[3] = True
            return mint.where(Tensor(mask), Tensor(float("nan"), output.dtype), output)
        fc1.register_forward_hook(nan_hook)
    elif fault == "gdrop":
        fc1.weight.register_hook(lambda grad: grad * 0.1 if current[0] >= AT else None)
    elif fault == "explode":
        def explode(cell, grad_input, grad_output):
            if current[0] == AT:
                return tuple(g * 1e4 for g in grad_input)
            return None
        fc1.register_backward_hook(explode)
    from msprobe.mindspore import TrainerMon

    with monitoring(TrainerMon, config, out, net, opt):
        def step_loss(x, y):
            logits = net(x)
            return ops.cross_entropy(logits.astype(ms.float32).reshape(-1, logits.shape[-1]), y.reshape(-1))
        grad_fn = ms.value_and_grad(step_loss, None, opt.parameters)
        losses = []
        lr = opt.learning_rate.asnumpy().copy()
        for step in range(steps):
            current[0] = step
            if fault == "wscale" and step == AT:
                ops.assign(fc1.weight, fc1.weight * 50)    # in place: the optimizer's graph holds its memory
            x, y = batch(model, step, 16 if long_from is not None and step >= long_from else 8)
            if fault == "batch" and step == AT:
                x = x * 30 if x.dtype.kind == "f" else np.zeros_like(x)
            if fault == "lr" and step == AT:
                ops.assign(opt.learning_rate, Tensor(np.float32(lr * 100)))
            loss, grads = grad_fn(Tensor(x), Tensor(y))
            opt(grads)
            ops.assign(opt.learning_rate, Tensor(np.float32(lr)))
            losses.append(float(loss.asnumpy()))
    return losses
