"""A PrecisionDebugger dumping while the monitor watches: the monitor's own statistic ops (norm, min, max, ... in its
hooks, and its transfers at the step boundary) run inside the collector's "not recording" guard, so the dump is the
one made without the monitor, entry for entry and value for value."""

from __future__ import annotations

import json

import torch

from msprobe.monitor.layout import read_run
from msprobe.pytorch import PrecisionDebugger, TrainerMon

from .helpers import assert_same_dump, dumped, monitoring
from .models import case, forward

EVERYTHING = {"targets": {}, "xy_distribution": True, "all_xy": True, "wg_distribution": True,
              "mv_distribution": True, "ur_distribution": True, "param_distribution": True,
              "ops": ["min", "max", "mean", "norm", "zeros", "nans", "infs"],
              "alert": {"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 0.5}}]}}


def _dump(root, level: str, monitor_config: str | None, out=None) -> dict:
    """Two steps of the transformer case dumped (statistics) at `level`, monitored or not."""
    model, optimizer, batch, loss_of, _ = case("transformer", 0)

    def train_step(step: int) -> None:
        inputs = batch(step)
        loss_of(forward("transformer", model, inputs), inputs).backward()
        optimizer.step()
        optimizer.zero_grad()
    with monitoring(TrainerMon, monitor_config, out, model, optimizer):
        return dumped(PrecisionDebugger, root, level, model, train_step)


def test_a_dump_is_the_same_with_the_monitor_on(tmp_path, monkeypatch):
    """Level mix: the APIs (the monitor's ops would be recorded among them) and the modules."""
    level = "mix"
    monkeypatch.delenv("DYNAMIC_MONITOR", raising=False)
    torch.set_num_threads(1)
    config = tmp_path / "monitor.json"
    config.write_text(json.dumps(EVERYTHING))
    plain = _dump(tmp_path / "plain", level, None)
    watched = _dump(tmp_path / "watched", level, str(config), tmp_path / "monitor")
    assert_same_dump(plain, watched)
    # the monitor recorded while the debugger dumped
    steps = list(read_run(str(tmp_path / "monitor"))[0])
    assert [r.step for r in steps] == [0, 1] and {"actv", "grad_reduced", "exp_avg_sq"} <= set(steps[-1].group)
