"""A zoo of small MindSpore (PyNative, CPU) models exercising what real training scripts do: a CNN with BatchNorm and
ReLU, an MLP with LayerNorm, a recurrent loop of Dense cells, in-place ops, a cell called twice, tuple and dict
outputs, integer inputs, an @ms.jit function and an @ms.jit Cell, a float16 cast; a bidirectional two-layer LSTM
with initial states, a Transformer encoder layer with an attention mask and a padding mask, Conv1d/Conv2dTranspose
and pooling, dropout with an Embedding (padding_idx), a frozen Dense and stop_gradient, nested SequentialCell /
CellList / CellDict with keyword and None arguments, ops returning tuples, boolean masks and slice assignment.
Only ops with CPU kernels in MindSpore 2.10 are used.

Only mindspore and numpy are imported, so the same file drives the reference collector in a black-box
comparison (benchmarks, docs)."""

from __future__ import annotations

import contextlib

import mindspore as ms
import numpy as np
from mindspore import Tensor, mint, nn, ops


@contextlib.contextmanager
def mode(graph: bool):
    """GRAPH_MODE (graph) or PyNative while the block runs, PyNative after it."""
    ms.set_context(mode=ms.GRAPH_MODE if graph else ms.PYNATIVE_MODE)
    try:
        yield
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


class Cnn(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, pad_mode="pad", padding=1, has_bias=True)
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(4, 4, 3, pad_mode="same")
        self.bn2 = nn.BatchNorm2d(4)
        self.fc = nn.Dense(4, 3)

    def construct(self, x, labels):
        x = self.relu(self.bn(self.conv(x)))
        x = self.relu(mint.add(self.bn2(self.conv2(x)), x))        # a residual
        x = x.mean(axis=(2, 3))
        return ops.cross_entropy(self.fc(x), labels)


