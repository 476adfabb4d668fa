"""msprobe triage on a plain MindSpore PyNative training script (tests/mindspore_collector/triage_zoo_ms.py, copied
into temporary folders, no msprobe in it): the planted op is named with its cell and source line, a clean pair
names nothing, and the injection changes no number. Runs in the MindSpore environment of .ci/run; each triage runs
child processes (MindSpore's import is several seconds), so the runs are shared and the file is marked slow."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mindspore", reason="mindspore is not installed (it needs numpy<2: the MindSpore tests run in "
                                        "the separate environment of .ci/run)")

import triage_zoo as zoo  # noqa: E402

from msprobe.triage import classify as cl  # noqa: E402
from msprobe.triage.launch import execute, prepare  # noqa: E402

pytestmark = pytest.mark.slow

CASES = {("cnn", "eps"): cl.ARGUMENT, ("transformer", "none"): None}      # the whole zoo: bench_triage.py


@pytest.fixture(scope="module")
def ms_runs(tmp_path_factory):
    work = str(tmp_path_factory.mktemp("mszoo"))
    return {case: zoo.triage_case("mindspore", *case, work) for case in CASES}


@pytest.mark.parametrize("case", list(CASES), ids=lambda case: "-".join(case))
def test_the_planted_op_is_named(case, ms_runs):
    findings, _seconds, folder = ms_runs[case]
    assert zoo.hit(findings, case[1]), (findings.culprit, findings.source, findings.rounds[0]["evidence"])
    assert findings.category == CASES[case]
    assert sorted(os.listdir(folder)) == ["out", "train.py"]
    if case[1] == "none":
        assert findings.outcome == "agree" and findings.exit_code == 0
        return
    assert findings.exit_code == 1 and findings.module.startswith("Cell.head.")
    runs = [run for found in findings.rounds for run in found.get("runs", [])]
    assert len(runs) == 4 and all(run["stopped_after_step"] for run in runs)
    assert not findings.rounds[1]["evidence"][0].startswith("skipped")


def test_the_injection_changes_no_number(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(Path(zoo.SCRIPTS["mindspore"]).read_text())
    command = [sys.executable, "train.py", "--model", "lstm", "--steps", "3"]
    plain = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=True)
    run = prepare("target", " ".join(command), str(tmp_path / "injected"), {"task": "statistics", "level": "mix"},
                  1, False, "mindspore")
    execute([run], 300, str(tmp_path))
    losses = [line for line in Path(run.log).read_text().splitlines() if line.startswith("step ")]
    assert run.returncode == 0 and losses == [line for line in plain.stdout.splitlines() if line.startswith("step ")]
    assert len(losses) == 3 and sorted(os.listdir(run.dump_root)) == ["step1"]
    (status,) = run.statuses
    assert status["framework"] == "mindspore" and status["models"] == ["Lstm"] and not status["errors"]


# issue 40: a NoisyDense (the op inside the cell, category input) and a float16 (auto_mixed_precision O2) target
# against the float32 script (no culprit: the runs differ in dtype)
JUDGED = {("cnn", "noisy", False): (cl.CULPRIT, cl.INPUT), ("cnn", "none", True): (cl.DTYPE_ONLY, None)}


@pytest.fixture(scope="module", params=list(JUDGED), ids=lambda case: "-".join(map(str, case)))
def judged_run(request, tmp_path_factory):
    model, bug, amp = request.param
    work = str(tmp_path_factory.mktemp("msjudged"))
    return request.param, zoo.triage_case("mindspore", model, bug, work, amp=amp)[0]


def test_the_zoo_keeps_the_judgement_of_the_compare(judged_run):
    (model, bug, amp), findings = judged_run
    outcome, category = JUDGED[(model, bug, amp)]
    assert zoo.hit(findings, bug), (findings.outcome, findings.culprit, findings.source, findings.dtype_change)
    assert (findings.outcome, findings.category) == (outcome, category)
    if outcome == cl.DTYPE_ONLY:
        assert findings.exit_code == 0 and "float16 in the target" in findings.dtype_change["dtypes"]
        return
    assert findings.culprit == "Mint.add.0.forward" and findings.module.endswith("NoisyDense.forward.0")
    assert findings.rounds[1]["evidence"][0] == "its inputs already differ, its outputs differ"
    assert not findings.rounds[2]["evidence"][0].startswith("skipped")
