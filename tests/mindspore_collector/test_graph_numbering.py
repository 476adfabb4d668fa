"""Static-graph entries are numbered as PyNative numbers them (docs/dump.md, "Numbering"): each case records the same
model in GRAPH_MODE (or with a jit cell in PyNative) and in plain PyNative, the oracle, and compares the entry names
(the graph records no parameters_grad) and, with task tensor, the values. Before the fix: start()/stop() twice in one
step wrote Cell.*.backward.0 twice into one dump.json; with two graph runs in a step (gradient accumulation)
backward.0 held the second micro-batch's gradient; a sub-cell under `if <tensor>` in an @ms.jit cell was forward.0
and forward.1 with backward.1 (and failed to compile with its gradient taps); a recomputed cell (Cell.recompute())
was recorded twice. Also: TrainOneStepCell with nn.SGD records one step folder per step, in both modes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

ms = pytest.importorskip("mindspore", reason="mindspore is not installed (it needs numpy<2: the MindSpore collector "
                                             "tests run in the separate environment of .ci/run)")
from mindspore import Tensor, nn, ops  # noqa: E402
from ms_zoo import mode  # noqa: E402

import msprobe  # noqa: E402
from msprobe.mindspore import PrecisionDebugger  # noqa: E402


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(4, 4)
        self.fc2 = nn.Dense(4, 1)

    def construct(self, x):
        return self.fc2(ops.relu(self.fc1(x)))


def _gate_init(self):
    nn.Cell.__init__(self)
    self.a = nn.Dense(4, 4)
    self.b = nn.Dense(4, 4)
    self.out = nn.Dense(4, 1)


def _gate_class(jit: bool):
    """A cell called under `if <tensor>` (a or b, then out), its construct compiled with @ms.jit or not: both
    classes are named Gate, as the oracle must name its cells as the graph does."""
    def construct(self, x):
        if x.sum() > 0:
            y = self.a(x)
        else:
            y = self.b(x)
        return self.out(y)

    return type("Gate", (nn.Cell,), {"__init__": _gate_init, "__module__": __name__,
                                     "construct": ms.jit(construct) if jit else construct})


GATES = {jit: _gate_class(jit) for jit in (False, True)}


class Outer(nn.Cell):
    def __init__(self, jit: bool):
        super().__init__()
        self.inp = nn.Dense(4, 4)
        self.gate = GATES[jit]()

    def construct(self, x):
        return self.gate(self.inp(x))


def batches():
    rng = np.random.RandomState(0)
    x = rng.randn(2, 4).astype(np.float32)
    return [Tensor(x), Tensor(-x - 5)], Tensor(np.zeros((2, 1), np.float32))


def record(root: Path | None, graph: bool, model, how: str, task: str = "tensor", recompute: bool = False):
    """One step: two micro-batches through value_and_grad, `how` = "twice" (start/stop around each), "accumulate"
    (one start/stop around both); the losses and gradients of both."""
    with mode(graph):
        ms.set_seed(0)
        net = model()
        if recompute:
            net.fc1.recompute()
        debugger = PrecisionDebugger(dump_path=str(root), level="L0", task=task) if root is not None else None
        grad_fn = ms.value_and_grad(nn.WithLossCell(net, nn.MSELoss()), None, net.trainable_params())
        xs, t = batches()
        results = []
        if debugger is not None and how == "accumulate":
            debugger.start(net)
        for x in xs:
            if debugger is not None and how == "twice":
                debugger.start(net)
            loss, grads = grad_fn(x, t)
            results.append((loss.asnumpy(), [g.asnumpy() for g in grads]))
            if debugger is not None and how == "twice":
                debugger.stop()
        if debugger is not None:
            debugger.stop()
            debugger.step()
        return results


def step_dir(root: Path) -> Path:
    (found,) = (root / "step0").iterdir()
    return found


def entries(root: Path) -> dict:
    """dump.json's entries; a name written twice fails (json.load keeps the last one silently)."""
    def unique(pairs):
        names = [name for name, _ in pairs]
        assert len(names) == len(set(names)), f"written twice: {sorted({n for n in names if names.count(n) > 1})}"
        return dict(pairs)
    return json.loads((step_dir(root) / "dump.json").read_text(), object_pairs_hook=unique)["data"]


