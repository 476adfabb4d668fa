"""TrainerMon for MindSpore PyNative (msprobe.mindspore.TrainerMon): every metric against hand computation and against
the reference's own output on the same script, training bit-identical with the monitor on (a transformer block,
a CNN with BatchNorm and ReLU, an LSTM, a TrainOneStepCell step, a value_and_grad step, and the collector's model
zoo), absent gradients, gradient accumulation, evaluation forwards, the optimizers' moments, the statistics on the
device against those on the host, failures that never reach training, action stop, print_struct, format api,
memory; jit, GRAPH_MODE, Model.train, dynamic_on, analyse across ranks, the docs' example.

These tests need mindspore, which needs numpy<2 and lives in its own environment (see .ci/run); elsewhere they are
skipped with the reason below. The CI runs them all there (-m ""); the slow marks are for a quick local run."""

from __future__ import annotations

import csv
import gc
import json
import logging
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, run_cli

pytest.importorskip("mindspore", reason="mindspore is not installed (it needs numpy<2: the MindSpore monitor tests "
                                        "run in the separate environment of .ci/run)")

import mindspore as ms  # noqa: E402
from mindspore import Tensor, mint, nn, ops  # noqa: E402

import msprobe.mindspore.monitor as ms_monitor  # noqa: E402
from msprobe.mindspore import TrainerMon, monitor_stats  # noqa: E402
from msprobe.monitor.config import MonitorConfigError  # noqa: E402
from msprobe.monitor.engine import MonitorStop  # noqa: E402
from msprobe.monitor.layout import read_anomalies, read_run  # noqa: E402

from .helpers import ALL_OPS, EVERYTHING, assert_same_dump, config_file, dumped, monitoring, rows_of  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "mindspore_collector"))
import ms_zoo  # noqa: E402

REPO = str(Path(__file__).parents[2])
sys.path.insert(0, str(FIXTURES / "mindspore_model"))
from tiny_gpt_ms import TinyGPT, initialise  # noqa: E402

ms.set_context(mode=ms.PYNATIVE_MODE)
ms.set_device("CPU")


@pytest.fixture
def out(tmp_path, monkeypatch):
    path = tmp_path / "out"
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(path))
    return path


def steps_of(out) -> list:
    return [rows_of(records) for records in read_run(str(out))[0]]


def expected(array) -> dict:
    """The statistics of a tensor by plain numpy in float64 (hand computation)."""
    a = np.asarray(array, dtype=np.float64).reshape(-1)
    return {"min": a.min(), "max": a.max(), "mean": a.mean(), "norm": np.sqrt((a * a).sum()),
            "zeros": np.count_nonzero(np.abs(a) < 1e-8) / a.size, "nans": 0.0, "infs": 0.0}


def assert_row(row: dict, array, what) -> None:
    assert row["present"], what
    assert row["shape"] == tuple(np.shape(array)), what
    for op, value in expected(array).items():
        assert row[op] == pytest.approx(value, rel=2e-6, abs=1e-9), (what, op)


