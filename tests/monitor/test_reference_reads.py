"""The reference's own readers (PyPI ``mindstudio-probe``) read what our TrainerMon writes: its CSV-to-TensorBoard
converter takes every CSV (our extra columns and empty cells of absent rows included), its anomaly sorter ranks the
anomaly.json we write (`alert.dump`), and the same script runs unchanged under the reference's TrainerMon.

Optional: runs only when MSPROBE_REFERENCE_PYTHON names an interpreter with mindstudio-probe installed
(tests/pytorch/test_reference_accepts.py says how to make one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENV = "MSPROBE_REFERENCE_PYTHON"

SCRIPT = textwrap.dedent("""
    import json, os, sys
    import torch, torch.nn as nn
    from msprobe.pytorch import TrainerMon
    json.dump({"targets": {}, "xy_distribution": True, "wg_distribution": True, "mv_distribution": True,
               "param_distribution": True, "ops": ["min", "max", "mean", "norm", "zeros", "nans"],
               "alert": {"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 0.5}}], "dump": True}},
              open("monitor.json", "w"))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    monitor = TrainerMon("monitor.json", params_have_main_grad=False)
    monitor.set_monitor(model, grad_acc_steps=1, optimizer=optimizer)
    for step in range(40):
        if step == 30:
            with torch.no_grad():
                model[2].weight.mul_(30)
        model(torch.randn(4, 8)).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    print("trained")
""")


def reference_python() -> str:
    python = os.environ.get(ENV)
    if not python or not os.path.exists(python):
        pytest.skip(f"{ENV} is not set (point it to a python with mindstudio-probe installed)")
    return python


def run(python: str, code: str, cwd: Path, ours: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["MONITOR_OUTPUT_DIR"] = str(cwd / "out")
    if ours:
        env["PYTHONPATH"] = str(REPO)
    return subprocess.run([python, "-c", code], capture_output=True, text=True, cwd=cwd, env=env, timeout=600,
                          check=False)


@pytest.mark.slow
def test_the_references_readers_read_our_output(tmp_path):
    python = reference_python()
    ours_dir, theirs_dir = tmp_path / "ours", tmp_path / "theirs"
    ours_dir.mkdir()
    theirs_dir.mkdir()
    done = run(sys.executable, SCRIPT, ours_dir, ours=True)
    assert done.returncode == 0 and "trained" in done.stdout, done.stderr[-2000:]
    done = run(python, SCRIPT, theirs_dir, ours=False)          # the same script, unchanged, under the reference
    assert done.returncode == 0 and "trained" in done.stdout, done.stderr[-2000:]
    convert = ("from msprobe.pytorch.monitor.csv2tb import csv2tensorboard_by_step\n"
               "csv2tensorboard_by_step(monitor_path='out', time_start='Jan01_00-00-00', time_end='Dec31_23-59-59', "
               "output_dirpath='tb')\n"
               "from tensorboard.backend.event_processing.event_accumulator import EventAccumulator\n"
               "import glob, json\n"
               "tags = {}\n"
               "for d in glob.glob('tb/rank0/*'):\n"
               "    ea = EventAccumulator(d); ea.Reload(); tags[d.split('/')[-1]] = len(ea.Tags()['scalars'])\n"
               "print(json.dumps(tags))\n")
    done = run(python, convert, ours_dir, ours=False)
    assert done.returncode == 0, done.stderr[-2000:]
    tags = json.loads(done.stdout.strip().splitlines()[-1])
    for group in ("actv", "actv_grad", "grad_reduced", "grad_unreduced", "exp_avg", "exp_avg_sq", "param_origin"):
        assert tags.get(group, 0) > 0, (group, tags)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([python, "-m", "msprobe.core.monitor.anomaly_processor", "-d",
                           str(ours_dir / "out" / "anomaly_detected")], capture_output=True, text=True, cwd=ours_dir,
                          env=env, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    ranked = json.loads((ours_dir / "out" / "anomaly_detected" / "anomaly_analyse.json").read_text())
    first = next(iter(ranked.values()))
    assert first["step"] == 30 and first["tag_name"] == "0:2.weight/rank0/param_origin"
