"""TrainerMon for PyTorch: the reference's API and files, each metric against hand computation, the reference's own
output on the same script, micro-steps, model chunks, the loss wherever it is, failures that never reach training."""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn

from msprobe.monitor.layout import read_run
from msprobe.pytorch import MonitorConfigError, MonitorStop, TrainerMon

from .helpers import EVERYTHING, config_file, rows_of
from conftest import FIXTURES

REPO = str(FIXTURES.parents[1])

@pytest.fixture
def out(tmp_path, monkeypatch):
    root = tmp_path / "monitor_output"
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(root))
    monkeypatch.delenv("DYNAMIC_MONITOR", raising=False)
    return root


def expected(tensor: torch.Tensor, eps: float = 1e-8) -> dict:
    t = tensor.detach().double()
    return {"min": t.min().item(), "max": t.max().item(), "mean": t.mean().item(), "norm": t.norm().item(),
            "zeros": (t.abs() < eps).double().mean().item(), "nans": torch.isnan(t).sum().item(),
            "infs": torch.isinf(t).sum().item()}


def close_to(row: dict, tensor: torch.Tensor, ops=("min", "max", "mean", "norm", "zeros", "nans", "infs")) -> None:
    want = expected(tensor)
    for op in ops:
        assert row[op] == pytest.approx(want[op], rel=1e-5, abs=1e-7), op
    assert row["present"] and row["shape"] == tuple(tensor.shape)


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(3, 5)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(5, 2)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def monitored(tmp_path, data: dict, model=None, optimizer=None, **set_monitor) -> tuple:
    """(model, optimizer, monitor): a Small model (seeded) and Adam, unless given, monitored with this config."""
    torch.manual_seed(0)
    model = model if model is not None else Small()
    optimizer = optimizer if optimizer is not None else torch.optim.Adam(model.parameters())
    monitor = TrainerMon(config_file(tmp_path, data), params_have_main_grad=False)
    monitor.set_monitor(model, optimizer, **set_monitor)
    return model, optimizer, monitor