class Mlp(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(3, 4)
        self.act = nn.ReLU()
        self.fc2 = nn.Dense(4, 2)

    def construct(self, x):
        return self.fc2(self.act(self.fc1(x)))


def mlp(seed: int = 0) -> Mlp:
    net = Mlp()
    rng = np.random.default_rng(seed)
    for _, param in sorted(net.parameters_and_names()):
        param.set_data(Tensor((rng.standard_normal(param.shape) * 0.6).astype(np.float32)))
    return net


def batch(step: int, rows: int = 5) -> tuple:
    rng = np.random.default_rng(50 + step)
    return rng.standard_normal((rows, 3)).astype(np.float32), rng.standard_normal((rows, 2)).astype(np.float32)


def mse_step(net, opt):
    """A value_and_grad step of the MSE of net(x) against y."""
    grad_fn = ms.value_and_grad(lambda x, y: mint.mean(mint.square(mint.sub(net(x), y))), None, opt.parameters)

    def step(x, y):
        loss, grads = grad_fn(Tensor(x), Tensor(y))
        opt(grads)
        return loss, grads
    return step


# ------------------------------------------------------------------------------------------------ every metric
def test_every_metric_against_hand_computation(tmp_path, out):
    net = mlp()
    opt = nn.AdamWeightDecay(net.trainable_params(), learning_rate=0.1, weight_decay=0.0)
    monitor = TrainerMon(config_file(tmp_path, EVERYTHING), params_have_main_grad=False)
    monitor.set_monitor(net, optimizer=opt, grad_acc_steps=1)
    step = mse_step(net, opt)
    before = {p.name: p.asnumpy().copy() for p in net.trainable_params()}
    x, y = batch(0)
    loss, _ = step(x, y)
    after = {p.name: p.asnumpy().copy() for p in net.trainable_params()}
    moments = {p.name: (m.asnumpy().copy(), v.asnumpy().copy())
               for p, m, v in zip(opt.parameters, opt.moments1, opt.moments2)}
    step(*batch(1))
    monitor.close()
    rows = steps_of(out)[0]

    w1, b1, w2, b2 = before["fc1.weight"], before["fc1.bias"], before["fc2.weight"], before["fc2.bias"]
    h = x @ w1.T + b1
    a = np.maximum(h, 0)
    o = a @ w2.T + b2
    d_o = 2 * (o - y) / o.size
    d_a = d_o @ w2
    d_h = d_a * (h > 0)
    grads = {"fc1.weight": d_h.T @ x, "fc1.bias": d_h.sum(0), "fc2.weight": d_o.T @ a, "fc2.bias": d_o.sum(0)}
    for name, value in (("fc1.input", x), ("fc1.output", h), ("act.input", h), ("act.output", a), ("fc2.input", a),
                        ("fc2.output", o), (".input", x), (".output", o)):
        assert_row(rows[("actv", name, 0)], value, name)
    for name, value in (("fc2.output", d_o), ("fc2.input", d_a), ("act.output", d_a), ("act.input", d_h),
                        ("fc1.output", d_h), (".output", d_o)):
        assert_row(rows[("actv_grad", name, 0)], value, name)
    for name in ("fc1.input", ".input"):        # x needs no gradient: absent, not NaN
        assert not rows[("actv_grad", name, 0)]["present"]
    for name, grad in grads.items():
        for group in ("grad_unreduced", "grad_reduced"):
            assert_row(rows[(group, name, 0)], grad, (group, name))
        assert_row(rows[("param_origin", name, 0)], before[name], name)
        assert_row(rows[("param_updated", name, 0)], after[name], name)
        assert_row(rows[("exp_avg", name, 0)], moments[name][0], name)
        assert_row(rows[("exp_avg_sq", name, 0)], moments[name][1], name)
        np.testing.assert_allclose(moments[name][0], 0.1 * grad, rtol=1e-5, atol=1e-7)    # AdamWeightDecay's m
        ratio = (after[name].astype(np.float64) - before[name]) / max(np.linalg.norm(before[name]),
                                                                       np.linalg.norm(after[name]))
        assert_row(rows[("update_ratio", name, 0)], ratio, name)
        assert rows[(group, name, 0)]["module"] == name.rpartition(".")[0]
    assert rows[("loss", "loss", 0)]["norm"] == pytest.approx(float(np.mean((o - y) ** 2)), rel=1e-6)
    assert rows[("loss", "loss", 0)]["max"] == pytest.approx(float(loss.asnumpy()), rel=1e-7)
    total = np.sqrt(sum((g.astype(np.float64) ** 2).sum() for g in grads.values()))
    assert rows[("grad_norm", "total", 0)]["norm"] == pytest.approx(total, rel=1e-6)
    assert rows[("actv", "act.output", 0)]["zeros"] == pytest.approx(np.mean(a == 0))


@pytest.mark.slow
def test_files_columns_and_the_references_values_on_the_same_script(tmp_path, out):
    """tests/fixtures/monitor/ms_reference_run is the reference's MindSpore output for ms_reference_run_script.py;
    ours, on the same script: the same files, the reference's columns first, and every row both write equal."""
    script = FIXTURES / "monitor" / "ms_reference_run_script.py"
    config = json.loads((FIXTURES / "monitor" / "ms_reference_run_config.json").read_text())
    done = subprocess.run([sys.executable, str(script), json.dumps(config), str(out), "3"], capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=REPO), check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    reference = FIXTURES / "monitor" / "ms_reference_run"
    (ref_folder,) = [p for p in reference.iterdir() if "rank0" in p.name]
    (folder,) = [p for p in out.iterdir() if "rank0" in p.name]
    theirs = set(os.listdir(ref_folder))
    assert theirs <= set(os.listdir(folder))
    for name in theirs:
        with open(ref_folder / name, newline="") as handle:
            ref_head = next(csv.reader(handle))
        with open(folder / name, newline="") as handle:
            head = next(csv.reader(handle))
        assert head == ref_head + ["module", "call"]
    compared = 0
    for mine, ref in zip(read_run(str(out))[0], read_run(str(reference))[0]):
        mine_rows = rows_of(mine)
        for key, ref_row in rows_of(ref).items():
            row = mine_rows[key]
            assert row["present"] and row["shape"] == ref_row["shape"] and row["dtype"] == ref_row["dtype"], key
            for op in ref.ops:
                assert row[op] == pytest.approx(ref_row[op], rel=1e-5, abs=1e-7), (key, op)
            compared += 1
        # what the reference leaves out: the gradients of the token ids (ours: absent rows), the moments
        absent = [k for k, r in mine_rows.items() if not r["present"]]
        assert ("actv_grad", "emb.input", 0) in absent and ("actv_grad", ".input", 0) in absent
        assert any(k[0] == "exp_avg" for k in mine_rows) and any(k[0] == "loss" for k in mine_rows)
    assert compared > 150


# ------------------------------------------------------------------------------------------------ bit-identical
def _train_zoo(name: str, steps: int, config: str | None):
    model = ms_zoo.build(name)
    model.set_train(True)
    opt = nn.AdamWeightDecay(model.trainable_params(), learning_rate=0.01, weight_decay=0.01)
    monitor = None
    if config is not None:
        monitor = TrainerMon(config, params_have_main_grad=False)
        monitor.set_monitor(model, optimizer=opt, grad_acc_steps=1)
    grad_fn = ms.value_and_grad(lambda *a: model(*a), None, opt.parameters)
    losses = []
    for step in range(steps):
        loss, grads = grad_fn(*ms_zoo._batches(name, step))
        opt(grads)
        losses.append(loss.asnumpy().tobytes())
    if monitor is not None:
        monitor.close()
    states = [s.asnumpy().tobytes() for s in (*opt.moments1, *opt.moments2)]
    return losses, {p.name: p.asnumpy().tobytes() for p in model.get_parameters()}, states


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ms_zoo.MODELS))
def test_training_is_bit_identical_on_the_collectors_zoo(tmp_path, out, name):
    """ms_zoo: a CNN with BatchNorm and ReLU, an LSTM, a Transformer encoder layer with masks, an @ms.jit cell, a
    cell called many times, in-place ops, tuple and dict outputs, integer inputs, float16, a frozen Dense..."""
    plain = _train_zoo(name, 3, None)
    monitored = _train_zoo(name, 3, config_file(tmp_path, EVERYTHING))
    assert monitored == plain
    steps = steps_of(out)
    assert len(steps) == 3 and all(any(k[0] == "actv_grad" for k in s) for s in steps)


