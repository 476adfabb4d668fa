"""Primitives made while recording (levels L1 and mix): MindSpore's nn.LSTM makes its ops.LSTM (and Transpose,
ExpandDims, Concat) inside its construct at each call, where no cell holds them when the collector starts; they are
recorded as `Primitive.<Class>.<Class>.<n>`, counted per step like any primitive, training unchanged, everything
put back at stop() (docs/dump.md, "Primitives").

These tests need mindspore, which needs numpy<2 and lives in its own environment (see .ci/run); elsewhere they are
skipped with the reason below."""

from __future__ import annotations

import json

import numpy as np
import pytest

ms = pytest.importorskip("mindspore", reason="mindspore is not installed (it needs numpy<2: the MindSpore collector "
                                             "tests run in the separate environment of .ci/run)")
from mindspore import Tensor, nn, ops  # noqa: E402
from mindspore.ops.primitive import Primitive  # noqa: E402

from msprobe.mindspore import PrecisionDebugger  # noqa: E402
from msprobe.mindspore.primitives import PrimitiveHooks  # noqa: E402

X = np.random.default_rng(7).standard_normal((2, 5, 4)).astype(np.float32)
CACHED = {}


class _Net(nn.Cell):
    """nn.LSTM (batch first), then a transpose by a primitive made in construct, then one cached across calls."""

    def __init__(self):
        super().__init__()
        ms.set_seed(3)
        self.lstm = nn.LSTM(4, 3, 1, batch_first=True)
        self.fc = nn.Dense(3, 2)

    def construct(self, x):
        y, _ = self.lstm(x)
        z = ops.Transpose()(self.fc(y), (1, 0, 2))
        if "neg" not in CACHED:
            CACHED["neg"] = ops.Neg()
        return CACHED["neg"](z).sum()


def _train(debugger=None, steps=2, root=None):
    ms.set_context(mode=ms.PYNATIVE_MODE)
    CACHED.clear()
    net = _Net()
    opt = nn.SGD(net.trainable_params(), learning_rate=0.1)
    grad_fn = ms.value_and_grad(lambda x: net(x), None, opt.parameters)
    losses, outs = [], []
    for _ in range(steps):
        if debugger is not None:
            debugger.start(net)
        loss, grads = grad_fn(Tensor(X))
        opt(grads)
        if debugger is not None:
            debugger.stop()
            debugger.step()
        losses.append(loss.asnumpy().copy())
        outs.append(net.lstm(Tensor(X))[0].asnumpy())      # the LSTM's output of the step's weights, unrecorded
    return losses, {p.name: p.asnumpy().copy() for p in net.get_parameters()}, outs


def _data(root, step):
    (proc,) = [p for p in (root / f"step{step}").iterdir() if p.is_dir()]
    return json.loads((proc / "dump.json").read_text())["data"]


