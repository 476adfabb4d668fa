"""docs/monitor.md's walk-through, run as written: its script and config, the monitored run, `msprobe monitor
analyse`, the targeted dumps and the compare; every line it quotes is printed (tests/docs_text.py's patterns)."""

from __future__ import annotations

import json
import runpy
import shutil
import sys
from pathlib import Path

import pytest
from docs_text import line_pattern

from conftest import run_cli

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "monitor.md"


def section() -> str:
    text = DOC.read_text(encoding="utf-8")
    return text[text.index("## From an alert to the culprit"):text.index("## Alerts")]


def blocks(text: str) -> list:
    out, at = [], 0
    while "```" in text[at:]:
        start = text.index("```", at)
        tag_end = text.index("\n", start)
        end = text.index("\n```", tag_end)
        out.append((text[start + 3:tag_end].strip(), text[tag_end + 1:end]))
        at = end + 4
    return out


def train(tmp_path: Path, monkeypatch, capfd, caplog, *args: str) -> str:
    """Run train.py in this process (as `python train.py ARGS` in tmp_path); what it printed."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["train.py", *args])
    namespace = runpy.run_path(str(tmp_path / "train.py"), run_name="__main__")
    if "monitor" in namespace:
        namespace["monitor"].close()
    out, err = capfd.readouterr()
    logged = "\n".join(record.getMessage() for record in caplog.records)
    caplog.clear()
    return "\n".join((out, err, logged))


def cli(capfd, *args) -> str:
    assert run_cli(list(args)) == 0
    out, err = capfd.readouterr()
    return out + err


def assert_quoted(quoted: str, printed: str) -> None:
    for line in quoted.strip().splitlines():
        if line.strip():
            pattern = line_pattern(line)
            assert any(pattern.search(p) for p in printed.splitlines()), f"not printed: {line}"


def test_the_walkthrough_runs_as_written(tmp_path, monkeypatch, capfd, caplog):
    found = blocks(section())
    script = next(code for tag, code in found if tag == "py")
    config = next(code for tag, code in found if tag == "json" and "alert" in code)
    dump_config = next(code for tag, code in found if tag == "json" and "task" in code)
    quoted = [code for tag, code in found if tag == ""]
    (tmp_path / "train.py").write_text(script)
    (tmp_path / "monitor_config.json").write_text(config)
    monkeypatch.delenv("MSPROBE_DUMP_CONFIG", raising=False)
    # 1. the monitored run
    monkeypatch.setenv("MONITOR_OUTPUT_DIR", "monitor_output")
    assert_quoted(quoted[0], train(tmp_path, monkeypatch, capfd, caplog, "--bug"))
    # 2. the anomaly
    assert_quoted(quoted[1], cli(capfd, "monitor", "analyse", "-d", "monitor_output"))
    written = json.loads((tmp_path / "monitor_analyse" / "dump_config.json").read_text())
    assert written == json.loads(dump_config)
    # 3. the targeted dumps, the monitor off
    train(tmp_path, monkeypatch, capfd, caplog, "--bug", "--no-monitor", "--dump", "monitor_analyse/dump_config.json")
    shutil.move(tmp_path / "monitor_dump", tmp_path / "dump_bug")
    train(tmp_path, monkeypatch, capfd, caplog, "--no-monitor", "--dump", "monitor_analyse/dump_config.json")
    shutil.move(tmp_path / "monitor_dump", tmp_path / "dump_good")
    (folder,) = (tmp_path / "dump_bug" / "step20").iterdir()
    entries = list(json.loads((folder / "dump.json").read_text())["data"])
    assert {"Functional.gelu.0.forward", "Tensor.__mul__.0.forward", "Module.1.act.Act.forward.0"} <= set(entries)
    # 4. the culprit
    printed = cli(capfd, "compare", "-tp", "dump_bug/step20", "-gp", "dump_good/step20", "-o", "cmp", "-da")
    assert_quoted(quoted[2], printed)