def _gpt_step(kind: str, steps: int, config: str | None):
    """The tiny GPT (a transformer with nn.Dense/ops attention and a causal mask) trained by a value_and_grad
    step or a TrainOneStepCell."""
    model = TinyGPT(vocab=32, d_model=16, n_head=2, n_layer=2, max_seq=8)
    initialise(model, 3)
    opt = nn.AdamWeightDecay(model.trainable_params(), learning_rate=0.01, weight_decay=0.01)
    train = nn.TrainOneStepCell(model, opt) if kind == "train_one_step" else None
    monitor = None
    if config is not None:
        monitor = TrainerMon(config, params_have_main_grad=False)
        monitor.set_monitor(model, optimizer=opt)
    grad_fn = ms.value_and_grad(model, None, opt.parameters)
    rng = np.random.default_rng(9)
    losses = []
    for _ in range(steps):
        ids, labels = (Tensor(rng.integers(0, 32, (2, 8)).astype(np.int32)) for _ in range(2))
        if train is not None:
            loss = train(ids, labels)
        else:
            loss, grads = grad_fn(ids, labels)
            opt(grads)
        losses.append(loss.asnumpy().tobytes())
    if monitor is not None:
        monitor.close()
    return losses, [p.asnumpy().tobytes() for p in model.get_parameters()]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["value_and_grad", "train_one_step"])
def test_a_transformer_trains_bit_identically_with_value_and_grad_and_train_one_step_cell(tmp_path, out, kind):
    plain = _gpt_step(kind, 3, None)
    assert _gpt_step(kind, 3, config_file(tmp_path, EVERYTHING)) == plain
    steps = steps_of(out)
    assert len(steps) == 3
    for rows in steps:
        assert rows[("loss", "loss", 0)]["present"]
        assert rows[("actv", "blocks.1.attn.qkv.output", 0)]["present"]
        assert rows[("actv_grad", "blocks.1.attn.qkv.input", 0)]["present"]
        assert not rows[("actv_grad", ".input_0", 0)]["present"]       # token ids: no gradient
        assert rows[("exp_avg", "blocks.1.mlp.fc1.weight", 0)]["present"]


def test_a_train_one_step_cell_given_as_the_model(tmp_path, out):
    """set_monitor(TrainOneStepCell(WithLossCell(net, loss), optimizer)): the optimizer inside is not a monitored
    cell, the network's forward starts the micro-steps, the loss is the network's output."""
    net = mlp()
    opt = nn.Adam(net.trainable_params(), learning_rate=0.01)
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt)
    monitor = TrainerMon(config_file(tmp_path, EVERYTHING), params_have_main_grad=False)
    monitor.set_monitor(train, optimizer=opt)
    losses = [float(train(*(Tensor(v) for v in batch(s))).asnumpy()) for s in range(3)]
    monitor.close()
    steps = steps_of(out)
    assert len(steps) == 3
    for rows, loss in zip(steps, losses):
        assert rows[("loss", "loss", 0)]["norm"] == pytest.approx(loss, rel=1e-6)
        assert rows[("actv", "network._backbone.fc1.output", 0)]["present"]
        assert not any(name.startswith("optimizer") for _, name, _ in rows)
        # MindSpore names a parameter by its own name; its row's module is the cell holding it
        assert rows[("exp_avg", "fc1.weight", 0)]["present"]                           # nn.Adam's moment1
        assert rows[("param_updated", "fc1.weight", 0)]["module"] == "network._backbone.fc1"


# ------------------------------------------------------------------------------------------------ what is recorded
def test_gradient_accumulation_micro_steps_and_evaluation_forwards(tmp_path, out):
    net = mlp()
    opt = nn.SGD(net.trainable_params(), learning_rate=0.1, momentum=0.9)
    monitor = TrainerMon(config_file(tmp_path, EVERYTHING), params_have_main_grad=False)
    monitor.set_monitor(net, optimizer=opt, grad_acc_steps=2)
    grad_fn = ms.value_and_grad(lambda x, y: mint.mean(mint.square(mint.sub(net(x), y))), None, opt.parameters)
    summed = []
    for step in range(2):
        micro_grads = []
        for micro in range(2):
            loss, grads = grad_fn(*(Tensor(v) for v in batch(2 * step + micro)))
            micro_grads.append([g.asnumpy().copy() for g in grads])
            net(Tensor(batch(9)[0]))         # an evaluation forward (no gradient): not recorded, no micro-step
        total = [a + b for a, b in zip(*micro_grads)]
        summed.append(total)
        opt(tuple(Tensor(g / 2) for g in total))
    monitor.close()
    steps = steps_of(out)
    assert len(steps) == 2
    for rows, total in zip(steps, summed):
        assert {k[2] for k in rows if k[0] == "actv"} == {0, 1}
        assert {k[2] for k in rows if k[0] == "loss"} == {0, 1}
        assert sum(1 for k in rows if k[0] == "actv" and k[1] == "fc1.output") == 2
        for param, grad in zip(opt.parameters, total):
            assert rows[("grad_unreduced", param.name, 0)]["norm"] == pytest.approx(np.linalg.norm(grad), rel=1e-5)
            assert rows[("grad_reduced", param.name, 0)]["norm"] == pytest.approx(np.linalg.norm(grad / 2), rel=1e-5)
        assert rows[("exp_avg", "fc1.weight", 0)]["present"]             # SGD's momentum buffer (accum)