def train_steps(model, optimizer, steps: int) -> None:
    for _ in range(steps):
        model(torch.randn(2, 3)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()


def test_every_metric_against_hand_computation(tmp_path, out):
    torch.manual_seed(0)
    model = Small()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    monitor = TrainerMon(config_file(tmp_path, EVERYTHING), params_have_main_grad=False)
    monitor.set_monitor(model, optimizer, grad_acc_steps=1)        # the reference's positional order
    x = torch.randn(4, 3)
    x[0, 0] = 0.0
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    hidden = model.fc1(x).detach()
    output = model(x)
    loss = output.pow(2).mean()
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    grad_out = (2 * output / output.numel()).detach()
    optimizer.step()
    optimizer.zero_grad()
    monitor.close()
    after = {n: p.detach().clone() for n, p in model.named_parameters()}
    (records,) = list(read_run(str(out))[0])
    assert records.step == 0 and records.rank == 0
    rows = rows_of(records)
    close_to(rows[("actv", "fc1.input", 0)], x)
    close_to(rows[("actv", "fc1.output", 0)], hidden)
    close_to(rows[("actv", "act.output", 0)], hidden.relu())
    close_to(rows[("actv", ".output", 0)], output)
    close_to(rows[("actv_grad", "fc2.output", 0)], grad_out)
    close_to(rows[("actv_grad", "fc2.input", 0)], grad_out @ before["fc2.weight"])
    assert not rows[("actv_grad", "fc1.input", 0)]["present"]          # x needs no gradient: absent, not NaN
    assert rows[("actv_grad", "fc1.input", 0)]["module"] == "fc1"
    for name, param in model.named_parameters():
        state = optimizer.state[param]
        close_to(rows[("grad_unreduced", name, 0)], grads[name])
        close_to(rows[("grad_reduced", name, 0)], grads[name])
        close_to(rows[("param_origin", name, 0)], before[name])
        close_to(rows[("param_updated", name, 0)], after[name])
        close_to(rows[("exp_avg", name, 0)], state["exp_avg"])
        close_to(rows[("exp_avg_sq", name, 0)], state["exp_avg_sq"])
        ratio = (after[name] - before[name]).norm() / max(before[name].norm(), after[name].norm())
        assert rows[("update_ratio", name, 0)]["norm"] == pytest.approx(ratio.item(), rel=1e-5)
    assert rows[("loss", "loss", 0)]["mean"] == pytest.approx(loss.item(), rel=1e-6)
    total = math.sqrt(sum(g.double().norm().item() ** 2 for g in grads.values()))
    assert rows[("grad_norm", "total", 0)]["norm"] == pytest.approx(total, rel=1e-5)
    assert rows[("actv", "fc1.input", 0)]["zeros"] == pytest.approx(1 / 12)
    order = records.stage
    assert order.index("backward") > max(i for i, s in enumerate(order) if s == "forward")
    assert order.index("optimizer") > max(i for i, s in enumerate(order) if s == "backward")


def test_files_and_columns_are_the_references(tmp_path, out):
    torch.manual_seed(0)
    model = Small()
    optimizer = torch.optim.Adam(model.parameters())
    data = {"targets": {}, "xy_distribution": True, "wg_distribution": True, "mv_distribution": True,
            "param_distribution": True, "ops": ["min", "max", "mean", "norm", "zeros", "nans"],
            "step_count_per_record": 2}
    monitor = TrainerMon(config_file(tmp_path, data), params_have_main_grad=False)
    monitor.set_monitor(model, grad_acc_steps=1, optimizer=optimizer)      # the reference's keywords
    train_steps(model, optimizer, 3)
    monitor.close()
    (folder,) = os.listdir(out)
    assert folder.split("-rank")[1].startswith("0-")
    names = sorted(os.listdir(out / folder))
    for group in ("actv", "actv_grad", "grad_unreduced", "grad_reduced", "exp_avg", "exp_avg_sq", "param_origin",
                  "param_updated"):
        assert f"{group}_0-1.csv" in names and f"{group}_2-3.csv" in names
    reference = FIXTURES / "monitor" / "reference_run"
    (ref_folder,) = [p for p in reference.iterdir() if "rank0" in p.name]
    for group in ("actv", "grad_reduced"):
        with open(out / folder / f"{group}_0-1.csv", newline="") as handle:
            ours = next(csv.reader(handle))
        with open(ref_folder / f"{group}_0-0.csv", newline="") as handle:
            theirs = next(csv.reader(handle))
        assert ours[:len(theirs)] == theirs and ours[len(theirs):] == ["module", "call"]


@pytest.mark.slow
def test_the_references_values_on_the_same_script(tmp_path, out):
    """tests/fixtures/monitor/reference_run is the reference's output for reference_run_script.py; ours, on the
    same script, agree on every row both define the same way."""
    script = FIXTURES / "monitor" / "reference_run_script.py"
    config = json.loads((FIXTURES / "monitor" / "reference_run_config.json").read_text())
    done = subprocess.run([sys.executable, str(script), json.dumps(config), str(out), "3"], capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=REPO), check=False, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    ours = list(read_run(str(out))[0])
    theirs = list(read_run(str(FIXTURES / "monitor" / "reference_run"))[0])
    compared = zeros_compared = 0
    for mine, ref in zip(ours, theirs):
        mine_rows, ref_rows = rows_of(mine), rows_of(ref)
        for key, ref_row in ref_rows.items():
            group, name, _ = key
            # the reference: a module called twice keeps its last call; an in-place module's input after the call
            if name.startswith(("shared.", "relu.input")) or (group == "actv" and name == "two.output_1"):
                continue
            if group == "actv_grad" and name == "two.output_1":
                continue        # a dict output: the reference writes no statistics, ours its tensor (output_1_y)
            row = mine_rows[key]
            assert row["present"] == ref_row["present"], key
            if not ref_row["present"]:
                continue
            tiny = magnitude(ref_row) < TINY
            for op in mine.ops:
                if op in ("min", "max", "mean", "norm") and tiny:
                    assert abs(row[op]) < TINY, (key, op)     # noise in both runs: tiny in both
                elif op != "zeros":
                    assert row[op] == pytest.approx(ref_row[op], rel=REL, abs=2 * QUANTUM), (key, op)
                elif not tiny and resolved(row, ref_row):
                    assert row[op] == ref_row[op], (key, op)
                    zeros_compared += 1
            compared += 1
    assert compared > 100 and zeros_compared > 50


REL = 1e-5              # float32 statistics of the same script: its thread count's summation order moves them
QUANTUM = 1e-6          # the reference's CSV rounds to 6 decimals
TINY = 100 * QUANTUM    # a statistic below this has fewer than 2 significant digits in the reference's CSV


def magnitude(row: dict) -> float:
    return max(abs(row["min"]), abs(row["max"]), abs(row["norm"]))


def resolved(row: dict, ref_row: dict) -> bool:
    """Whether a tensor's zeros fraction (the share of elements below eps = 1e-8) is the same computation's in both
    runs. Not for a tensor of rounding noise: the gradient of a bias that BatchNorm cancels (exactly 0 in exact
    arithmetic, ~1e-9 to 1e-6 computed with the summation order of the thread count), Adam's v of such gradients;
    their elements are the rounding of a cancellation and fall either side of eps. Such a tensor is one whose
    statistics agree only through the reference's rounding (QUANTUM), not to float32's: its magnitude is below TINY
    (its statistics are then only checked to be tiny in both runs), or its norm differs beyond REL and one quantum
    (the two runs computed other noise)."""
    return abs(row["norm"] - ref_row["norm"]) <= REL * abs(ref_row["norm"]) + QUANTUM


def test_micro_steps_and_gradient_accumulation(tmp_path, out):
    torch.manual_seed(0)
    model = Small()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    monitor = TrainerMon(config_file(tmp_path, {"xy_distribution": True, "wg_distribution": True,
                                                "mv_distribution": True, "ops": ["norm"], "ndigits": 12}),
                         params_have_main_grad=False)
    monitor.set_monitor(model, optimizer, grad_acc_steps=3)
    inputs = [torch.randn(2, 3) for _ in range(6)]
    for step in range(2):
        for micro in range(3):
            (model(inputs[step * 3 + micro]).sum() / 3).backward()
        accumulated = model.fc1.weight.grad.clone()
        optimizer.step()
        optimizer.zero_grad()
    monitor.close()
    steps = list(read_run(str(out))[0])
    assert [r.step for r in steps] == [0, 1]
    rows = rows_of(steps[1])
    assert {m for (g, n, m) in rows if g == "actv" and n == "fc1.input"} == {0, 1, 2}
    assert rows[("actv", "fc1.input", 2)]["norm"] == pytest.approx(inputs[5].norm().item(), rel=1e-6)
    # taken once, after the last micro-batch's backward: the accumulated gradient (no micro_step column)
    assert rows[("grad_unreduced", "fc1.weight", 0)]["norm"] == pytest.approx(accumulated.norm().item(), rel=1e-6)
    assert [k for k in rows if k[0] == "grad_unreduced" and k[1] == "fc1.weight"] == \
        [("grad_unreduced", "fc1.weight", 0)]
    momentum = optimizer.state[model.fc1.weight]["momentum_buffer"]
    assert rows[("exp_avg", "fc1.weight", 0)]["norm"] == pytest.approx(momentum.norm().item(), rel=1e-6)
    assert not any(g == "exp_avg_sq" for g, _, _ in rows)           # SGD has no second moment


def test_model_chunks_are_vpp_stages(tmp_path, out):
    torch.manual_seed(0)
    first, second = nn.Linear(3, 4), nn.Linear(4, 2)
    optimizer = torch.optim.Adam(list(first.parameters()) + list(second.parameters()))
    monitor = TrainerMon(config_file(tmp_path, {"xy_distribution": True, "wg_distribution": True,
                                                "targets": {"1:": {}}, "ops": ["norm"]}),
                         params_have_main_grad=False)
    monitor.set_monitor([first, second], optimizer)
    second(first(torch.randn(2, 3))).sum().backward()
    optimizer.step()
    monitor.close()
    (records,) = list(read_run(str(out))[0])
    chunk = dict(zip(zip(records.group, records.name), records.vpp_stage))
    assert chunk[("grad_reduced", "weight")] in (0, 1)
    assert sorted(v for (g, n), v in chunk.items() if g == "actv") == [1, 1]     # the target: chunk 1's root
    assert sorted(v for (g, n), v in zip(zip(records.group, records.name), records.vpp_stage)
                  if g == "grad_reduced") == [0, 0, 1, 1]


class Scalar(nn.Module):
    def __init__(self, with_loss: bool):
        super().__init__()
        self.fc = nn.Linear(3, 1)
        self.with_loss = with_loss

    def forward(self, x, y):
        pred = self.fc(x).squeeze(-1)
        return {"loss": (pred - y).pow(2).mean(), "pred": pred} if self.with_loss else pred


@pytest.mark.parametrize("where", ["model", "outside", "explicit"])
def test_the_loss_wherever_the_script_computes_it(tmp_path, out, where):
    """The model's own loss (a 'loss' entry) over the scaled one .backward() is called on; without it, that one;
    record_loss() over both."""
    torch.manual_seed(0)
    model = Scalar(with_loss=where != "outside")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    monitor = TrainerMon(config_file(tmp_path, {"ops": ["mean", "norm"], "ndigits": 12}), params_have_main_grad=False)
    monitor.set_monitor(model, optimizer)
    losses = []
    for _ in range(3):
        x, y = torch.randn(4, 3), torch.randn(4)
        result = model(x, y)
        loss = result["loss"] if where != "outside" else (result - y).abs().mean()
        if where == "explicit":
            monitor.record_loss(loss * 2)
        (loss * 4).backward()
        losses.append(loss.item() * {"model": 1, "outside": 4, "explicit": 2}[where])
        optimizer.step()
        optimizer.zero_grad()
    monitor.close()
    recorded = [rows_of(r)[("loss", "loss", 0)]["mean"] for r in read_run(str(out))[0]]
    assert recorded == pytest.approx(losses, rel=1e-6)


def test_evaluation_under_no_grad_is_not_recorded(tmp_path, out):
    model, optimizer, monitor = monitored(tmp_path, {"xy_distribution": True, "ops": ["norm"]})
    for _ in range(2):
        train_steps(model, optimizer, 1)
        with torch.no_grad():
            model(torch.randn(7, 3))
    monitor.close()
    steps = list(read_run(str(out))[0])
    assert [r.step for r in steps] == [0, 1]
    assert all(shape[0] == 2 for r in steps for shape, g in zip(r.shape, r.group) if g == "actv" and shape)


def test_a_step_without_optimizer_step_ends_at_the_next_forward(tmp_path, out, caplog):
    model, optimizer, monitor = monitored(tmp_path, {"wg_distribution": True, "ops": ["norm"]})
    with caplog.at_level(logging.WARNING, logger="msprobe"):
        for step in range(3):
            model(torch.randn(2, 3)).sum().backward()
            if step != 1:           # as GradScaler skips a step with inf/NaN gradients
                optimizer.step()
            optimizer.zero_grad()
    monitor.close()
    assert "step 1 ended without optimizer.step()" in caplog.text
    steps = list(read_run(str(out))[0])
    assert [r.step for r in steps] == [0, 1, 2]
    assert "grad_reduced" not in steps[1].group and "grad_unreduced" in steps[1].group


def test_format_api_and_the_reference_getters(tmp_path, out):
    model, optimizer, monitor = monitored(tmp_path, {"xy_distribution": True, "wg_distribution": True, "format": "api",
                                                "ops": ["norm", "max"]})
    model(torch.randn(2, 3)).sum().backward()
    actv, actv_grad = monitor.generate_xy_metrics()
    reduced, unreduced = monitor.generate_wgrad_metrics()
    optimizer.step()
    monitor.close()
    assert not out.exists()
    assert set(actv["0:fc1.output:0/rank0/actv"]) == {"max", "norm"}
    assert "0:fc2.input:0/rank0/actv_grad" in actv_grad
    assert reduced == {} and unreduced["0:fc1.weight/rank0/grad_unreduced"]["norm"] > 0


def test_ops_and_reload_xy_during_training(tmp_path, out):
    model, optimizer, monitor = monitored(tmp_path, {"wg_distribution": True, "ops": ["norm"]})
    for step in range(3):
        if step == 1:
            monitor.reload_xy(True)
            monitor.ops = ["min", "max"]
        model(torch.randn(2, 3)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    monitor.close()
    steps = list(read_run(str(out))[0])
    assert "actv" not in steps[0].group and "actv" in steps[1].group
    assert steps[0].ops == ("norm",) and steps[2].ops == ("min", "max")


def test_a_bad_config_is_one_line_at_construction(tmp_path, out):
    with pytest.raises(MonitorConfigError, match="wg_distribution"):
        TrainerMon(config_file(tmp_path, {"wg_distribution": "yes"}))
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""
        from msprobe.pytorch import TrainerMon
        TrainerMon({config_file(tmp_path, {"ops": ["norm"], "step_interval": 0})!r})
        print("training")
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=REPO), check=False)
    assert done.returncode == 1 and "training" not in done.stdout
    assert done.stderr.strip().splitlines() == \
        ["msprobe monitor: monitor config 'step_interval' must be an integer >= 1, got 0"]


