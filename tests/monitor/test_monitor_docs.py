"""docs/monitor.md says what the monitor does: its quick start runs and writes the files it names, every config key
is in its table, the stop message it quotes is the one printed."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from docs_text import code_blocks, line_pattern

from msprobe.monitor.config import KNOWN_KEYS, NOT_HONOURED
from msprobe.monitor.records import Anomaly

DOC = Path(__file__).resolve().parents[2] / "docs" / "monitor.md"


def test_quick_start_runs_and_writes_the_files_it_names(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    (quick_start,) = [b for b in code_blocks(DOC, "python") if "from msprobe.pytorch import TrainerMon" in b]
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DYNAMIC_MONITOR", raising=False)
    monkeypatch.delenv("MONITOR_OUTPUT_DIR", raising=False)
    namespace: dict = {}
    try:
        exec(compile(quick_start, "docs/monitor.md", "exec"), namespace)
    finally:
        namespace["monitor"].close()
    (folder,) = (tmp_path / "monitor_output").iterdir()
    assert re.fullmatch(r"[A-Z][a-z]{2}\d{2}_\d{2}-\d{2}-\d{2}-rank0-[0-9a-f]{8}", folder.name)
    text = DOC.read_text()
    named = re.findall(r"`(\w+_0-0\.csv)`", text[text.index("## Quick start"):text.index("## What is recorded")])
    assert len(named) >= 8 and set(named) <= set(os.listdir(folder))
    assert sorted({f.rsplit("_", 1)[0] for f in os.listdir(folder)}) == sorted(
        {"actv", "actv_grad", "grad_unreduced", "grad_reduced", "exp_avg", "exp_avg_sq", "loss", "grad_norm"})


def test_every_config_key_is_documented():
    text = DOC.read_text()
    table = text[text.index("## Config keys"):text.index("## Output layout")]
    rows = " ".join(line.split("|")[1] for line in table.splitlines() if line.startswith("| `"))
    for key in KNOWN_KEYS:
        if key in NOT_HONOURED:
            if key != "opt_ty":           # a constructor argument of the reference, documented with TrainerMon
                assert f"`{key}`" in table, key
        else:
            assert f"`{key}`" in rows, key


def test_the_quoted_stop_message_is_the_printed_one():
    from msprobe.monitor.engine import MonitorEngine

    (block,) = [b for b in code_blocks(DOC) if "training stopped after step" in b]
    engine = MonitorEngine.__new__(MonitorEngine)
    engine.root = "/runs/monitor_output"
    first = Anomaly("spike", 0, 20, 0, "forward", 0, "layers.2.fc1", "layers.2.fc1.weight", "param_origin", "norm",
                    3.0, 1.0, "AnomalyTurbulence")
    report = "/runs/monitor_output/anomaly_detected/dump_config.json"
    assert line_pattern(block).search(engine._stop_text(20, [first], report))