class Mlp(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(8, 16)
        self.ln = nn.LayerNorm((16,))
        self.act = nn.GELU()
        self.fc2 = mint.nn.Linear(16, 1)

    def construct(self, x, target):
        y = self.fc2(self.act(self.ln(self.fc1(x))))
        return mint.mean(mint.square(mint.sub(y, target)))


class RecurrentLoop(nn.Cell):
    """One Dense cell (and one Tanh) applied at every time step: a cell called many times in one step."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Dense(4, 8)
        self.hid = nn.Dense(8, 8, has_bias=False)
        self.act = nn.Tanh()
        self.out = nn.Dense(8, 2)

    def construct(self, xs, target):
        h = mint.zeros((xs.shape[0], 8), dtype=ms.float32)
        for t in range(xs.shape[1]):
            h = self.act(mint.add(self.inp(xs[:, t]), self.hid(h)))
        return mint.mean(mint.square(mint.sub(self.out(h), target)))


class InPlace(nn.Cell):
    """In-place Tensor methods and augmented assignments on activations."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(6, 6)
        self.fc2 = nn.Dense(6, 1)

    def construct(self, x, target):
        y = self.fc(x)
        y = y.add_(1.0)
        y = y.mul_(0.5)
        y += x
        y *= 2.0
        y = y.clamp(-3.0, 3.0)
        return mint.mean(mint.square(mint.sub(self.fc2(y), target)))


class Shared(nn.Cell):
    """The same cell called twice in one forward."""

    def __init__(self):
        super().__init__()
        self.block = nn.SequentialCell([nn.Dense(6, 6), nn.ReLU()])
        self.head = nn.Dense(6, 1)

    def construct(self, x, target):
        y = self.block(self.block(x))
        return mint.mean(mint.square(mint.sub(self.head(y), target)))


class PairOut(nn.Cell):
    def __init__(self):
        super().__init__()
        self.a = nn.Dense(6, 4)
        self.b = nn.Dense(6, 4)

    def construct(self, x):
        return self.a(x), mint.nn.functional.relu(self.b(x))


class DictOut(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(4, 2)

    def construct(self, x):
        y = self.fc(x)
        return {"logits": y, "probs": mint.nn.functional.softmax(y, dim=-1)}


class Outputs(nn.Cell):
    """Cells returning a tuple and a dict."""

    def __init__(self):
        super().__init__()
        self.pair = PairOut()
        self.dict = DictOut()

    def construct(self, x, target):
        first, second = self.pair(x)
        out = self.dict(mint.mul(first, second))
        return mint.mean(mint.square(mint.sub(out["logits"], target))) + mint.mean(out["probs"])


class Integers(nn.Cell):
    """Integer inputs: token ids through an embedding, integer arithmetic, an integer mask."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(12, 6)
        self.fc = nn.Dense(6, 3)

    def construct(self, ids, labels):
        shifted = mint.remainder(mint.add(ids, 1), 12)
        mask = mint.gt(shifted, 2).astype(ms.float32)
        x = self.emb(shifted) * mask.expand_dims(-1)
        return ops.cross_entropy(self.fc(x.sum(axis=1)), labels)


@ms.jit
def _scaled_gelu(x, scale):
    return mint.mul(ops.gelu(mint.add(x, 1.0)), scale)


class JitBlock(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(6, 6)
        self.norm = nn.LayerNorm((6,))

    @ms.jit
    def construct(self, x):
        return self.norm(ops.relu(self.fc(x)))


class Jitted(nn.Cell):
    """An @ms.jit function (calling mint and ops APIs) and an @ms.jit Cell inside the step."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(6, 6)
        self.block = JitBlock()
        self.head = nn.Dense(6, 1)
        self.scale = Tensor(np.float32(0.5))

    def construct(self, x, target):
        y = _scaled_gelu(self.fc(x), self.scale)
        y = self.block(y)
        return mint.mean(mint.square(mint.sub(self.head(y), target)))


class Half(nn.Cell):
    """A float16 section: activations cast to float16 and back."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(6, 6)
        self.head = nn.Dense(6, 1)

    def construct(self, x, target):
        y = ops.cast(self.fc(x), ms.float16)
        y = mint.mul(mint.nn.functional.relu(y), Tensor(2.0, ms.float16))
        y = y.astype(ms.float32)
        return mint.mean(mint.square(mint.sub(self.head(y), target)))


class Lstm(nn.Cell):
    """A bidirectional two-layer LSTM given its initial states (a cell returning nested tuples)."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(4, 5, num_layers=2, batch_first=True, bidirectional=True)
        self.fc = nn.Dense(10, 1)

    def construct(self, xs, target):
        h0 = ops.zeros((4, xs.shape[0], 5), ms.float32)
        c0 = ops.ones((4, xs.shape[0], 5), ms.float32) * 0.1
        out, (_, _) = self.rnn(xs, (h0, c0))
        return mint.mean(mint.square(mint.sub(self.fc(out[:, -1]), target)))


class Encoder(nn.Cell):
    """A Transformer encoder layer (its activation, ops.relu, is an attribute taken when it was built) with a
    causal attention mask and a key padding mask."""

    def __init__(self):
        super().__init__()
        self.enc = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True)
        self.fc = nn.Dense(8, 1)
        self.causal = Tensor(np.triu(np.full((5, 5), -1e9, np.float32), 1))
        self.padding = Tensor(np.arange(5)[None, :] >= np.array([[5], [3], [4]]))

    def construct(self, x, target):
        out = self.enc(x, src_mask=self.causal, src_key_padding_mask=self.padding)
        return mint.mean(mint.square(mint.sub(self.fc(out.mean(1)), target)))


class Convs(nn.Cell):
    """Conv1d; Conv2d, Conv2dTranspose, max and average pooling."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(3, 4, 3, pad_mode="same")
        self.c2 = nn.Conv2d(1, 2, 3, pad_mode="same")
        self.up = nn.Conv2dTranspose(2, 2, 2, stride=2)
        self.max = nn.MaxPool2d(2, 2)
        self.avg = nn.AvgPool2d(2, 2)
        self.fc = nn.Dense(6, 1)

    def construct(self, x, target):
        a = self.c1(x).mean(-1)
        b = self.avg(self.max(self.up(self.c2(x[:, :1].reshape(-1, 1, 4, 4))))).mean((2, 3))
        return mint.mean(mint.square(mint.sub(self.fc(ops.concat((a, b), -1)), target)))


class Frozen(nn.Cell):
    """An Embedding with padding_idx, dropout (random draws), a frozen Dense (requires_grad=False) and
    stop_gradient."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 6, padding_idx=0)
        self.frozen = nn.Dense(6, 6)
        self.frozen.weight.requires_grad = False
        self.drop = nn.Dropout(p=0.3)
        self.fc = nn.Dense(6, 1)

    def construct(self, ids, target):
        x = self.emb(ids)
        x = ops.stop_gradient(self.frozen(x)) + self.drop(x)
        return mint.mean(mint.square(mint.sub(self.fc(x.mean(1)), target)))


class KeywordHead(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(6, 1)

    def construct(self, y, target=None, bias=None, scale=1.0):
        out = self.fc(y) * scale
        if bias is not None:
            out = out + bias
        return mint.mean(mint.square(mint.sub(out, target)))


class Nested(nn.Cell):
    """A SequentialCell inside a SequentialCell, a CellList, a CellDict and a cell called with keyword arguments
    (a tensor, None and a float)."""

    def __init__(self):
        super().__init__()
        self.seq = nn.SequentialCell([nn.SequentialCell([nn.Dense(6, 6), nn.ReLU()]), nn.Dense(6, 6)])
        self.lst = nn.CellList([nn.Dense(6, 6), nn.Tanh()])
        self.dct = nn.CellDict({"a": nn.Dense(6, 6), "b": nn.Sigmoid()})
        self.head = KeywordHead()

    def construct(self, x, target):
        y = self.seq(x)
        for cell in self.lst:
            y = cell(y)
        y = self.dct["b"](self.dct["a"](y))
        return self.head(y, target=target, bias=None, scale=2.0)


class Indexing(nn.Cell):
    """ops returning tuples (split, topk, unique), a boolean mask with masked_fill, slicing and slice assignment."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(6, 6)
        self.head = nn.Dense(3, 1)

    def construct(self, x, target):
        y = self.fc(x)
        a, b = ops.split(y, 3, axis=1)
        values, indices = ops.topk(a, 2)
        unique, _ = ops.unique(ops.stop_gradient(indices.reshape(-1)))    # UniqueGrad has no CPU kernel
        y = ops.masked_fill(y, y > 0, 0.5)
        z = y[:, 1:4].copy()
        z[:, 0] = 1.0
        z[0] = z[0] * 2
        extra = mint.sum(values) * 0.01 + unique.astype(ms.float32).sum() * 0.0
        return mint.mean(mint.square(mint.sub(self.head(z + b), target))) + extra


def _float(rng, *shape):
    return Tensor(rng.standard_normal(shape).astype(np.float32))


def _batches(name: str, step: int):
    rng = np.random.default_rng(100 + step)
    if name == "cnn":
        return _float(rng, 2, 3, 6, 6), Tensor(rng.integers(0, 3, (2,)).astype(np.int32))
    if name == "mlp":
        return _float(rng, 4, 8), _float(rng, 4, 1)
    if name == "recurrent":
        return _float(rng, 3, 5, 4), _float(rng, 3, 2)
    if name == "lstm":
        return _float(rng, 3, 5, 4), _float(rng, 3, 1)
    if name == "encoder":
        return _float(rng, 3, 5, 8), _float(rng, 3, 1)
    if name == "convs":
        return _float(rng, 3, 3, 16), _float(rng, 3, 1)
    if name == "frozen":
        return Tensor(rng.integers(0, 10, (3, 5)).astype(np.int32)), _float(rng, 3, 1)
    if name == "outputs":
        return _float(rng, 3, 6), _float(rng, 3, 2)
    if name == "integers":
        return (Tensor(rng.integers(0, 12, (3, 5)).astype(np.int32)),
                Tensor(rng.integers(0, 3, (3,)).astype(np.int32)))
    return _float(rng, 4, 6), _float(rng, 4, 1)


MODELS = {"cnn": Cnn, "mlp": Mlp, "recurrent": RecurrentLoop, "inplace": InPlace, "shared": Shared,
          "outputs": Outputs, "integers": Integers, "jit": Jitted, "half": Half, "lstm": Lstm, "encoder": Encoder,
          "convs": Convs, "frozen": Frozen, "nested": Nested, "indexing": Indexing}


def build(name: str) -> nn.Cell:
    ms.set_seed(7)
    np.random.seed(7)
    model = MODELS[name]()
    rng = np.random.default_rng(3)
    for _, param in sorted(model.parameters_and_names()):       # the same start whatever the initialisers draw
        if param.name.endswith(("moving_mean", "moving_variance")):
            continue
        param.set_data(Tensor((rng.standard_normal(param.shape) * 0.3).astype(np.float32)))
    return model


def train(name: str, debugger=None, steps: int = 2):
    """Losses and final parameters (numpy) of `steps` SGD steps, with the debugger around each step if given."""
    ms.set_context(mode=ms.PYNATIVE_MODE)
    model = build(name)
    opt = nn.SGD(model.trainable_params(), learning_rate=0.05, momentum=0.9)
    grad_fn = ms.value_and_grad(lambda *a: model(*a), None, opt.parameters)
    losses = []
    for step in range(steps):
        inputs = _batches(name, step)
        if debugger is not None:
            debugger.start(model)
        loss, grads = grad_fn(*inputs)
        opt(grads)
        if debugger is not None:
            debugger.stop()
            debugger.step()
        losses.append(loss.asnumpy().copy())
    params = {p.name: p.asnumpy().copy() for p in model.get_parameters()}
    return losses, params