def test_set_monitor_arguments_are_checked(tmp_path, out):
    monitor = TrainerMon(config_file(tmp_path, {}))
    with pytest.raises(MonitorConfigError, match="torch.nn.Module"):
        monitor.set_monitor("model", torch.optim.SGD(Small().parameters(), lr=1))
    with pytest.raises(MonitorConfigError, match="optimizer"):
        monitor.set_monitor(Small(), None)
    with pytest.raises(MonitorConfigError, match="grad_acc_steps"):
        monitor.set_monitor(Small(), torch.optim.SGD(Small().parameters(), lr=1), grad_acc_steps=0)


def test_a_failing_part_is_switched_off_and_training_is_untouched(tmp_path, out, monkeypatch, caplog):
    import msprobe.pytorch.monitor as adapter

    calls = {"n": 0}
    original = adapter.stat_vector

    def flaky(tensor, ops, eps=1e-8):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("device lost")
        return original(tensor, ops, eps)

    monkeypatch.setattr(adapter, "stat_vector", flaky)

    def train(monitored: bool):
        torch.manual_seed(0)
        model = Small()
        optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
        monitor = None
        if monitored:
            monitor = TrainerMon(config_file(tmp_path, EVERYTHING), params_have_main_grad=False)
            monitor.set_monitor(model, optimizer)
        for _ in range(3):
            model(torch.randn(2, 3)).pow(2).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
        if monitor:
            monitor.close()
        return [p.detach().clone() for p in model.parameters()]

    plain = train(False)
    with caplog.at_level(logging.WARNING, logger="msprobe"):
        watched = train(True)
    assert all(torch.equal(a, b) for a, b in zip(plain, watched))
    assert caplog.text.count("activations failed at step 0 (RuntimeError: device lost)") == 1
    steps = list(read_run(str(out))[0])
    assert len(steps) == 3 and "actv" not in steps[2].group and "grad_reduced" in steps[2].group


