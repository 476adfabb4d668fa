"""The framework-free engine with a fake adapter: which steps are recorded, the anomaly rules' and golden watch's
hooks, `action: stop`, the dynamic on/off of the config file, print_struct, failures switched off."""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import pytest

from msprobe.monitor.config import parse_config
from msprobe.monitor.engine import MonitorEngine, dynamic_mode
from msprobe.monitor.layout import read_anomalies, read_run
from msprobe.monitor.records import Anomaly


class FakeAdapter:
    """Handles are numpy rows; apply() remembers the configs it got."""

    def __init__(self, stop_elsewhere: bool = False):
        self.applied: list = []
        self.stop_elsewhere = stop_elsewhere
        self.votes: list = []

    def to_host(self, handles, numels):
        return np.array(handles, dtype=float)

    def apply(self, config):
        self.applied.append(config)

    def any_rank(self, flag):
        self.votes.append(flag)
        return flag or self.stop_elsewhere

    def structure(self):
        return {"0:fc": {"input": {"config": "tuple[1]"}}}


def run(engine: MonitorEngine, steps: int, value=lambda step: 1.0) -> list:
    """Drive `steps` steps: one row per step while collecting; the stop message or None per step."""
    messages = []
    for _ in range(steps):
        engine.begin_micro_step()
        if engine.collecting:
            engine.buffer.add("grad_reduced", "fc.weight", "fc", 0, 0, [value(engine.step)], (2, 2),
                              "torch.float32", 4)
        messages.append(engine.end_step())
    return messages


def steps_written(root) -> list:
    if not root.exists():
        return []
    runs = read_run(str(root))
    return [records.step for records in runs[0]] if runs else []


def make(tmp_path, data: dict, **kwargs) -> tuple:
    adapter = kwargs.pop("adapter", None) or FakeAdapter()
    engine = MonitorEngine(parse_config(data), 0, adapter, root=str(tmp_path / "out"), dynamic=False, **kwargs)
    engine.start()
    return engine, adapter


@pytest.mark.parametrize("data, expected", [
    ({}, list(range(10))),
    ({"start_step": 3}, list(range(3, 10))),
    ({"start_step": 1, "step_interval": 3}, [1, 4, 7]),
    ({"collect_times": 2, "step_interval": 2}, [0, 2]),
    ({"collect_times": 0}, []),
])
def test_which_steps_are_recorded(tmp_path, data, expected):
    engine, adapter = make(tmp_path, dict(data, wg_distribution=True, ops=["norm"]))
    run(engine, 10)
    engine.close()
    assert steps_written(tmp_path / "out") == expected
    if data.get("collect_times") is not None:
        assert adapter.applied[-1] is None         # nothing left to record: the hooks came off


def test_start_iteration_counts_the_steps(tmp_path):
    engine, _ = make(tmp_path, {"wg_distribution": True, "start_step": 5}, start_iteration=4)
    run(engine, 3)
    engine.close()
    assert steps_written(tmp_path / "out") == [5, 6]


class Detector:
    def __init__(self, at_step: int, kind: str = "spike"):
        self.seen: list = []
        self.at_step = at_step
        self.kind = kind

    def observe(self, records):
        self.seen.append(records.step)
        if records.step != self.at_step:
            return []
        return [Anomaly(self.kind, records.rank, records.step, 0, "optimizer", 0, "fc", "fc.weight",
                        "grad_reduced", "norm", 9.0, 1.0, "AnomalyTurbulence")]


def test_anomalies_are_written_logged_and_stop_the_run(tmp_path, caplog):
    detector = Detector(at_step=3)
    engine, adapter = make(tmp_path, {"wg_distribution": True, "action": "stop",
                                      "alert": {"rules": [{"rule_name": "AnomalyNan"}]}},
                           detector_factory=lambda config, rank: detector)
    with caplog.at_level(logging.WARNING, logger="msprobe"):
        messages = run(engine, 6)
    assert messages[:3] == [None] * 3 and "training stopped after step 3" in messages[3]
    assert "msprobe monitor analyse -d" in messages[3]
    assert detector.seen == [0, 1, 2, 3] and adapter.votes == [False, False, False, True]
    assert [a.step for a in read_anomalies(str(tmp_path / "out"))] == [3]
    assert steps_written(tmp_path / "out") == [0, 1, 2, 3]
    assert "rank 0 step 3: spike in fc (grad_reduced.norm" in caplog.text
    assert engine.closed and adapter.applied[-1] is None


def test_another_rank_anomaly_stops_this_one(tmp_path):
    engine, _ = make(tmp_path, {"wg_distribution": True, "action": "stop", "golden": str(tmp_path)},
                     adapter=FakeAdapter(stop_elsewhere=True),
                     watch_factory=lambda config, rank: type("W", (), {"check": lambda self, r: []})())
    message = run(engine, 1)[0]
    assert "another rank found an anomaly at step 0" in message