def graph_names(data: dict) -> list:
    return [name for name in data if ".parameters_grad." not in name]


def assert_same_values(got_root: Path, oracle_root: Path) -> None:
    """Every tensor of the graph dump equals the oracle's, within 1e-5 of the tensor's scale (the same run)."""
    got, oracle = entries(got_root), entries(oracle_root)
    for name, body in got.items():
        for section in ("input_args", "output", "input"):
            for mine, theirs in zip(body.get(section) or [], oracle[name].get(section) or []):
                assert (mine is None) == (theirs is None), (name, section)
                if mine is None:
                    continue
                a = np.load(step_dir(got_root) / "dump_tensor_data" / mine["data_name"])
                b = np.load(step_dir(oracle_root) / "dump_tensor_data" / theirs["data_name"])
                assert a.shape == b.shape, (name, section)
                np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * max(1.0, float(np.abs(b).max())),
                                           err_msg=f"{name} {section}")


def check_against_oracle(tmp_path, graph: bool, model, how: str, recompute: bool = False) -> dict:
    plain = record(None, graph, model, how, recompute=recompute)
    got = record(tmp_path / "graph", graph, model, how, recompute=recompute)
    for (loss_a, grads_a), (loss_b, grads_b) in zip(plain, got):     # training unchanged, bit for bit
        assert loss_a.tobytes() == loss_b.tobytes()
        assert all(a.tobytes() == b.tobytes() for a, b in zip(grads_a, grads_b))
    oracle_model = (lambda: Outer(False)) if model is not Net else Net
    record(tmp_path / "oracle", False, oracle_model, how)
    data = entries(tmp_path / "graph")
    assert graph_names(data) == graph_names(entries(tmp_path / "oracle"))
    assert_same_values(tmp_path / "graph", tmp_path / "oracle")
    return data


@pytest.mark.slow
def test_start_and_stop_twice_in_one_step_numbers_the_second_part_on(tmp_path):
    data = check_against_oracle(tmp_path, True, Net, "twice")
    assert list(data) == ["Cell.fc1.Dense.forward.0", "Cell.fc2.Dense.forward.0", "Cell.fc2.Dense.backward.0",
                          "Cell.fc1.Dense.backward.0", "Cell.fc1.Dense.forward.1", "Cell.fc2.Dense.forward.1",
                          "Cell.fc2.Dense.backward.1", "Cell.fc1.Dense.backward.1"]