def test_action_stop_ends_training_at_the_step_boundary(tmp_path, out, monkeypatch):
    from msprobe.monitor import anomaly

    class Planted:
        def __init__(self, *args, **kwargs):
            pass

        def observe(self, records):
            if records.step < 2:
                return []
            row = records.group.index("grad_reduced")
            return [anomaly.Anomaly("spike", records.rank, records.step, 0, "optimizer", row, records.module[row],
                                    records.name[row], "grad_reduced", "norm", 1.0, 0.5, "AnomalyTurbulence")]

    monkeypatch.setattr(anomaly, "AnomalyDetector", Planted)
    model, optimizer, monitor = monitored(tmp_path, {"wg_distribution": True, "action": "stop", "ops": ["norm"],
                                                "alert": {"rules": [{"rule_name": "AnomalyNan"}]}})
    done = []
    with pytest.raises(MonitorStop) as stop:
        for step in range(10):
            model(torch.randn(2, 3)).sum().backward()
            optimizer.step()
            done.append(step)
    assert done == [0, 1] and "training stopped after step 2" in str(stop.value)
    assert optimizer.state[model.fc1.weight]["step"].item() == 3          # step 2's update is complete
    assert [r.step for r in read_run(str(out))[0]] == [0, 1, 2]
    dump_config = json.loads((out / "anomaly_detected" / "dump_config.json").read_text())
    assert dump_config["step"] == [2] and dump_config["rank"] == [0] and dump_config["level"] == "mix"
    analysis = json.loads((out / "anomaly_detected" / "analyse.json").read_text())
    assert analysis["anomalies"] == 1 and analysis["first"]["step"] == 2
    assert str(out / "anomaly_detected" / "dump_config.json") in str(stop.value)
    model(torch.randn(2, 3)).sum().backward()                            # the hooks are gone
    optimizer.step()