class Twice(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(3, 3)
        self.head = nn.Dense(3, 1)

    def construct(self, ids, x):
        return self.head(self.fc(self.fc(x)) * ids.astype(ms.float32).mean())


def test_repeated_calls_integer_inputs_targets_and_no_nan_for_absent_gradients(tmp_path, out):
    net = Twice()
    opt = nn.Adam(net.trainable_params(), learning_rate=0.01)
    config = dict(EVERYTHING, targets={"fc": {}}, all_xy=False, alert={"rules": [{"rule_name": "AnomalyNan"}]})
    monitor = TrainerMon(config_file(tmp_path, config), params_have_main_grad=False)
    monitor.set_monitor(net, optimizer=opt)
    grad_fn = ms.value_and_grad(lambda ids, x: mint.mean(net(ids, x)), None, opt.parameters)
    for step in range(2):
        loss, grads = grad_fn(Tensor(np.array([1, 2], np.int32)), Tensor(batch(step, 2)[0]))
        opt(grads)
    monitor.close()
    rows = steps_of(out)[1]
    assert {k[1] for k in rows if k[0] == "actv"} == {"fc.input", "fc.output", "fc[1].input", "fc[1].output"}
    assert {k[1] for k in rows if k[0] == "grad_reduced"} == {"fc.weight", "fc.bias"}
    assert not rows[("actv_grad", "fc.input", 0)]["present"]     # the first call's input: x, which needs none
    assert rows[("actv_grad", "fc[1].input", 0)]["present"]      # the second's: the first's output
    assert read_anomalies(out) == []
    with open(next(out.glob("*rank0*")) / "actv_grad_1-1.csv", newline="") as handle:
        written = list(csv.DictReader(handle))
    assert all(row["norm"] not in ("nan", "NaN") for row in written)


def test_integer_inputs_get_absent_gradients_in_the_files(tmp_path, out):
    _train_zoo("integers", 1, config_file(tmp_path, dict(EVERYTHING, alert={"rules": [{"rule_name": "AnomalyNan"}]})))
    rows = steps_of(out)[0]
    absent = [k for k, r in rows.items() if k[0] == "actv_grad" and not r["present"]]
    assert ("actv_grad", ".input_0", 0) in absent
    assert read_anomalies(out) == []
    with open(next(out.glob("*rank0*")) / "actv_grad_0-0.csv", newline="") as handle:
        row = next(r for r in csv.DictReader(handle) if r["name"] == ".input_0")
    assert row["norm"] == row["shape"] == row["dtype"] == "" and row["call"] != ""


@pytest.mark.parametrize("optimizer, first, second", [
    (lambda p: nn.Adam(p, learning_rate=0.01), "moment1", "moment2"),
    (lambda p: nn.AdamWeightDecay(p, learning_rate=0.01), "moments1", "moments2"),
    (lambda p: nn.Momentum(p, learning_rate=0.01, momentum=0.9), "moments", None),
    (lambda p: nn.SGD(p, learning_rate=0.01, momentum=0.9), "accum", None),
    (lambda p: nn.SGD(p, learning_rate=0.01), None, None),
    (lambda p: nn.RMSProp(p, learning_rate=0.01), None, "ms"),
    (lambda p: nn.Adagrad(p, learning_rate=0.01), None, "accum"),
    (lambda p: mint.optim.SGD(p, lr=0.01, momentum=0.9), "momentum_buf", None),
])
def test_the_moments_of_mindspores_optimizers(tmp_path, out, optimizer, first, second):
    net = mlp()
    opt = optimizer(net.trainable_params())
    monitor = TrainerMon(config_file(tmp_path, {"mv_distribution": True, "ops": ["norm"], "ndigits": 12}),
                         params_have_main_grad=False)
    monitor.set_monitor(net, optimizer=opt)
    mse_step(net, opt)(*batch(0))
    monitor.close()
    rows = steps_of(out)[0] if out.exists() else {}
    params = list(opt.parameters)
    for group, attribute in (("exp_avg", first), ("exp_avg_sq", second)):
        found = {k[1]: r for k, r in rows.items() if k[0] == group}
        if attribute is None:
            assert not found
            continue
        for param, state in zip(params, getattr(opt, attribute)):
            assert found[param.name]["norm"] == pytest.approx(np.linalg.norm(state.asnumpy().astype(np.float64)),
                                                              rel=1e-6, abs=1e-12)


class PythonOptimizer:
    """A script's own optimizer: not a Cell, a step() reading the parameters' `grad`."""

    def __init__(self, params, lr):
        self.params, self.lr = list(params), lr

    def step(self):
        for param in self.params:
            ops.assign(param, param - self.lr * param.grad)


def test_an_optimizer_with_its_own_step_reads_the_parameters_grad(tmp_path, out):
    net = mlp()
    opt = PythonOptimizer(net.trainable_params(), 0.1)
    monitor = TrainerMon(config_file(tmp_path, dict(EVERYTHING, ops=["norm"])), params_have_main_grad=False)
    monitor.set_monitor(net, optimizer=opt)
    grad_fn = ms.value_and_grad(lambda x, y: mint.mean(mint.square(mint.sub(net(x), y))), None, opt.params)
    norms = []
    for step in range(2):
        _, grads = grad_fn(*(Tensor(v) for v in batch(step)))
        for param, grad in zip(opt.params, grads):
            param.grad = grad
        norms.append(np.linalg.norm(grads[0].asnumpy()))
        opt.step()
    monitor.close()
    steps = steps_of(out)
    assert len(steps) == 2
    for rows, norm in zip(steps, norms):
        assert rows[("grad_reduced", "fc1.weight", 0)]["norm"] == pytest.approx(norm, rel=1e-6)
        assert rows[("update_ratio", "fc1.weight", 0)]["present"]


def test_statistics_by_ops_on_the_device_equal_those_on_the_host(tmp_path, monkeypatch):
    """On an accelerator the statistics are reduced by MindSpore ops on the device (float32) and cross to the host
    once per step; on the CPU by numpy (float64). Forced here on the CPU, both give the same values to float32
    rounding."""
    runs = []
    for host in (True, False):
        monkeypatch.setattr(ms_monitor, "HOST_STATISTICS", host)
        folder = tmp_path / f"host{host}"
        monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(folder))
        _train_zoo("cnn", 2, config_file(tmp_path, EVERYTHING))
        runs.append(steps_of(folder))
    for host_rows, device_rows in zip(*runs):
        assert host_rows.keys() == device_rows.keys()
        for key, row in host_rows.items():
            other = device_rows[key]
            assert row["present"] == other["present"], key
            for op in ALL_OPS:
                if row["present"]:
                    assert other[op] == pytest.approx(row[op], rel=2e-5, abs=1e-6), (key, op)


