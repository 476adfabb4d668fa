"""`msprobe monitor report`: one self-contained page (its data, its script run under Node.js when there is one),
anomalies and the origin marked, names never markup, long and wide runs capped."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from msprobe.monitor import report as report_module
from msprobe.monitor.layout import RunWriter
from msprobe.monitor.report import write_report
from tests.monitor.records_factory import records, row, wobble

from conftest import FIXTURES, run_cli

REFERENCE = FIXTURES / "monitor" / "reference_lstm_wscale"
SHIM = __file__.rsplit("/", 1)[0] + "/dom_shim.js"
ROOT = Path(__file__).resolve().parents[2]


def page_data(path) -> dict:
    text = open(path, encoding="utf-8").read()
    found = re.search(r'<script type="application/json" id="msprobe-data">(.*?)</script>', text, re.S)
    return json.loads(found.group(1))


def test_the_page_of_a_reference_run(tmp_path):
    path = write_report(str(REFERENCE), str(tmp_path / "page.html"))
    data = page_data(path)
    summary = data["summary"]
    assert summary["first"]["step"] == 20 and summary["first"]["name"] == "fc1.weight"
    assert summary["steps"] == [0, 22] and summary["ranks"] == [0] and summary["shown"] == summary["series"]
    assert summary["anomalies"] == len(data["anomalies"]) > 0
    assert data["steps"]["0"] == list(range(23))
    # the series with anomalies come first, the origin's among them, its anomaly marked on it
    first = data["series"][0]
    assert first["anomalies"] and 0 in [i for s in data["series"] for i in s["anomalies"]]
    origin = next(s for s in data["series"] if 0 in s["anomalies"])
    assert (origin["group"], origin["name"]) == ("param_origin", "fc1.weight")
    norms = origin["values"]["norm"]
    assert norms[20] == pytest.approx(50 * norms[19], rel=0.02)
    text = open(path, encoding="utf-8").read()
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text


def test_the_cli_writes_into_a_directory(tmp_path, capsys):
    assert run_cli(["monitor", "report", "-d", REFERENCE, "-o", tmp_path / "pages"]) == 0
    assert (tmp_path / "pages" / "monitor_report.html").is_file()
    assert "monitor_report.html" in capsys.readouterr().out


def run_with_rows(tmp_path, steps: int, names: list, spike_at: int | None = None):
    writer = RunWriter(str(tmp_path), 0, ("min", "max", "mean", "norm"), ndigits=6)
    for step in range(steps):
        rows = [row("actv", name, norm=(5.0 + i) * wobble(step, 0.05, i) * (50 if step == spike_at and i == 0 else 1))
                for i, name in enumerate(names)]
        writer.write(records(step, rows))
    writer.close()


def test_names_are_data_not_markup(tmp_path):
    evil = '</script><img src=x onerror="alert(1)">\u202e.output'
    run_with_rows(tmp_path / "run", 30, [evil, "ok.output"], spike_at=25)
    path = write_report(str(tmp_path / "run"), str(tmp_path / "p.html"))
    text = open(path, encoding="utf-8").read()
    assert "<img" not in text and text.count("</script>") == 2
    data = page_data(path)
    assert data["series"][0]["name"] == evil and data["summary"]["first"]["name"] == evil


def test_long_and_wide_runs_are_capped(tmp_path, monkeypatch):
    monkeypatch.setattr(report_module, "MAX_POINTS", 50)
    monkeypatch.setattr(report_module, "MAX_SERIES", 3)
    run_with_rows(tmp_path / "run", 230, [f"m{i}.output" for i in range(5)], spike_at=200)
    data = page_data(write_report(str(tmp_path / "run"), str(tmp_path / "p.html")))
    steps = data["steps"]["0"]
    assert len(steps) <= 50 and steps[0] == 0 and steps[-1] >= 200
    assert data["summary"]["strides"]["0"] == 8 and all(b - a == 8 for a, b in zip(steps, steps[1:]))
    assert data["summary"]["shown"] == 3 and data["summary"]["series"] == 5
    assert data["series"][0]["name"] == "m0.output" and data["series"][0]["anomalies"] == [0]
    assert all(len(s["values"]["norm"]) == len(steps) for s in data["series"])


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed (the page's script is not run)")
def test_the_page_script_draws_the_plots_and_shows_an_anomalys_plot(tmp_path):
    path = write_report(str(REFERENCE), str(tmp_path / "page.html"))
    result = json.loads(subprocess.run(["node", SHIM, path], capture_output=True, text=True, check=True,
                                       timeout=60).stdout)
    before, after = result["before"], result["after"]
    assert before["svgs"] > 0 and all(length > 0 for length in before["paths"])     # a line in every plot
    assert before["marks"] >= 1 and before["rows"] == len(page_data(path)["anomalies"])
    assert "the first (the origin)" in before["text"] and "fc1.weight" in before["text"]
    assert after["svgs"] == 1        # a click on the first anomaly shows its plot alone


def test_bad_input_is_one_error_line(tmp_path, capsys):
    assert run_cli(["monitor", "report", "-d", tmp_path / "missing", "-o", tmp_path / "p.html"]) == 1
    err = capsys.readouterr().err
    assert "does not exist" in err and err.count("\n") == 1
    assert not (tmp_path / "p.html").exists()


@pytest.mark.parametrize("action", ["analyse", "report"])
def test_help_has_examples_and_loads_no_numpy(action):
    code = ("import sys\nfrom msprobe.cli.main import main\ntry:\n    main(['monitor', %r, '-h'])\n"
            "except SystemExit:\n    pass\nassert 'numpy' not in sys.modules, 'numpy imported'\n" % action)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    assert "examples:" in done.stdout and "msprobe monitor analyse -d monitor_output" in done.stdout