def _rss() -> int:
    """This process's resident set size in bytes (Linux), else its peak."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _flat_run(tmp_path, steps: int) -> tuple:
    import gc

    model, optimizer, monitor = monitored(tmp_path, EVERYTHING)
    x = torch.randn(2, 3)

    def run(n):
        for _ in range(n):
            model(x).sum().backward()
            optimizer.step()
            optimizer.zero_grad()

    run(50)
    gc.collect()
    objects, rss = len(gc.get_objects()), _rss()
    run(steps)
    gc.collect()
    grown = len(gc.get_objects()) - objects, _rss() - rss
    hooks = monitor._hooks
    assert not hooks._cache and not hooks.taps._pending and len(monitor._engine.buffer) == 0
    monitor.close()
    return grown


def test_nothing_is_kept_from_step_to_step(tmp_path, out):
    objects, _ = _flat_run(tmp_path, 100)
    assert objects < 500


@pytest.mark.slow
def test_memory_stays_flat_over_1000_steps(tmp_path, out):
    """Every feature on, every step written: Python objects and the resident set do not grow with the steps."""
    objects, rss = _flat_run(tmp_path, 1000)
    assert objects < 500 and rss < 32 * 2**20


def test_dynamic_on_is_picked_up_at_a_step_boundary(tmp_path, out, monkeypatch):
    monkeypatch.setenv("DYNAMIC_MONITOR", "True")
    path = config_file(tmp_path, {"wg_distribution": True, "dynamic_on": False, "ops": ["norm"]})
    torch.manual_seed(0)
    model = Small()
    optimizer = torch.optim.Adam(model.parameters())
    monitor = TrainerMon(path, params_have_main_grad=False)
    monitor.set_monitor(model, optimizer)
    for step in range(6):
        if step == 2:
            with open(path, "w") as handle:
                json.dump({"wg_distribution": True, "dynamic_on": True, "collect_times": 2, "ops": ["norm"]}, handle)
            stamp = os.stat(path).st_mtime_ns + 10**9
            os.utime(path, ns=(stamp, stamp))
        model(torch.randn(2, 3)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    monitor.close()
    # seen at the end of step 2, collected from step 3 on, collect_times of them
    assert [r.step for r in read_run(str(out))[0]] == [3, 4]
    assert json.loads(open(path).read())["dynamic_on"] is True          # the user's file is left alone


def test_format_tensorboard_writes_events_beside_the_csv(tmp_path, out):
    pytest.importorskip("tensorboard")
    model, optimizer, monitor = monitored(tmp_path, {"wg_distribution": True, "format": "tensorboard", "ops": ["norm"]})
    train_steps(model, optimizer, 2)
    monitor.close()
    folder = monitor.output_directory
    events = [f for _, _, files in os.walk(folder) for f in files if f.startswith("events.out.tfevents")]
    assert events and [r.step for r in read_run(str(out))[0]] == [0, 1]


def test_format_tensorboard_without_the_package_is_a_config_error(tmp_path, out, monkeypatch):
    import msprobe.optional

    def missing(name, needed_for, error=MonitorConfigError):
        raise error(f"{needed_for} needs {name}: pip install tensorboard")

    monkeypatch.setattr(msprobe.optional, "require", missing)
    with pytest.raises(MonitorConfigError, match="tensorboard"):
        TrainerMon(config_file(tmp_path, {"format": "tensorboard"}))


class Wrapper:
    """A Megatron/DeepSpeed-style optimizer wrapper: step() of its own, the torch optimizer inside."""

    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.calls = 0

    def step(self):
        self.calls += 1
        self.optimizer.step()

    def zero_grad(self):
        self.optimizer.zero_grad()


def test_a_wrapped_optimizer_and_main_grad(tmp_path, out):
    """params_have_main_grad (the default): a parameter's main_grad is its gradient where it has one."""
    torch.manual_seed(0)
    model = Small()
    inner = torch.optim.Adam(model.parameters())
    wrapper = Wrapper(inner)
    monitor = TrainerMon(config_file(tmp_path, {"wg_distribution": True, "mv_distribution": True, "ops": ["norm"],
                                                "ndigits": 12}))
    monitor.set_monitor(model, wrapper)
    model(torch.randn(2, 3)).sum().backward()
    model.fc1.weight.main_grad = model.fc1.weight.grad * 10       # as Megatron's fp32 main gradients
    wrapper.step()
    wrapper.zero_grad()
    monitor.close()
    (records,) = list(read_run(str(out))[0])
    rows = rows_of(records)
    assert wrapper.calls == 1
    assert rows[("grad_reduced", "fc1.weight", 0)]["norm"] == pytest.approx(
        model.fc1.weight.main_grad.norm().item(), rel=1e-6)
    assert rows[("exp_avg", "fc2.bias", 0)]["norm"] == pytest.approx(
        inner.state[model.fc2.bias]["exp_avg"].norm().item(), rel=1e-6)