def _dumped(root, level: str, config: str | None, out) -> dict:
    """Two steps of two micro-batches of the MLP dumped (statistics) at `level`, monitored or not."""
    from msprobe.mindspore import PrecisionDebugger

    net = mlp()
    opt = nn.Adam(net.trainable_params(), learning_rate=0.01)
    grad_fn = ms.value_and_grad(lambda x, y: mint.mean(mint.square(mint.sub(net(x), y))), None, opt.parameters)

    def train_step(step: int) -> None:
        for micro in range(2):
            x, y = batch(2 * step + micro)
            _, grads = grad_fn(Tensor(x), Tensor(y))
        opt(grads)
    with monitoring(TrainerMon, config, out, net, opt, grad_acc_steps=2):
        return dumped(PrecisionDebugger, root, level, net, train_step)


@pytest.mark.parametrize(("level", "host"), [("L1", False), ("mix", True)])
def test_a_dump_is_the_same_with_the_monitor_on(tmp_path, monkeypatch, level, host):
    """A PrecisionDebugger dumping while the monitor watches: the monitor's own ops (its statistics on the device,
    the sum of the micro-batches' gradients, the backward hook of each tapped call) run inside the collector's "not
    recording" guard, so the dump is the one made without the monitor, entry for entry and value for value."""
    monkeypatch.setattr(ms_monitor, "HOST_STATISTICS", host)
    monkeypatch.delenv("DYNAMIC_MONITOR", raising=False)
    plain = _dumped(tmp_path / "plain", level, None, None)
    watched = _dumped(tmp_path / "watched", level, config_file(tmp_path, EVERYTHING), tmp_path / "monitor")
    assert_same_dump(plain, watched)
    # the monitor recorded while the debugger dumped
    steps = list(read_run(str(tmp_path / "monitor"))[0])
    assert [r.step for r in steps] == [0, 1]
    assert {"actv", "actv_grad", "grad_unreduced", "grad_reduced", "exp_avg_sq", "update_ratio"} <= \
        set(steps[-1].group)


def test_device_vector_of_special_values():
    ops_ = tuple(ALL_OPS)
    values = Tensor(np.array([1.0, -2.0, 0.0, np.nan, np.inf, 0.0], np.float32))
    device = monitor_stats.device_values([monitor_stats.device_vector(values, ops_, 1e-8)], [6], ops_)[0]
    host = monitor_stats.host_values([monitor_stats.host_vector(values, ops_, 1e-8)], [6], ops_)[0]
    for vector in (device, host):
        assert vector[ops_.index("zeros")] == pytest.approx(2 / 6)
        assert vector[ops_.index("nans")] == 1 and vector[ops_.index("infs")] == 1
    half = Tensor(np.array([1.0, 2.0, 3.0], np.float16))
    assert monitor_stats.device_values([monitor_stats.device_vector(half, ops_, 1e-8)], [3], ops_)[0][2] == 2.0
    empty = monitor_stats.device_vector(Tensor(np.zeros((0, 3), np.float32)), ops_, 1e-8)
    assert np.isnan(empty.asnumpy()).all()


# ------------------------------------------------------------------------------------------------ robustness
def test_a_failing_statistic_never_reaches_training(tmp_path, out, monkeypatch, caplog):
    plain = _train_zoo("mlp", 3, None)
    calls = []

    def broken(tensor, ops_, eps):
        calls.append(1)
        if len(calls) > 5:
            raise RuntimeError("device lost")
        return monitor_stats.array_stat_vector(tensor.asnumpy(), ops_, eps)
    monkeypatch.setattr(monitor_stats, "host_vector", broken)
    with caplog.at_level(logging.WARNING, logger="msprobe"):
        assert _train_zoo("mlp", 3, config_file(tmp_path, EVERYTHING)) == plain
    failed = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert failed and "device lost" in failed[0]
    assert len(failed) == len(set(failed))          # one line per part


