"""The collectors' shared life cycle (msprobe/collect/debugger.py): what a training script is told about its dump
(issue 34: the collectors said nothing). One line after the first step is written (where, how many entries,
incomplete or not), the next steps at debug level, and the dump root at the end of the run."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow      # two training scripts started afresh (imports of torch)

SCRIPT = """
import torch
from msprobe.pytorch import PrecisionDebugger
debugger = PrecisionDebugger(dump_path={root!r}, level="L1")
x = torch.ones(3, requires_grad=True)
for step in range(3):
    if step < 2:
        debugger.start()
        (x * 2).sum().backward()
        debugger.stop()
        debugger.step()
    else:
        with debugger.step_scope():
            torch.relu(x)
            raise SystemExit(0)
"""


def _run(tmp_path, level: str) -> list:
    root = tmp_path / "dump"
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(root=str(root))], capture_output=True, text=True,
                          env=dict(os.environ, MSPROBE_LOG_LEVEL=level), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return [line for line in done.stdout.splitlines() if "msprobe dump:" in line], root


def test_the_collector_says_where_the_dump_went(tmp_path):
    pytest.importorskip("torch", reason="the PyTorch collector needs torch")
    lines, root = _run(tmp_path, "1")
    (proc,) = os.listdir(root / "step0")
    assert len(lines) == 2, lines
    assert "[INFO]" in lines[0] and lines[0].endswith(
        f"msprobe dump: step 0 written to {root / 'step0' / proc} (4 entries); the next steps are logged at debug "
        "level (MSPROBE_LOG_LEVEL=0)")
    assert lines[1].endswith(f"msprobe dump: this run's dump is in {root} (3 step folders)")
    debug, root = _run(tmp_path / "debug", "0")
    (proc,) = os.listdir(root / "step0")
    assert [line.split("] ", 1)[1] for line in debug[1:3]] == [
        f"msprobe dump: step 1 written to {root / 'step1' / proc} (4 entries)",
        f"msprobe dump: step 2 written to {root / 'step2' / proc} (1 entries, incomplete: the step raised "
        "SystemExit: 0)"]