def test_gradients_clipped_in_place_before_the_step(tmp_path, out):
    """grad_unreduced is the gradient as backward left it; grad_reduced what the optimizer gets (clipped here); the
    global gradient norm the one clipping measured."""
    torch.manual_seed(0)
    model = Small()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    monitor = TrainerMon(config_file(tmp_path, {"wg_distribution": True, "ops": ["norm"], "ndigits": 12}),
                         params_have_main_grad=False)
    monitor.set_monitor(model, optimizer)
    model(torch.randn(4, 3) * 10).pow(2).sum().backward()
    raw = {n: p.grad.norm().item() for n, p in model.named_parameters()}
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
    clipped = {n: p.grad.norm().item() for n, p in model.named_parameters()}
    optimizer.step()
    monitor.close()
    rows = rows_of(next(iter(read_run(str(out))[0])))
    for name in raw:
        assert rows[("grad_unreduced", name, 0)]["norm"] == pytest.approx(raw[name], rel=1e-6)
        assert rows[("grad_reduced", name, 0)]["norm"] == pytest.approx(clipped[name], rel=1e-6)
    # the global norm clipping saw (clip_grad_norm_'s result), not the one after it
    assert rows[("grad_norm", "total", 0)]["norm"] == pytest.approx(math.sqrt(sum(v * v for v in raw.values())),
                                                                     rel=1e-5)


