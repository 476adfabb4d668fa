"""Helpers the monitor's tests share across frameworks (no framework imported here): the configs, a config file,
the rows of a step's records, the JSON files of a dump, and a monitor around a training loop."""

from __future__ import annotations

import contextlib
import json
import os

ALL_OPS = ["min", "max", "mean", "norm", "zeros", "nans", "infs"]
EVERYTHING = {"targets": {}, "xy_distribution": True, "all_xy": True, "wg_distribution": True,
              "mv_distribution": True, "ur_distribution": True, "param_distribution": True, "ops": ALL_OPS,
              "ndigits": 12}


def config_file(tmp_path, data: dict) -> str:
    path = tmp_path / "monitor.json"
    path.write_text(json.dumps(data))
    return str(path)


def rows_of(records) -> dict:
    """(group, name, micro_step) -> {op: value, 'present', 'shape', 'dtype', 'module'}."""
    found = {}
    for i, key in enumerate(zip(records.group, records.name, records.micro_step)):
        row = {op: float(records.values[i, j]) for j, op in enumerate(records.ops)}
        row.update(present=bool(records.present[i]), shape=records.shape[i], dtype=records.dtype[i],
                   module=records.module[i])
        found[key] = row
    return found


def json_files(root) -> dict:
    """{path below root: content} of every JSON file of a dump."""
    found = {}
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".json"):
                with open(os.path.join(folder, name), encoding="utf-8") as handle:
                    found[os.path.relpath(os.path.join(folder, name), root)] = json.load(handle)
    return found


def dumped(debugger_class, root, level: str, model, train_step, steps: int = 2) -> dict:
    """`steps` steps of `train_step(step)` dumped (statistics) at `level` by the framework's PrecisionDebugger:
    json_files of the dump."""
    debugger = debugger_class(task="statistics", level=level, dump_path=str(root))
    for step in range(steps):
        debugger.start(model)
        train_step(step)
        debugger.stop()
        debugger.step()
    return json_files(root)


def assert_same_dump(plain: dict, watched: dict) -> None:
    """Two dumps (json_files) entry for entry and value for value."""
    assert any(name.endswith("dump.json") for name in plain)
    assert plain.keys() == watched.keys()
    for name, content in plain.items():
        if name.endswith("dump.json"):
            entries, got = content["data"], watched[name]["data"]
            assert list(got) == list(entries), f"{name}: other entries with the monitor on"
            assert got == entries, f"{name}: other values with the monitor on"
        elif name.endswith("construct.json"):
            assert watched[name] == content, name


@contextlib.contextmanager
def monitoring(trainer_mon, config: str | None, out, model, optimizer, grad_acc_steps: int = 1):
    """`trainer_mon(config)` on model and optimizer writing to `out` (MONITOR_OUTPUT_DIR, as it was afterwards), or
    nothing without a config; closed at the end."""
    if config is None:
        yield None
        return
    previous = os.environ.get("MONITOR_OUTPUT_DIR")
    os.environ["MONITOR_OUTPUT_DIR"] = str(out)
    monitor = None
    try:
        monitor = trainer_mon(config, params_have_main_grad=False)
        monitor.set_monitor(model, optimizer=optimizer, grad_acc_steps=grad_acc_steps)
        yield monitor
    finally:
        if monitor is not None:
            monitor.close()
        if previous is None:
            os.environ.pop("MONITOR_OUTPUT_DIR", None)
        else:
            os.environ["MONITOR_OUTPUT_DIR"] = previous