def test_action_stop_ends_training_at_the_step_boundary(tmp_path, out):
    net = mlp()
    opt = nn.AdamWeightDecay(net.trainable_params(), learning_rate=0.01)

    def nan_at_step_two(cell, inputs, output):
        return output * Tensor(np.float32("nan")) if current[0] == 2 else None
    current = [0]
    net.fc1.register_forward_hook(nan_at_step_two)
    config = dict(EVERYTHING, alert={"rules": [{"rule_name": "AnomalyNan"}]}, action="stop")
    monitor = TrainerMon(config_file(tmp_path, config), params_have_main_grad=False)
    monitor.set_monitor(net, optimizer=opt)
    step = mse_step(net, opt)
    with pytest.raises(MonitorStop) as stopped:
        for current[0] in range(5):
            step(*batch(current[0]))
    assert current[0] == 2 and "step 2" in str(stopped.value)
    first = read_anomalies(out)[0]
    assert (first.kind, first.step, first.module, first.name) == ("nan", 2, "fc1", "fc1.output")
    dump = json.loads((out / "anomaly_detected" / "dump_config.json").read_text())
    assert dump["step"] == [2] and dump["tensor"]["list"] == ["Cell.fc1."]
    from msprobe.mindspore import PrecisionDebugger

    assert PrecisionDebugger(config_path=str(out / "anomaly_detected" / "dump_config.json")) is not None
    step(*batch(3))                  # the monitor is off: training can go on
    assert opt.parameters[0].asnumpy() is not None


def test_print_struct_and_format_api(tmp_path, out):
    net = mlp()
    opt = nn.Adam(net.trainable_params(), learning_rate=0.01)
    monitor = TrainerMon(config_file(tmp_path, {"print_struct": True}), params_have_main_grad=False)
    monitor.set_monitor(net, optimizer=opt)
    with pytest.raises(MonitorStop):
        mse_step(net, opt)(*batch(0))
    struct = json.loads((out / "module_struct" / "rank0" / "module_struct.json").read_text())
    assert struct["0:fc1"]["output"]["output"] == "size=(5, 4), dtype=Float32"
    assert set(struct["0:fc2"]) == {"input", "output", "input_grad", "output_grad"}

    written = set(os.listdir(out))
    net = mlp()
    opt = nn.Adam(net.trainable_params(), learning_rate=0.01)
    monitor = TrainerMon(config_file(tmp_path, {"xy_distribution": True, "wg_distribution": True, "format": "api",
                                                "ops": ["norm", "max"]}), params_have_main_grad=False)
    monitor.set_monitor(net, optimizer=opt)
    grad_fn = ms.value_and_grad(lambda x, y: mint.mean(mint.square(mint.sub(net(x), y))), None, opt.parameters)
    _, grads = grad_fn(*(Tensor(v) for v in batch(0)))
    actv, actv_grad = monitor.generate_xy_metrics()
    reduced, unreduced = monitor.generate_wgrad_metrics()
    opt(grads)
    monitor.close()
    assert set(actv["0:fc1.output:0/rank0/actv"]) == {"max", "norm"}
    assert "0:fc2.input:0/rank0/actv_grad" in actv_grad
    assert unreduced["0:fc1.weight/rank0/grad_unreduced"]["norm"] == pytest.approx(np.linalg.norm(grads[0].asnumpy()))
    assert reduced == {}                    # before the optimizer: not taken yet
    assert set(os.listdir(out)) == written                              # format api: no files


def test_bad_calls_are_one_clear_error(tmp_path, out):
    with pytest.raises(MonitorConfigError, match="missing.json"):
        TrainerMon(str(tmp_path / "missing.json"))
    monitor = TrainerMon(config_file(tmp_path, {"wg_distribution": True}))
    with pytest.raises(MonitorConfigError, match="mindspore.nn.Cell"):
        monitor.set_monitor(object(), optimizer=nn.Adam(mlp().trainable_params()))
    with pytest.raises(MonitorConfigError, match="optimizer"):
        monitor.set_monitor(mlp(), optimizer=None)
    with pytest.raises(MonitorConfigError, match="grad_acc_steps"):
        monitor.set_monitor(mlp(), optimizer=nn.Adam(mlp().trainable_params()), grad_acc_steps=0)


@pytest.mark.slow
def test_memory_stays_flat(tmp_path, out):
    net = mlp()
    opt = nn.AdamWeightDecay(net.trainable_params(), learning_rate=0.01)
    monitor = TrainerMon(config_file(tmp_path, dict(EVERYTHING, alert={"rules": [
        {"rule_name": "AnomalyTurbulence", "args": {"threshold": 0.5}}]})), params_have_main_grad=False)
    monitor.set_monitor(net, optimizer=opt)
    step = mse_step(net, opt)
    for i in range(10):
        step(*batch(i))
    tracemalloc.start()
    try:
        for i in range(10, 20):
            step(*batch(i))
        gc.collect()                # cycles (a call and its hook's closure) are reclaimed, not leaked
        first = tracemalloc.take_snapshot()
        for i in range(20, 60):
            step(*batch(i))
        gc.collect()
        second = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    hooks = monitor._hooks
    monitor.close()
    grown = sum(stat.size_diff for stat in second.compare_to(first, "filename")
                if "msprobe" in stat.traceback[0].filename)
    assert grown < 64 * 1024
    assert hooks.bindings == [] and hooks._grads == {} and hooks._stack == {}