def test_a_failing_rule_is_switched_off_with_one_warning(tmp_path, caplog):
    class Broken:
        def observe(self, records):
            raise ValueError("boom")

    engine, _ = make(tmp_path, {"wg_distribution": True, "alert": {"rules": [{"rule_name": "AnomalyNan"}]}},
                     detector_factory=lambda config, rank: Broken())
    with caplog.at_level(logging.WARNING, logger="msprobe"):
        assert run(engine, 4) == [None] * 4
    engine.close()
    assert caplog.text.count("anomaly rules failed at step 0 (ValueError: boom)") == 1
    assert steps_written(tmp_path / "out") == [0, 1, 2, 3]       # recording goes on


def test_a_write_failure_switches_writing_off(tmp_path, caplog):
    engine, _ = make(tmp_path, {"wg_distribution": True})
    (tmp_path / "out").write_text("a file where the folder should be")
    with caplog.at_level(logging.WARNING, logger="msprobe"):
        assert run(engine, 3) == [None] * 3
    engine.close()
    assert caplog.text.count("writing failed at step 0") == 1


def test_close_writes_the_step_under_way(tmp_path):
    engine, _ = make(tmp_path, {"wg_distribution": True})
    run(engine, 2)
    engine.begin_micro_step()
    engine.buffer.add("actv", "fc.output", "fc", 0, 0, [5.0], (2,), "torch.float32", 2)
    engine.close()
    assert steps_written(tmp_path / "out") == [0, 1, 2]


def test_print_struct_writes_the_structure_and_stops(tmp_path):
    engine, _ = make(tmp_path, {"print_struct": True, "xy_distribution": True})
    message = run(engine, 3)[0]
    path = tmp_path / "out" / "module_struct" / "rank0" / "module_struct.json"
    assert str(path) in message and json.loads(path.read_text()) == FakeAdapter().structure()


def test_format_api_writes_nothing_and_keeps_the_last_step(tmp_path):
    engine, _ = make(tmp_path, {"wg_distribution": True, "format": "api"})
    run(engine, 2, value=lambda step: 10.0 + step)
    engine.close()
    assert not (tmp_path / "out").exists()
    assert engine.last_records.step == 1 and engine.last_records.values[0, 0] == 11.0


def test_dynamic_mode_follows_the_config_file(tmp_path, caplog):
    path = tmp_path / "monitor.json"
    path.write_text(json.dumps({"wg_distribution": True, "dynamic_on": False, "collect_times": 2}))
    adapter = FakeAdapter()
    engine = MonitorEngine(parse_config(json.loads(path.read_text())), 0, adapter, config_path=str(path),
                           root=str(tmp_path / "out"), dynamic=True)
    engine.start()
    run(engine, 3)                                      # off: nothing
    assert steps_written(tmp_path / "out") == []

    def save(data, bump):
        path.write_text(json.dumps(data))
        stamp = os.stat(path).st_mtime_ns + bump
        os.utime(path, ns=(stamp, stamp))

    save({"wg_distribution": True, "dynamic_on": True, "collect_times": 2}, 10**9)
    run(engine, 1)                                      # step 3: the change is seen at its end
    run(engine, 4)                                      # steps 4, 5 recorded, then collect_times is reached
    assert steps_written(tmp_path / "out") == [4, 5]
    assert adapter.applied[-1] is None
    with caplog.at_level(logging.WARNING, logger="msprobe"):
        save({"wg_distribution": "yes", "dynamic_on": True}, 2 * 10**9)
        run(engine, 2)                                  # a bad change: one warning, nothing changes
    assert "the changed config is not used" in caplog.text
    save({"wg_distribution": True, "dynamic_on": True, "collect_times": 1}, 3 * 10**9)
    run(engine, 3)                                      # seen at the end of step 10: step 11 recorded
    engine.close()
    assert steps_written(tmp_path / "out") == [4, 5, 11]


def test_dynamic_mode_starts_at_the_next_step(tmp_path):
    path = tmp_path / "monitor.json"
    path.write_text(json.dumps({"wg_distribution": True, "dynamic_on": True}))
    engine = MonitorEngine(parse_config(json.loads(path.read_text())), 0, FakeAdapter(), config_path=str(path),
                           root=str(tmp_path / "out"), dynamic=True)
    engine.start()
    run(engine, 3)
    engine.close()
    assert steps_written(tmp_path / "out") == [1, 2]


@pytest.mark.parametrize("value, on", [("True", True), ("1", True), ("true", True), ("False", False), ("", False)])
def test_dynamic_environment_variable(monkeypatch, value, on):
    monkeypatch.setenv("DYNAMIC_MONITOR", value)
    assert dynamic_mode() is on
