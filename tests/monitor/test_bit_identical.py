"""Training is bit-identical with the monitor on, every feature at once, on a zoo of models (in-place ReLU after
BatchNorm, a residual added in place, reentrant and non-reentrant checkpointing, autocast, an LSTM and a GRU cell in
a loop, attention with masks, a module called twice, tuple and dict outputs, a frozen layer), with gradient
accumulation; and the monitor's rows are there."""

from __future__ import annotations

import json

import pytest
import torch

from msprobe.monitor.layout import read_run

from .models import CASES, train

EVERYTHING = {"targets": {}, "xy_distribution": True, "all_xy": True, "wg_distribution": True,
              "mv_distribution": True, "ur_distribution": True, "param_distribution": True,
              "ops": ["min", "max", "mean", "norm", "zeros", "nans", "infs"],
              "alert": {"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 0.5}},
                                  {"rule_name": "AnomalyNan"}]}}


@pytest.mark.parametrize("name", CASES)
def test_losses_and_weights_are_bit_identical(tmp_path, monkeypatch, name):
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", str(tmp_path / "out"))
    monkeypatch.delenv("DYNAMIC_MONITOR", raising=False)
    path = tmp_path / "monitor.json"
    path.write_text(json.dumps(EVERYTHING))
    grad_acc = 2 if name in ("cnn", "twice") else 1
    plain_losses, plain_weights, _ = train(name, 3, grad_acc=grad_acc)
    losses, weights, _ = train(name, 3, str(path), grad_acc=grad_acc)
    assert len(losses) == len(plain_losses)
    assert all(torch.equal(a, b) for a, b in zip(plain_losses, losses))
    assert plain_weights.keys() == weights.keys()
    assert all(torch.equal(plain_weights[k], weights[k]) for k in plain_weights)
    steps = list(read_run(str(tmp_path / "out"))[0])
    assert [r.step for r in steps] == [0, 1, 2]
    groups = set(steps[-1].group)
    assert {"actv", "actv_grad", "grad_unreduced", "grad_reduced", "exp_avg", "exp_avg_sq", "update_ratio",
            "param_origin", "param_updated", "loss", "grad_norm"} <= groups
    micro = {m for g, m in zip(steps[-1].group, steps[-1].micro_step) if g == "actv"}
    assert micro == set(range(grad_acc))
    # every gradient that reached a module input is recorded once per call
    keys = [(g, n, m) for g, n, m in zip(steps[-1].group, steps[-1].name, steps[-1].micro_step)
            if g in ("actv", "actv_grad")]
    assert len(keys) == len(set(keys))
