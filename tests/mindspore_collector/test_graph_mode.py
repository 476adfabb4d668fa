"""The MindSpore collector on compiled graphs (docs/dump.md, "MindSpore static graph"): GRAPH_MODE at L0, mix and L1
through host callbacks compiled into the graph, and the cells inside @ms.jit cells of PyNative; training
bit-identical with the debugger on, values equal to a hand computation, the downstream commands (compare, -da, graph)
on these dumps, and the errors for what the mode cannot do.

Each dump compiles a graph (about a second on CPU): the dumps are made once per module."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ms = pytest.importorskip("mindspore", reason="mindspore is not installed (it needs numpy<2: the MindSpore collector "
                                             "tests run in the separate environment of .ci/run)")
from mindspore import Tensor, nn, ops  # noqa: E402
from ms_zoo import mode  # noqa: E402

import msprobe  # noqa: E402
from msprobe.errors import MsprobeError  # noqa: E402
from msprobe.mindspore import PrecisionDebugger, graph_mode  # noqa: E402

STEPS = 2


class Head(nn.Cell):
    """A dense layer that can compute in float16 (the planted defect of the -da test)."""

    def __init__(self, half: bool = False):
        super().__init__()
        self.dense = nn.Dense(2 * 6 * 6, 3)
        self.half = half

    def construct(self, x):
        if self.half:
            w = self.dense.weight.astype(ms.float16)
            return ops.cast(ops.matmul(x.astype(ms.float16), w.T), ms.float32) + self.dense.bias
        return self.dense(x)


class Net(nn.Cell):
    def __init__(self, half: bool = False):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, pad_mode="valid")
        self.bn = nn.BatchNorm2d(2)
        self.head = Head(half)

    def construct(self, x):
        x = ops.relu(self.bn(self.conv(x)))
        return self.head(x.reshape(x.shape[0], -1))


def data():
    rng = np.random.RandomState(0)
    return Tensor(rng.randn(4, 1, 8, 8).astype(np.float32)), Tensor(rng.randn(4, 3).astype(np.float32))


def train(root: Path | None, half: bool = False, **config):
    """Two training steps of Net in GRAPH_MODE (Momentum), with a debugger writing to `root` when given: the
    losses, the final head weight and the initial parameters."""
    with mode(True):
        ms.set_seed(0)
        net = Net(half)
        initial = {p.name: p.asnumpy().copy() for p in net.get_parameters()}
        debugger = PrecisionDebugger(dump_path=str(root), **config) if root is not None else None
        step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.1, 0.9))
        step.set_train()
        x, t = data()
        losses = []
        for _ in range(STEPS):
            if debugger is not None:
                debugger.start(net)
            losses.append(step(x, t).asnumpy().item())
            if debugger is not None:
                debugger.stop()
                debugger.step()
        return losses, net.head.dense.weight.asnumpy(), initial


def load(root: Path, step: int = 0, name: str = "dump.json"):
    return json.loads((root / f"step{step}" / "rank" / name).read_text())


@pytest.fixture(scope="module")
def plain():
    return train(None)


@pytest.fixture(scope="module")
def dumps(tmp_path_factory, plain):
    """level/task -> dump root; each training bit-identical to the plain one."""
    made = {}
    for label, config in {"L0-statistics": {"level": "L0"},
                          "L0-md5": {"level": "L0", "summary_mode": "md5"},
                          "L0-tensor": {"level": "L0", "task": "tensor"},
                          "mix-statistics": {"level": "mix"}}.items():
        root = tmp_path_factory.mktemp(label)
        losses, weight, _ = train(root, **config)
        assert losses == plain[0], label                 # bit-identical losses and weights
        assert np.array_equal(weight, plain[1]), label
        made[label] = root
    return made


# a cell after the cells inside it, forward and backward, as PyNative writes them
CELLS = ["Cell.conv.Conv2d.forward.0", "Cell.bn.BatchNorm2d.forward.0", "Cell.head.dense.Dense.forward.0",
         "Cell.head.Head.forward.0", "Cell.head.dense.Dense.backward.0", "Cell.head.Head.backward.0",
         "Cell.bn.BatchNorm2d.backward.0", "Cell.conv.Conv2d.backward.0"]


@pytest.mark.slow
def test_l0_layout_names_and_hierarchy(dumps):
    root = dumps["L0-statistics"]
    assert sorted(p.name for p in root.iterdir()) == ["step0", "step1"]
    assert sorted(p.name for p in (root / "step0" / "rank").iterdir()) == ["construct.json", "dump.json",
                                                                           "stack.json"]
    dump = load(root)
    assert (dump["task"], dump["level"], dump["framework"]) == ("statistics", "L0", "mindspore")
    assert "incomplete" not in dump
    assert list(dump["data"]) == CELLS
    assert load(root, 1)["data"].keys() == dump["data"].keys()
    construct = load(root, name="construct.json")
    assert construct["Cell.head.dense.Dense.forward.0"] == "Cell.head.Head.forward.0"
    assert construct["Cell.head.dense.Dense.backward.0"] == "Cell.head.Head.backward.0"
    assert construct["Cell.conv.Conv2d.forward.0"] is None
    dense = dump["data"]["Cell.head.dense.Dense.forward.0"]
    assert [r["shape"] for r in dense["input_args"]] == [[4, 72]] and dense["input_kwargs"] == {}
    assert [r["shape"] for r in dense["output"]] == [[4, 3]]
    backward = dump["data"]["Cell.head.dense.Dense.backward.0"]
    assert [r["shape"] for r in backward["input"]] == [[4, 3]] and [r["shape"] for r in backward["output"]] == \
        [[4, 72]]


@pytest.mark.slow
def test_tensor_values_are_the_cells_own_computation(dumps, plain):
    """Step 0's dense layer: output = input @ W.T + b with the initial parameters; the gradient of its input =
    gradient of its output @ W; the statistics are those of the saved tensors."""
    root = dumps["L0-tensor"] / "step0" / "rank"
    dump = json.loads((root / "dump.json").read_text())["data"]
    files = root / "dump_tensor_data"

    def tensor(record):
        return np.load(files / record["data_name"])

    initial = plain[2]
    w, b = initial["head.dense.weight"], initial["head.dense.bias"]
    forward = dump["Cell.head.dense.Dense.forward.0"]
    x, y = tensor(forward["input_args"][0]), tensor(forward["output"][0])
    np.testing.assert_allclose(y, x @ w.T + b, rtol=1e-5, atol=1e-6 * np.abs(y).max())
    backward = dump["Cell.head.dense.Dense.backward.0"]
    dy, dx = tensor(backward["input"][0]), tensor(backward["output"][0])
    np.testing.assert_allclose(dx, dy @ w, rtol=1e-5, atol=1e-6 * np.abs(dx).max())
    # the loss is MSE over 12 values: its gradient at the head output is 2 * (y - t) / 12
    _, t = data()
    np.testing.assert_allclose(dy, 2 * (y - t.asnumpy()) / 12, rtol=1e-5, atol=1e-7)
    record = forward["output"][0]
    assert record["dtype"] == "Float32" and record["shape"] == [4, 3]
    assert record["Max"] == pytest.approx(float(y.max()), rel=1e-6)
    assert record["Norm"] == pytest.approx(float(np.linalg.norm(y.astype(np.float64))), rel=1e-5)
    # the conv's input is the data
    np.testing.assert_array_equal(tensor(dump["Cell.conv.Conv2d.forward.0"]["input_args"][0]), data()[0].asnumpy())


@pytest.mark.slow
def test_md5_and_statistics_agree(dumps):
    stats = load(dumps["L0-statistics"])["data"]
    md5 = load(dumps["L0-md5"])["data"]
    assert stats.keys() == md5.keys()
    for name, body in md5.items():
        for section in ("input_args", "output", "input"):
            assert len(body.get(section, [])) == len(stats[name].get(section, [])), name
            for a, b in zip(body.get(section, []), stats[name].get(section, [])):
                assert (a is None) == (b is None), name     # a backward slot no gradient came back to
                assert a is None or (len(a["md5"]) == 8 and a["Max"] == b["Max"] and a["Norm"] == b["Norm"])


@pytest.mark.slow
def test_mix_adds_the_functional_calls_inside_the_graph(dumps):
    data = load(dumps["mix-statistics"])["data"]
    assert set(CELLS) <= set(data)
    assert "Functional.relu.0.forward" in data
    assert not any(name.startswith("Functional.") and name.endswith(".backward") for name in data)
    relu = data["Functional.relu.0.forward"]
    assert relu["output"][0]["Min"] == 0.0 and relu["input_args"][0]["shape"] == [4, 2, 6, 6]
    # the loss's square (MSELoss calls ops.square) is seen too; nn.Dense's own Primitive is not (docs/dump.md)
    assert "Functional.square.0.forward" in data
    assert not any(name.startswith("Functional.matmul") for name in data)


@pytest.mark.slow
def test_l1_without_a_model_and_restores_the_apis(tmp_path, plain):
    relu = ops.relu
    losses, weight, _ = train(tmp_path / "l1", level="L1")
    assert losses == plain[0] and np.array_equal(weight, plain[1])
    assert ops.relu is relu
    data = load(tmp_path / "l1")["data"]
    assert "Functional.relu.0.forward" in data and not any(n.startswith("Cell.") for n in data)
    assert json.loads((tmp_path / "l1" / "step0" / "rank" / "construct.json").read_text()) == {}


@pytest.mark.slow
def test_compare_and_graph_on_graph_mode_dumps(dumps, tmp_path):
    root = dumps["L0-statistics"]
    result = msprobe.compare(root / "step0", root / "step0")
    assert list(result.ranks) == ["rank"]
    names = result.column("NPU Name")
    assert "Cell.head.dense.Dense.forward.0.output.0" in names and "Cell.conv.Conv2d.backward.0.input.0" in names
    assert set(result.column("Result")) == {"pass"}
    out = tmp_path / "graph"
    done = subprocess.run([sys.executable, "-m", "msprobe", "graph", "-tp", str(root / "step0" / "rank"), "-o",
                           str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert list(out.glob("*.vis"))


@pytest.mark.slow
def test_diff_analyze_finds_the_planted_float16_cell(dumps, tmp_path):
    target = tmp_path / "fp16"
    train(target, half=True, level="L0")
    analysis = msprobe.diff_analyze(target / "step0", dumps["L0-statistics"] / "step0")
    assert analysis.op_name == "Cell.head.Head.forward.0"


# ---------------------------------------------------------------------------------------------- bad input
def test_a_debugger_started_after_compilation_says_so(tmp_path, caplog):
    with mode(True):
        net = Net()
        x, _ = data()
        net(x)                                   # compiled without taps
        debugger = PrecisionDebugger(dump_path=str(tmp_path), level="L0")
        debugger.start(net)
        net(x)
        debugger.stop()
    dump = load(tmp_path)
    assert dump["data"] == {}
    assert "compiled before start(model)" in dump["incomplete"]
    assert "before the first call of the network" in caplog.text


def test_a_second_debugger_records_through_the_taps_of_the_first(tmp_path):
    """A notebook cell run again: the graph compiled with the first debugger's taps reports to the new one."""
    with mode(True):
        ms.set_seed(0)
        net = Net()
        x, _ = data()
        first = PrecisionDebugger(dump_path=str(tmp_path / "first"), level="L0")
        first.start(net)
        expected = net(x).asnumpy()
        first.stop()
        second = PrecisionDebugger(dump_path=str(tmp_path / "second"), level="L0")
        second.start(net)
        got = net(x).asnumpy()
        second.stop()
    assert np.array_equal(expected, got)
    assert list(load(tmp_path / "second")["data"]) == list(load(tmp_path / "first")["data"]) == [
        "Cell.conv.Conv2d.forward.0", "Cell.bn.BatchNorm2d.forward.0", "Cell.head.dense.Dense.forward.0",
        "Cell.head.Head.forward.0"]


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_a_later_step_is_recorded_though_the_graph_compiled_in_step_0(tmp_path, level):
    relu = ops.relu
    with mode(True):
        ms.set_seed(0)
        net = Net()
        x, _ = data()
        debugger = PrecisionDebugger(dump_path=str(tmp_path), level=level, step=[1])
        for _ in range(2):
            debugger.start(net)          # step 0 is not recorded, but compiles the graph: the taps go in first
            net(x)
            debugger.stop()
            debugger.step()
    assert ops.relu is relu
    assert [p.name for p in tmp_path.iterdir()] == ["step1"]
    data_ = load(tmp_path, 1)["data"]
    assert "Cell.head.Head.forward.0" in data_ and ("Functional.relu.0.forward" in data_) == (level == "mix")