@pytest.mark.parametrize("level", ["L1", "mix"])
def test_an_lstm_made_in_construct_is_recorded_and_training_is_unchanged(tmp_path, level):
    plain_losses, plain_params, plain_outs = _train()
    losses, params, outs = _train(PrecisionDebugger(dump_path=str(tmp_path), level=level))
    assert all(np.array_equal(a, b) for a, b in zip(plain_losses, losses))
    assert all(np.array_equal(plain_params[k], params[k]) for k in plain_params)
    steps = [_data(tmp_path, 0), _data(tmp_path, 1)]
    assert list(steps[0]) == list(steps[1])                       # counted per step: the same names each step
    names = [n for n in steps[0] if n.startswith("Primitive.") and n.endswith(".forward")]
    made = [n for n in names if n.split(".")[1] == n.split(".")[2]]
    # nn.LSTM: x to time major, h0 and c0 expanded, the LSTM; the held Concat of its weights keeps its attribute name
    assert made[:4] == ["Primitive.Transpose.Transpose.0.forward", "Primitive.ExpandDims.ExpandDims.0.forward",
                        "Primitive.ExpandDims.ExpandDims.1.forward", "Primitive.LSTM.LSTM.0.forward"]
    assert "Primitive.concat.Concat.0.forward" in names
    assert "Primitive.Transpose.Transpose.2.forward" in made and "Primitive.Neg.Neg.0.forward" in made
    for step, data in enumerate(steps):
        lstm = data["Primitive.LSTM.LSTM.0.forward"]
        assert [a["shape"] for a in lstm["input_args"]] == [[5, 2, 4], [1, 2, 3], [1, 2, 3], [4 * 3 * (4 + 3 + 1), 1, 1]]
        y = lstm["output"][0]
        assert y["shape"] == [5, 2, 3]
        if step:        # step 1's output: the LSTM of the weights after step 0's update (outs[0], batch first)
            want = outs[0].astype(np.float64)
            np.testing.assert_allclose([y["Max"], y["Min"], y["Mean"], y["Norm"]],
                                       [want.max(), want.min(), want.mean(), np.linalg.norm(want)],
                                       rtol=1e-5, atol=1e-6)
        backward = data["Primitive.LSTM.LSTM.0.backward"]
        assert [g["shape"] for g in backward["input"]] == [[5, 2, 3]]          # the gradient of y
        # the gradients of its arguments: of the flat weights, and at mix of x (the cell's backward hook wants it)
        assert [g["shape"] for g in backward["output"]] == [[96, 1, 1]] + ([[5, 2, 4]] if level == "mix" else [])


def test_made_primitives_are_put_back_at_stop_and_made_inside_an_api_are_not_recorded(tmp_path):
    init = Primitive.__dict__["__init__"]
    debugger = PrecisionDebugger(dump_path=str(tmp_path), level="L1")
    net = _Net()
    debugger.start(net)
    assert Primitive.__dict__["__init__"] is not init
    made = ops.Transpose()
    assert type(made) is not ops.Transpose and isinstance(made, ops.Transpose)
    made(Tensor(X), (1, 0, 2))
    ops.matmul(Tensor(X[0]), Tensor(X[0].T))         # an API: what it makes inside is its own
    debugger.stop()
    assert Primitive.__dict__["__init__"] is init
    assert type(made) is ops.Transpose and type(ops.Transpose()) is ops.Transpose
    assert [n for n in _data(tmp_path, 0) if n.endswith(".forward")] == \
        ["Primitive.Transpose.Transpose.0.forward", "Functional.matmul.0.forward"]


def test_a_failure_adopting_a_made_primitive_never_reaches_training(tmp_path, monkeypatch, msprobe_records):
    expected = _train()

    def broken(self, prim):
        raise RuntimeError("no swap today")
    monkeypatch.setattr(PrimitiveHooks, "_adopt", broken)
    got = _train(PrecisionDebugger(dump_path=str(tmp_path), level="L1"))
    assert all(np.array_equal(a, b) for a, b in zip(expected[0], got[0]))
    assert all(np.array_equal(expected[1][k], got[1][k]) for k in expected[1])
    data = _data(tmp_path, 0)
    assert "Primitive.concat.Concat.0.forward" in data and not any(".LSTM." in n for n in data)
    assert sum("no swap today" in r.getMessage() for r in msprobe_records) == 1


def test_level_l0_leaves_primitive_init_alone_also_after_a_graph_compiles(tmp_path):
    init = Primitive.__dict__["__init__"]

    @ms.jit
    def double(x):
        return ops.mul(x, 2.0)
    debugger = PrecisionDebugger(dump_path=str(tmp_path), level="L0")
    net = _Net()
    debugger.start(net)
    double(Tensor(X))                                 # compiles with the collector suspended, then resumed
    assert Primitive.__dict__["__init__"] is init
    net(Tensor(X))
    debugger.stop()
    assert not any(n.startswith("Primitive.") for n in _data(tmp_path, 0))