@pytest.mark.slow
@pytest.mark.parametrize("recompute", [False, True], ids=["plain", "recompute"])
def test_backward_n_holds_the_gradient_of_micro_batch_n(tmp_path, recompute):
    """Two graph runs in one recorded step: each backward entry belongs to its own forward call (the gradient of
    MSE at fc2's output is 2 (y - t) / n for that call's y), entries in PyNative's order; a recomputed cell
    (Cell.recompute()) is recorded once per call."""
    data = check_against_oracle(tmp_path, True, Net, "accumulate", recompute=recompute)
    files = step_dir(tmp_path / "graph") / "dump_tensor_data"
    _, t = batches()
    for call in (0, 1):
        y = np.load(files / data[f"Cell.fc2.Dense.forward.{call}"]["output"][0]["data_name"])
        dy = np.load(files / data[f"Cell.fc2.Dense.backward.{call}"]["input"][0]["data_name"])
        np.testing.assert_allclose(dy, 2 * (y - t.asnumpy()) / y.size, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("graph", [False, True], ids=["jit-in-pynative", "graph-mode"])
def test_a_cell_under_if_tensor_is_numbered_as_pynative(tmp_path, graph):
    """`if x.sum() > 0` picks a or b; the second micro-batch takes the other branch. In PyNative, MindSpore runs the
    jit graph's forward again in its backward pass (control flow): that repeated forward is no new call."""
    data = check_against_oracle(tmp_path, graph, lambda: Outer(not graph), "accumulate")
    assert [name for name in data if ".gate." in name] == [
        "Cell.gate.a.Dense.forward.0", "Cell.gate.out.Dense.forward.0", "Cell.gate.Gate.forward.0",
        "Cell.gate.out.Dense.backward.0", "Cell.gate.a.Dense.backward.0", "Cell.gate.Gate.backward.0",
        "Cell.gate.b.Dense.forward.0", "Cell.gate.out.Dense.forward.1", "Cell.gate.Gate.forward.1",
        "Cell.gate.out.Dense.backward.1", "Cell.gate.b.Dense.backward.0", "Cell.gate.Gate.backward.1"]


class Small(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, pad_mode="valid")
        self.bn = nn.BatchNorm2d(2)
        self.fc = nn.Dense(2 * 4 * 4, 3)

    def construct(self, x):
        x = ops.relu(self.bn(self.conv(x)))
        return self.fc(x.reshape(x.shape[0], -1))


def train_one_step_cell(root: Path | None, graph: bool, steps: int = 3):
    """`nn.TrainOneStepCell(nn.WithLossCell(net, loss), nn.SGD(...))` given to start() at every step: the losses
    and the final weight."""
    with mode(graph):
        ms.set_seed(0)
        net = Small()
        train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.1))
        debugger = PrecisionDebugger(dump_path=str(root), level="L0") if root is not None else None
        rng = np.random.RandomState(0)
        x, t = Tensor(rng.randn(4, 1, 6, 6).astype(np.float32)), Tensor(rng.randn(4, 3).astype(np.float32))
        losses = []
        for _ in range(steps):
            if debugger is not None:
                debugger.start(train)
            losses.append(train(x, t).asnumpy().tobytes())
            if debugger is not None:
                debugger.stop()
                debugger.step()
        return losses, net.fc.weight.asnumpy().tobytes()


@pytest.mark.slow
def test_train_one_step_cell_is_one_step_folder_per_step_in_both_modes(tmp_path):
    """PyNative: nn.SGD is an @ms.jit cell; it is recorded as a cell in the step's folder (no graph/ and pynative/
    halves). GRAPH_MODE: the whole step is one graph, and each step is its own step (not every one step 0)."""
    folders = {}
    for graph in (True, False):
        root = tmp_path / ("graph" if graph else "pynative")
        assert train_one_step_cell(root, graph) == train_one_step_cell(None, graph)    # bit-identical
        assert sorted(p.name for p in root.iterdir()) == ["step0", "step1", "step2"]
        for step in range(3):
            (folder,) = (root / f"step{step}").iterdir()
            assert folder.name == "rank" if graph else folder.name.startswith("proc")
            dump = json.loads((folder / "dump.json").read_text())
            assert "incomplete" not in dump
            assert "Cell.network._backbone.fc.Dense.backward.0" in dump["data"]
        folders[graph] = root / "step0"
    pynative = entries(tmp_path / "pynative")
    assert "Cell.optimizer.SGD.forward.0" in pynative and not any(n.startswith("Jit.") for n in pynative)
    # the two modes record the network alike: the graph's entries are PyNative's but for parameters_grad and the
    # optimizer (its argument is a tuple of gradients)
    graph_entries = entries(tmp_path / "graph")
    assert sorted(graph_entries) == sorted(n for n in graph_names(pynative) if not n.startswith("Cell.optimizer."))
    (graph_rank,) = folders[True].iterdir()
    (pynative_rank,) = folders[False].iterdir()
    result = msprobe.compare(graph_rank, pynative_rank)
    rows = {row["NPU Name"]: row for row in result.pairs[0].rows}
    assert rows["Cell.network._backbone.fc.Dense.backward.0.input.0"]["Bench Name"] == \
        "Cell.network._backbone.fc.Dense.backward.0.input.0"