# ------------------------------------------------------------------------------------------------ jit, GRAPH_MODE
def _mse(net):
    def forward(x, y):
        return ops.mean(ops.square(net(x) - y))
    return forward


def _jit_run(config: str | None, steps: int = 3) -> tuple:
    """A training step compiled whole by @ms.jit (PyNative mode): losses and weights."""
    net = mlp()
    opt = nn.Adam(net.trainable_params(), learning_rate=0.01)
    monitor = None
    if config is not None:
        monitor = TrainerMon(config, params_have_main_grad=False)
        monitor.set_monitor(net, optimizer=opt)
    grad_fn = ms.value_and_grad(_mse(net), None, opt.parameters)

    @ms.jit
    def train_step(x, y):
        loss, grads = grad_fn(x, y)
        opt(grads)
        return loss
    losses = [train_step(*(Tensor(v) for v in batch(s))).asnumpy().tobytes() for s in range(steps)]
    if monitor is not None:
        monitor.close()
    return losses, [p.asnumpy().tobytes() for p in net.get_parameters()]


def test_a_jit_training_step_trains_unchanged_and_says_it_is_not_recorded(tmp_path, out, caplog, monkeypatch):
    """The jit compiler parses the cells it calls, hooks included (a hook's try statement failed the compile): the
    hooks are off while it compiles, so the graph is the one without the monitor; what runs in it is not recorded,
    which one warning says."""
    monkeypatch.chdir(tmp_path)                    # a failed compile writes rank_0/om/analyze_fail.ir here
    plain = _jit_run(None)
    with caplog.at_level(logging.WARNING, logger="msprobe"):
        assert _jit_run(config_file(tmp_path, EVERYTHING)) == plain
    said = [r.getMessage() for r in caplog.records if "@ms.jit function train_step" in r.getMessage()]
    assert len(said) == 1 and "not recorded" in said[0]
    assert not out.exists() or not any(out.rglob("actv_*.csv"))