def test_an_output_directory_that_cannot_be_written_is_a_config_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(blocker / "out"))
    with pytest.raises(MonitorConfigError, match="MONITOR_OUTPUT_DIR"):
        TrainerMon(config_file(tmp_path, {"wg_distribution": True}))


def test_torchscript_submodules_are_left_out(tmp_path, out, caplog):
    torch.manual_seed(0)
    model = Small()
    model.fc2 = torch.jit.script(nn.Linear(5, 2))
    with caplog.at_level(logging.WARNING, logger="msprobe"):
        model, optimizer, monitor = monitored(tmp_path, {"xy_distribution": True, "wg_distribution": True,
                                                         "ops": ["norm"]}, model=model)
        train_steps(model, optimizer, 1)
    monitor.close()
    assert "TorchScript modules take no hooks" in caplog.text and "fc2" in caplog.text
    (records,) = list(read_run(str(out))[0])
    assert "fc1.output" in records.name and not any(n.startswith("fc2.") for n, g in
                                                       zip(records.name, records.group) if g == "actv")
    assert "fc2.weight" in records.name          # its parameters are recorded


def test_a_gradient_left_as_it_is_is_reduced_once(tmp_path, out, monkeypatch):
    """grad_unreduced and grad_reduced of one process are the same tensor, unchanged: taken once."""
    import msprobe.pytorch.monitor as adapter

    taken: list = []
    original = adapter.stat_vectors

    def counting(tensors, ops, eps=1e-8):
        taken.extend(tensors)
        return original(tensors, ops, eps)

    monkeypatch.setattr(adapter, "stat_vectors", counting)
    model, optimizer, monitor = monitored(tmp_path, {"wg_distribution": True, "ops": ["norm"]})
    train_steps(model, optimizer, 1)
    monitor.close()
    assert len(taken) == 4          # four parameters' gradients (the global norm takes its own)
    rows = rows_of(next(iter(read_run(str(out))[0])))
    assert rows[("grad_unreduced", "fc1.weight", 0)]["norm"] == rows[("grad_reduced", "fc1.weight", 0)]["norm"]