def test_what_graph_mode_cannot_do_is_one_clear_error(tmp_path):
    with mode(True):
        debugger = PrecisionDebugger(dump_path=str(tmp_path), level="L0")
        with pytest.raises(MsprobeError, match="pass the model"):
            debugger.start()
    problem = graph_mode.device_problem("Ascend")
    assert "CPU only" in problem and "L2" in problem and "PYNATIVE_MODE" in problem
    assert graph_mode.device_problem("CPU") is None


# ---------------------------------------------------------------------------------------------- jit in PyNative
class Block(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(8, 8)
        self.fc2 = nn.Dense(8, 8)

    @ms.jit
    def construct(self, x):
        return self.fc2(ops.relu(self.fc1(x)))


class JitNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.inp = nn.Dense(4, 8)
        self.block = Block()
        self.head = nn.Dense(8, 2)

    def construct(self, x):
        return self.head(self.block(self.inp(x)))


def train_jit(root: Path | None, level: str = "L0"):
    ms.set_seed(0)
    net = JitNet()
    debugger = PrecisionDebugger(dump_path=str(root), level=level) if root is not None else None
    loss_fn = nn.MSELoss()
    opt = nn.SGD(net.trainable_params(), 0.1)
    grad_fn = ms.value_and_grad(lambda x, t: loss_fn(net(x), t), None, opt.parameters)
    rng = np.random.RandomState(1)
    x, t = Tensor(rng.randn(4, 4).astype(np.float32)), Tensor(rng.randn(4, 2).astype(np.float32))
    losses = []
    for _ in range(STEPS):
        if debugger is not None:
            debugger.start(net)
        loss, grads = grad_fn(x, t)
        opt(grads)
        losses.append(loss.asnumpy().item())
        if debugger is not None:
            debugger.stop()
            debugger.step()
    return losses, net.head.weight.asnumpy()


@pytest.mark.slow
@pytest.mark.parametrize("level", ["L0", "mix"])
def test_jit_cells_in_pynative_are_dumped_into_the_step_folder(tmp_path, level):
    """One folder per step, as any PyNative dump: the jit cell recorded by its PyNative hooks, the cells inside it by
    the taps, in PyNative's order (the cells inside before the jit cell, forward and backward)."""
    plain = train_jit(None)
    losses, weight = train_jit(tmp_path, level)
    assert losses == plain[0] and np.array_equal(weight, plain[1])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step0", "step1"]
    (rank,) = (tmp_path / "step1").iterdir()
    assert rank.name.startswith("proc")
    data = json.loads((rank / "dump.json").read_text())["data"]
    cells = [name for name in data if name.startswith("Cell.") and ".parameters_grad." not in name]
    assert cells == ["Cell.inp.Dense.forward.0", "Cell.block.fc1.Dense.forward.0", "Cell.block.fc2.Dense.forward.0",
                     "Cell.block.Block.forward.0", "Cell.head.Dense.forward.0", "Cell.head.Dense.backward.0",
                     "Cell.block.fc2.Dense.backward.0", "Cell.block.fc1.Dense.backward.0",
                     "Cell.block.Block.backward.0", "Cell.inp.Dense.backward.0"]
    assert not any(name.startswith("Jit.Block") for name in data)      # the jit cell is a cell, not a Jit entry
    construct = json.loads((rank / "construct.json").read_text())
    assert construct["Cell.block.fc1.Dense.forward.0"] == "Cell.block.Block.forward.0"
    assert construct["Cell.block.fc2.Dense.backward.0"] == "Cell.block.Block.backward.0"
    # the block's own output is fc2's; the gradient at fc1's input is the one the block hands back
    assert data["Cell.block.fc2.Dense.forward.0"]["output"] == data["Cell.block.Block.forward.0"]["output"]
    assert data["Cell.block.fc1.Dense.backward.0"]["output"] == data["Cell.block.Block.backward.0"]["output"]
    result = msprobe.compare(tmp_path / "step1", tmp_path / "step1")
    names = result.column("NPU Name")
    assert "Cell.block.fc1.Dense.forward.0.input.0" in names and "Cell.inp.Dense.forward.0.input.0" in names
    assert set(result.column("Result")) == {"pass"}


# ---------------------------------------------------------------------------------------------- the walk-through
@pytest.mark.slow
def test_the_walkthrough_runs(tmp_path):
    """docs/mindspore_walkthrough.md, static-graph part: its script and commands give what the page shows."""
    import re

    from conftest import run_cli

    page = (Path(__file__).resolve().parents[2] / "docs" / "mindspore_walkthrough.md").read_text()
    (script,) = re.findall(r"```python\n(.*?)```", page, re.S)
    (tmp_path / "walk.py").write_text(script)        # MindSpore compiles graphs from source files

    def python(*args):
        done = subprocess.run([sys.executable, "walk.py", *args], cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]

    python()
    assert sorted(p.name for p in (tmp_path / "target_dump").iterdir()) == ["step0", "step1"]
    analysis = msprobe.diff_analyze(tmp_path / "target_dump" / "step0", tmp_path / "golden_dump" / "step0")
    assert analysis.op_name == "Cell.head.Head.forward.0"
    assert run_cli(["compare", "-tp", tmp_path / "target_dump" / "step0", "-gp", tmp_path / "golden_dump" / "step0",
                    "-da", "-o", tmp_path / "out"]) == 0
    (golden_config,) = (tmp_path / "out").glob("next_dump_*_golden.json")
    (target_config,) = (tmp_path / "out").glob("next_dump_*_target.json")
    python(str(golden_config), str(target_config))
    next_dump = tmp_path / "out" / "next_dump"
    result = msprobe.compare(next_dump / "target" / "step0", next_dump / "golden" / "step0")
    rows = {row["NPU Name"]: row for row in result.pairs[0].rows}
    assert rows["Functional.matmul.0.forward.output.0"]["NPU Dtype"] == "Float16"
    assert rows["Cell.head.Head.forward.0.input.0"]["Result"] == "pass"
    assert rows["Cell.head.Head.forward.0.output.0"]["Result"] == "warning"


# ---------------------------------------------------------------------------------------------- dtypes, call order
class _Cast(nn.Cell):
    def construct(self, x):
        return x.astype(ms.bfloat16) * 2


class _Back(nn.Cell):
    def construct(self, x):
        return x.astype(ms.float32)


class _Mixed(nn.Cell):
    """Integer ids, a bfloat16 section and a cell called twice."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.cast = _Cast()
        self.back = _Back()
        self.act = nn.Tanh()
        self.fc = nn.Dense(4, 1)

    def construct(self, ids):
        return self.fc(self.act(self.act(self.back(self.cast(self.emb(ids)))))).sum()


@pytest.mark.slow
def test_integers_bfloat16_and_a_cell_called_twice(tmp_path):
    ids = Tensor(np.array([[1, 2], [3, 4]], np.int32))

    def run(root):
        with mode(True):
            ms.set_seed(0)
            net = _Mixed()
            debugger = PrecisionDebugger(dump_path=str(root), level="L0", task="tensor") if root else None
            grad_fn = ms.value_and_grad(net, None, net.trainable_params())
            if debugger:
                debugger.start(net)
            loss, grads = grad_fn(ids)
            if debugger:
                debugger.stop()
            return loss.asnumpy(), [g.asnumpy() for g in grads]

    plain = run(None)
    got = run(tmp_path)
    assert np.array_equal(plain[0], got[0]) and all(np.array_equal(a, b) for a, b in zip(plain[1], got[1]))
    dump = load(tmp_path)["data"]
    assert list(dump) == [
        "Cell.emb.Embedding.forward.0", "Cell.cast._Cast.forward.0", "Cell.back._Back.forward.0",
        "Cell.act.Tanh.forward.0", "Cell.act.Tanh.forward.1", "Cell.fc.Dense.forward.0", "Cell.fc.Dense.backward.0",
        "Cell.act.Tanh.backward.1", "Cell.act.Tanh.backward.0", "Cell.back._Back.backward.0",
        "Cell.cast._Cast.backward.0", "Cell.emb.Embedding.backward.0"]
    assert [r["dtype"] for r in dump["Cell.emb.Embedding.forward.0"]["input_args"]] == ["Int32"]
    assert dump["Cell.cast._Cast.forward.0"]["output"][0]["dtype"] == "BFloat16"
    files = tmp_path / "step0" / "rank" / "dump_tensor_data"

    def tensor(name, section, slot=0):
        return np.load(files / dump[name][section][slot]["data_name"])

    np.testing.assert_array_equal(tensor("Cell.emb.Embedding.forward.0", "input_args"), ids.asnumpy())
    # call 1 takes call 0's output; the gradient at call 1's input is the one at call 0's output
    np.testing.assert_array_equal(tensor("Cell.act.Tanh.forward.1", "input_args"),
                                  tensor("Cell.act.Tanh.forward.0", "output"))
    np.testing.assert_array_equal(tensor("Cell.act.Tanh.backward.0", "input"),
                                  tensor("Cell.act.Tanh.backward.1", "output"))
    y0 = tensor("Cell.act.Tanh.forward.0", "output")
    np.testing.assert_allclose(tensor("Cell.act.Tanh.backward.0", "output"),
                               tensor("Cell.act.Tanh.backward.0", "input") * (1 - y0 ** 2), rtol=1e-5, atol=1e-7)


class _Two(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(4, 4)

    def construct(self, x, scale=1.0):
        y = self.fc(x)
        return y * scale, y.sum(), 3


class _TupleNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.two = _Two()

    def construct(self, x):
        a, b, c = self.two(x, scale=2.0)          # a keyword argument goes through the tapped construct
        return a.sum() + b * c


@pytest.mark.slow
def test_tuple_outputs_and_keyword_arguments(tmp_path):
    with mode(True):
        ms.set_seed(0)
        net = _TupleNet()
        debugger = PrecisionDebugger(dump_path=str(tmp_path), level="L0")
        grad_fn = ms.value_and_grad(net, None, net.trainable_params())
        debugger.start(net)
        loss, _ = grad_fn(Tensor(np.ones((2, 4), np.float32)))
        debugger.stop()
    data = load(tmp_path)["data"]
    two = data["Cell.two._Two.forward.0"]
    assert [r["shape"] for r in two["input_args"]] == [[2, 4]]        # the keyword and the int are not tensors
    assert [r["shape"] for r in two["output"]] == [[2, 4], []]
    assert two["output"][1]["Max"] == pytest.approx(float(loss.asnumpy()) / 5, rel=1e-6)   # 2 y.sum() + 3 y.sum()
    assert [r["shape"] for r in data["Cell.two._Two.backward.0"]["input"]] == [[2, 4], []]