class JitHelper(nn.Cell):
    """A PyNative model whose construct calls an @ms.jit function between two tapped cells."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Dense(3, 4), nn.Dense(4, 2)

    def construct(self, x):
        return self.fc2(_jit_gelu(self.fc1(x)))


@ms.jit
def _jit_gelu(x):
    return ops.gelu(x) * 1.5


def test_a_jit_function_inside_the_forward_leaves_the_cells_around_it_recorded(tmp_path, out, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def run(config):
        net = JitHelper()
        rng = np.random.default_rng(4)
        for _, param in sorted(net.parameters_and_names()):
            param.set_data(Tensor(rng.standard_normal(param.shape).astype(np.float32)))
        opt = nn.AdamWeightDecay(net.trainable_params(), learning_rate=0.01)
        monitor = None
        if config:
            monitor = TrainerMon(config, params_have_main_grad=False)
            monitor.set_monitor(net, optimizer=opt)
        step = mse_step(net, opt)
        losses = [step(*batch(s))[0].asnumpy().tobytes() for s in range(3)]
        if monitor is not None:
            monitor.close()
        return losses, [p.asnumpy().tobytes() for p in net.get_parameters()]
    assert run(config_file(tmp_path, EVERYTHING)) == run(None)
    steps = steps_of(out)
    assert len(steps) == 3
    for rows in steps:
        for key in (("actv", "fc1.output", 0), ("actv", "fc2.input", 0), ("actv_grad", "fc2.input", 0),
                    ("actv_grad", "fc1.output", 0), ("grad_reduced", "fc1.weight", 0)):
            assert rows[key]["present"], key
        # fc2's input is the jit function's output: 1.5 gelu(fc1's output), so its max follows
        assert rows[("actv", "fc2.input", 0)]["max"] > rows[("actv", "fc1.output", 0)]["max"]


@pytest.mark.slow
def test_graph_mode_trains_unchanged_and_says_nothing_is_recorded(tmp_path, out, caplog, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def run(config):
        net = mlp()
        opt = nn.Adam(net.trainable_params(), learning_rate=0.01)
        monitor = None
        if config:
            monitor = TrainerMon(config, params_have_main_grad=False)
            monitor.set_monitor(net, optimizer=opt)
        train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt)
        losses = [train(*(Tensor(v) for v in batch(s))).asnumpy().tobytes() for s in range(2)]
        if monitor is not None:
            monitor.close()
        return losses, [p.asnumpy().tobytes() for p in net.get_parameters()]
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        plain = run(None)
        with caplog.at_level(logging.WARNING, logger="msprobe"):
            assert run(config_file(tmp_path, EVERYTHING)) == plain
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    assert any("GRAPH_MODE" in r.getMessage() and "records nothing" in r.getMessage() for r in caplog.records)
    assert not out.exists() or not any(out.rglob("*.csv"))


def test_model_train_in_pynative_is_recorded_step_by_step(tmp_path, out):
    """mindspore.train.Model(net, loss, optimizer).train(...): its TrainOneStepCell runs the network and the
    optimizer; each batch is one step."""
    import mindspore.dataset as ds
    from mindspore.train import Model

    net = mlp()
    opt = nn.Adam(net.trainable_params(), learning_rate=0.01)
    monitor = TrainerMon(config_file(tmp_path, EVERYTHING), params_have_main_grad=False)
    monitor.set_monitor(net, optimizer=opt)
    xs, ys = (np.stack(v) for v in zip(*(batch(s) for s in range(3))))
    Model(net, nn.MSELoss(), opt).train(2, ds.NumpySlicesDataset({"x": xs, "y": ys}, shuffle=False),
                                        dataset_sink_mode=False)
    monitor.close()
    steps = steps_of(out)
    assert len(steps) == 6
    for step, rows in enumerate(steps):
        x, y = batch(step % 3)
        assert_row(rows[("actv", "fc1.input", 0)], x, step)
        assert rows[("loss", "loss", 0)]["present"] and rows[("exp_avg", "fc2.weight", 0)]["present"]
        assert rows[("actv_grad", "fc1.output", 0)]["present"]


# ------------------------------------------------------------------------------------------------ dynamic, ranks
def test_dynamic_on_is_picked_up_at_a_step_boundary(tmp_path, out, monkeypatch):
    """DYNAMIC_MONITOR: the config file switched on mid-run is read at the end of a step; the cell hooks go on
    then, for collect_times steps."""
    monkeypatch.setenv("DYNAMIC_MONITOR", "True")
    path = config_file(tmp_path, dict(EVERYTHING, dynamic_on=False))
    net = mlp()
    opt = nn.Adam(net.trainable_params(), learning_rate=0.01)
    monitor = TrainerMon(path, params_have_main_grad=False)
    monitor.set_monitor(net, optimizer=opt)
    step = mse_step(net, opt)
    for i in range(6):
        if i == 2:
            with open(path, "w") as handle:
                json.dump(dict(EVERYTHING, dynamic_on=True, collect_times=2), handle)
            stamp = os.stat(path).st_mtime_ns + 10**9
            os.utime(path, ns=(stamp, stamp))
        step(*batch(i))
    monitor.close()
    steps = list(read_run(str(out))[0])
    assert [r.step for r in steps] == [3, 4]            # seen at the end of step 2, collected from step 3 on
    rows = rows_of(steps[0])
    assert_row(rows[("actv", "fc1.input", 0)], batch(3)[0], "fc1.input")
    assert rows[("actv_grad", "fc1.output", 0)]["present"] and rows[("exp_avg", "fc1.weight", 0)]["present"]


def test_analyse_across_the_rank_folders_of_a_mindspore_run(tmp_path, out, monkeypatch, capsys):
    """Two ranks (their folders in one MONITOR_OUTPUT_DIR; the rank as get_rank() gives it): rank 1's fc1 output
    turns NaN at step 3, rank 0 stays clean; analyse names rank 1, step 3, fc1, forward, nan."""
    config = config_file(tmp_path, dict(EVERYTHING, alert={"rules": [
        {"rule_name": "AnomalyNan", "args": {"threshold": 1e10}},
        {"rule_name": "AnomalyTurbulence", "args": {"threshold": 0.5}}], "dump": False}))
    for rank in (0, 1):
        monkeypatch.setattr(ms_monitor, "_rank", lambda rank=rank: rank)
        net = mlp()
        opt = nn.AdamWeightDecay(net.trainable_params(), learning_rate=0.01)
        current = [0]
        if rank == 1:
            net.fc1.register_forward_hook(
                lambda cell, inputs, output, at=current: output * Tensor(np.float32("nan")) if at[0] == 3 else None)
        monitor = TrainerMon(config, params_have_main_grad=False)
        monitor.set_monitor(net, optimizer=opt)
        step = mse_step(net, opt)
        for current[0] in range(5):
            step(*batch(current[0]))
        monitor.close()
    assert sorted(p.name.split("-")[-2] for p in out.iterdir() if "-rank" in p.name) == ["rank0", "rank1"]
    capsys.readouterr()
    assert run_cli(["monitor", "analyse", "-d", out, "--json", "-o", tmp_path / "an"]) == 0
    first = json.loads(capsys.readouterr().out)["first"]
    assert {k: first[k] for k in ("step", "rank", "module", "stage", "kind")} == \
        {"step": 3, "rank": 1, "module": "fc1", "stage": "forward", "kind": "nan"}
    dump = json.loads((tmp_path / "an" / "dump_config.json").read_text())
    assert (dump["step"], dump["rank"], dump["tensor"]["list"]) == ([3], [1], ["Cell.fc1."])


def test_the_docs_mindspore_example_runs_and_writes_its_files(tmp_path, monkeypatch):
    from docs_text import code_blocks

    doc = Path(REPO) / "docs" / "monitor.md"
    (example,) = [b for b in code_blocks(doc, "python") if "from msprobe.mindspore import TrainerMon" in b]
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DYNAMIC_MONITOR", raising=False)
    exec(compile(example, "docs/monitor.md", "exec"), {"__name__": "__main__"})    # as a script (MindSpore
                                                                                # needs a module name)
    (folder,) = (tmp_path / "ms_monitor_output").iterdir()
    assert sorted({f.rsplit("_", 1)[0] for f in os.listdir(folder)}) == sorted(
        {"actv", "actv_grad", "grad_unreduced", "grad_reduced", "exp_avg", "exp_avg_sq", "loss", "grad_norm"})
    assert len(list(read_run(str(tmp_path / "ms_monitor_output"))[0])) == 5
