"""msprobe triage on a plain MindSpore training script (tests/mindspore_collector/triage_zoo_ms.py, copied into
temporary folders, no msprobe in it): the planted op is named with its cell and source line, a clean pair names
nothing, and the injection changes no number; the standard `nn.TrainOneStepCell(nn.WithLossCell(net, loss),
nn.SGD(...))` triages like any other model in PyNative and in GRAPH_MODE (the whole step compiled), and so does a
GRAPH_MODE `ms.value_and_grad` loop: one step recorded (the chosen one, `--step 1` included), the run stopped after
it. Runs in the MindSpore environment of
.ci/run; each triage runs child processes (MindSpore's import is several seconds), so the file is marked slow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mindspore", reason="mindspore is not installed (it needs numpy<2: the MindSpore tests run in "
                                        "the separate environment of .ci/run)")

import triage_zoo as zoo  # noqa: E402

from msprobe.triage import classify as cl  # noqa: E402
from msprobe.triage.launch import execute, prepare  # noqa: E402

pytestmark = pytest.mark.slow

ONESTEP = "--train onestep"
GRAPH = "--train onestep --mode graph"
# (model, bug, the commands' options) -> the category the evidence must give (None: not asserted here); the whole
# zoo: bench_triage.py
CASES = {("cnn", "eps", ""): cl.ARGUMENT, ("transformer", "none", ""): None,
         ("cnn", "eps", ONESTEP): cl.ARGUMENT, ("cnn", "eps", GRAPH): cl.ARGUMENT, ("transformer", "none", GRAPH): None,
         ("cnn", "eps", "--mode graph"): cl.ARGUMENT}


# GRAPH_MODE with value_and_grad: the TrainOneStepCell GRAPH_MODE case covers the step end in CI (`extended`)
EXTENDED = {("cnn", "eps", "--mode graph")}


@pytest.fixture(scope="module", params=[pytest.param(c, marks=pytest.mark.extended) if c in EXTENDED else c
                                        for c in CASES],
                ids=lambda case: "-".join(filter(None, case)).replace(" ", ""))
def ms_case(request, tmp_path_factory):
    model, bug, extra = request.param
    work = str(tmp_path_factory.mktemp("mszoo"))
    return request.param, zoo.triage_case("mindspore", model, bug, work, extra=extra, keep_dumps=True)


def test_the_planted_op_is_named(ms_case):
    case, (findings, _seconds, folder) = ms_case
    model, bug, extra = case
    graph = "graph" in extra
    assert sorted(os.listdir(folder)) == ["out", "train.py"]
    runs = [run for found in findings.rounds for run in found.get("runs", [])]
    # one step recorded, each run stopped right after it, exit 0; the dump one folder (no graph/ and pynative/
    # halves: the optimizer of TrainOneStepCell is not part of the model), complete
    assert runs and all(run["stopped_after_step"] and run["exit_status"] == 0 for run in runs)
    for dump in Path(findings.output_dir).glob("round*/*/dump"):
        assert os.listdir(dump) == ["step0"]
        (process,) = (dump / "step0").iterdir()
        assert process.name == "rank" if graph else process.name.startswith("proc")
        assert "incomplete" not in json.loads((process / "dump.json").read_text())
    if bug == "none":
        assert findings.outcome == "agree" and findings.exit_code == 0 and findings.culprit is None
        return
    assert findings.exit_code == 1 and findings.outcome == "culprit"
    assert len(runs) == 4
    if graph:                 # in a graph, the LayerNorm primitive is not recorded: its cell is the culprit, how it
        assert ".norm." in findings.culprit, (findings.culprit, findings.rounds[0]["evidence"])   # is built
        assert "how it is built" in findings.reason and "source line above" not in findings.advice
    else:
        assert zoo.hit(findings, bug), (findings.culprit, findings.source, findings.rounds[0]["evidence"])
        assert findings.module.startswith("Cell.head.")
        assert not findings.rounds[1]["evidence"][0].startswith("skipped")
    if CASES[case] is not None:
        assert findings.category == CASES[case]


def test_graph_mode_triages_the_chosen_step(tmp_path):
    """GRAPH_MODE TrainOneStepCell with --step 1: the step recorded is the second (its model input is the second
    batch the script draws), the run stopped right after it, after one printed loss."""
    (tmp_path / "train.py").write_text(Path(zoo.SCRIPTS["mindspore"]).read_text())
    command = f"{sys.executable} train.py --model cnn {GRAPH}"
    run = prepare("target", command, str(tmp_path / "injected"), {"task": "statistics", "level": "mix"}, 1, True,
                  "mindspore")
    execute([run], 300, str(tmp_path))
    assert run.returncode == 0 and run.stopped
    losses = [line for line in Path(run.log).read_text().splitlines() if line.startswith("step ")]
    assert len(losses) == 1 and losses[0].startswith("step 0:")
    assert os.listdir(run.dump_root) == ["step1"]
    content = json.loads(Path(run.dump_root, "step1", "rank", "dump.json").read_text())
    assert "incomplete" not in content
    rng = np.random.default_rng(1)                 # triage_zoo_ms.batch(): labels, then the images
    for _ in range(2):
        rng.integers(0, 10, (4,))
        images = rng.standard_normal((4, 3, 8, 8)).astype(np.float32)
    recorded = content["data"]["Cell.conv1.Conv2d.forward.0"]["input_args"][0]
    scale = float(np.abs(images).max())
    assert recorded["Max"] == pytest.approx(float(images.max()), abs=1e-6 * scale)
    assert recorded["Min"] == pytest.approx(float(images.min()), abs=1e-6 * scale)
    (status,) = [s for s in run.statuses if s.get("recorded")]
    assert status["models"] == ["Cnn"] and status["steps_done"] == 2 and not status["errors"]


@pytest.mark.parametrize("model, extra", [("lstm", ""), ("cnn", GRAPH)], ids=["lstm", "cnn-graph-onestep"])
def test_the_injection_changes_no_number(tmp_path, model, extra):
    """Plain run and injected run (recording step 1, not stopped) print the very same losses, in PyNative and
    in GRAPH_MODE (where the taps are compiled into the graph at its first call, step 0)."""
    script = tmp_path / "train.py"
    script.write_text(Path(zoo.SCRIPTS["mindspore"]).read_text())
    command = [sys.executable, "train.py", "--model", model, "--steps", "3", *extra.split()]
    plain = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=True)
    run = prepare("target", " ".join(command), str(tmp_path / "injected"), {"task": "statistics", "level": "mix"},
                  1, False, "mindspore")
    execute([run], 300, str(tmp_path))
    losses = [line for line in Path(run.log).read_text().splitlines() if line.startswith("step ")]
    assert run.returncode == 0 and losses == [line for line in plain.stdout.splitlines() if line.startswith("step ")]
    assert len(losses) == 3 and sorted(os.listdir(run.dump_root)) == ["step1"]
    (status,) = run.statuses
    assert status["framework"] == "mindspore" and status["models"] == [model.capitalize()] and not status["errors"]
    assert status["steps_done"] == 2 and status["finished"] and not status["stopped"]



# issue 40: a NoisyDense (the op inside the cell, category input) and a float16 (auto_mixed_precision O2) target
# against the float32 script (no culprit: the runs differ in dtype)
JUDGED = {("cnn", "noisy", False): (cl.CULPRIT, cl.INPUT), ("cnn", "none", True): (cl.DTYPE_ONLY, None)}


@pytest.fixture(scope="module", params=list(JUDGED), ids=lambda case: "-".join(map(str, case)))
def judged_run(request, tmp_path_factory):
    return zoo.judged_case("mindspore", request.param, tmp_path_factory)


def test_the_zoo_keeps_the_judgement_of_the_compare(judged_run):
    (model, bug, amp), findings = judged_run
    outcome, category = JUDGED[(model, bug, amp)]
    zoo.check_named(findings, bug, (outcome, category))
    if outcome == cl.DTYPE_ONLY:
        assert findings.exit_code == 0 and "float16 in the target" in findings.dtype_change["dtypes"]
        return
    assert findings.culprit == "Mint.add.0.forward" and findings.module.endswith("NoisyDense.forward.0")
    second = findings.rounds[1]["evidence"][0]
    assert second.startswith("its inputs already differ, its outputs differ") and "upstream" not in second
    assert not findings.rounds[2]["evidence"][0].startswith("skipped")
    assert "train.py, line" in findings.source and "mint.add" in findings.source   # the user's frame, not a hook's
