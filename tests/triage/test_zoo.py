"""msprobe triage on plain PyTorch training scripts written into temporary folders (issue 35): the planted op is
named with its module, source line and category; a clean pair names nothing; the same command twice finds a
nondeterministic op; a crash, a timeout and NaN are findings; the injection changes no number; a user's own
PrecisionDebugger takes the triage's configuration; the exit status and --json. Each triage starts child Python
processes (about 2 s of torch import each), so the runs are shared through module-scoped fixtures and the file is
marked slow. The whole zoo (3 models x 8 bugs) is benchmarks/bench_triage.py."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

import triage_zoo as zoo  # noqa: E402

from msprobe.triage import classify as cl  # noqa: E402
from msprobe.triage.launch import execute, prepare  # noqa: E402

from conftest import ctrl_c_reaches_the_child, run_cli  # noqa: E402

pytestmark = pytest.mark.slow

# (model, bug) -> the category the evidence must give (a float16 linear: the runs differ in dtype, no category)
TINY = Path(__file__).with_name("tiny_train.py")       # --crash, --hang, --own, --steps N: its docstring
CASES = {("transformer", "eps"): cl.ARGUMENT, ("cnn", "cast"): None,
         ("cnn", "nondet"): cl.NONDETERMINISM, ("transformer", "none"): None}


@pytest.fixture(scope="module")
def zoo_runs(tmp_path_factory):
    work = str(tmp_path_factory.mktemp("zoo"))
    return {case: zoo.triage_case("pytorch", *case, work, keep_dumps=case == ("transformer", "eps"))
            for case in CASES}


@pytest.mark.parametrize("case", list(CASES), ids=lambda case: "-".join(case))
def test_the_planted_op_is_named(case, zoo_runs):
    findings, seconds, folder = zoo_runs[case]
    assert zoo.hit(findings, case[1]), (findings.culprit, findings.source)
    assert findings.category == CASES[case]
    assert findings.step == 0
    if case[1] == "none":
        assert findings.outcome == "agree" and findings.exit_code == 0
        assert findings.rounds[0]["evidence"][0].startswith("nothing differs")
        assert len(findings.rounds) == 1               # nothing to dump next
        return
    if case[1] == "cast":
        # one linear in float16, every difference what float16 explains: a dtype difference found at its line
        assert findings.outcome == cl.DTYPE_ONLY and findings.culprit is None and findings.exit_code == 0
        assert findings.dtype_change["op"].startswith("Functional.linear.") and "float16 in the target" in \
            findings.dtype_change["dtypes"]
        assert len(findings.rounds) == 1
        return
    assert findings.exit_code == 1 and findings.outcome == "culprit"
    assert findings.culprit.endswith(".forward") and findings.module.startswith("Module.head.Head.")
    assert "train.py" in findings.source and findings.advice
    # three rounds, at most two runs of each command in all (statistics, tensors)
    assert [found["name"] for found in findings.rounds] == ["round 1 (statistics)", "round 2 (tensors)",
                                                            "round 3 (replay)"]
    runs = [run for found in findings.rounds for run in found.get("runs", [])]
    assert sorted(run["side"] for run in runs) == ["golden", "golden", "target", "target"]
    assert all(run["stopped_after_step"] and run["exit_status"] == 0 for run in runs)
    # everything in a folder of its own under -o, nothing beside the script; round 2's tensor dumps removed unless
    # kept (round 1's statistics dumps stay: its compare command reads them); the report written, and copied to -o
    assert sorted(os.listdir(folder)) == ["out", "train.py"]
    out = Path(folder) / "out"
    own = Path(findings.output_dir)
    assert own.parent == out and own.name.startswith("triage_")
    for page in (out, own):
        assert (page / "triage.html").is_file() and json.loads((page / "triage.json").read_text())["culprit"] == \
            findings.culprit
    assert len(list(own.glob("round1_statistics/*/dump"))) == 2
    assert bool(list(own.glob("round2_tensors/*/dump"))) == (case == ("transformer", "eps"))
    # round 2 compared the culprit's real tensors; round 3 replayed it
    assert any(findings.culprit.rpartition(".")[0] in line for line in findings.rounds[1]["evidence"])
    assert findings.rounds[2]["evidence"] and not findings.rounds[2]["evidence"][0].startswith("skipped")


def test_eps_evidence_names_the_two_values(zoo_runs):
    findings = zoo_runs[("transformer", "eps")][0]
    assert findings.culprit.startswith("Functional.layer_norm.")
    assert "0.01" in findings.reason and "1e-05" in findings.reason
    replay = findings.rounds[2]["evidence"][0]
    assert "computes correctly" in replay          # the op does what it is asked: its argument is the cause
    assert "its inputs are identical" in findings.rounds[1]["evidence"][0]


def test_the_same_command_twice_finds_the_nondeterministic_op(zoo_runs):
    findings = zoo_runs[("cnn", "nondet")][0]
    assert findings.culprit.startswith("Functional.dropout.")
    assert findings.category == cl.NONDETERMINISM and "twice" in findings.reason


def test_start_from_existing_statistics_dumps(zoo_runs, tmp_path, capsys):
    """-tp/-gp: round 1 on the given dumps; without commands there is nothing to rerun."""
    findings, _seconds, _folder = zoo_runs[("transformer", "eps")]
    round1 = Path(findings.output_dir) / "round1_statistics"
    (target,) = (round1 / "target" / "dump" / "step0").iterdir()
    (golden,) = (round1 / "golden" / "dump" / "step0").iterdir()
    out = tmp_path / "again"
    code = run_cli(["triage", "-tp", target / "dump.json", "-gp", golden / "dump.json", "-o", out, "--json"])
    assert code == 1
    found = json.loads((out / "triage.json").read_text())
    assert json.loads(capsys.readouterr().out) == found        # --json: one object on stdout, nothing else
    assert found["culprit"].startswith("Functional.layer_norm.") and found["category"] == cl.ARGUMENT
    assert found["rounds"][1]["evidence"][0].startswith("skipped: no training commands")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny")
    shutil.copy(TINY, folder / "train.py")
    return folder


def test_the_injection_changes_no_number(tiny):
    """Plain run and injected run (dumping step 1, not stopped) print the very same losses."""
    import subprocess

    plain = subprocess.run([sys.executable, "train.py"], cwd=tiny, capture_output=True, text=True, timeout=120,
                           check=True).stdout.split()
    run = prepare("target", f"{sys.executable} train.py", str(tiny / "injected"), {"task": "statistics",
                  "level": "mix"}, 1, False, "pytorch")
    execute([run], 120, str(tiny))
    assert run.returncode == 0 and not run.stopped
    # the run's log holds the script's output and the collector's own log lines (`... [INFO] msprobe dump: ...`)
    losses = [line for line in Path(run.log).read_text().splitlines() if "] msprobe" not in line]
    assert " ".join(losses).split() == plain and len(plain) == 3
    assert sorted(os.listdir(Path(run.dump_root))) == ["step1"]       # only the chosen step
    (status,) = run.statuses
    assert status["models"] == ["Sequential"] and status["finished"] and not status["errors"]


def test_a_crash_a_hang_and_a_users_own_debugger(tiny):
    """Three findings in one triage each: the crashing step is dumped and reported; a run past --timeout is
    stopped and its partial dump used; a script's own PrecisionDebugger dumps what the triage asks, where it asks."""
    crash = run_cli_findings(tiny, "crash", f"{sys.executable} train.py --crash", f"{sys.executable} train.py")
    assert crash["outcome"] == "agree" and any("crashed" in f and "planted crash" in f for f in crash["failures"])
    hang = run_cli_findings(tiny, "hang", f"{sys.executable} train.py --hang", f"{sys.executable} train.py",
                            "--timeout", "25")
    assert any("timed out" in f for f in hang["failures"]), hang["failures"]
    assert hang["rounds"][0]["runs"][0]["timed_out"]
    own = run_cli_findings(tiny, "own", f"{sys.executable} train.py --own", f"{sys.executable} train.py --own")
    assert own["outcome"] == "agree" and not own["failures"]
    assert not (tiny / "own_dump").exists()          # it dumped into the triage's folder instead
    assert own["rounds"][0]["runs"][0]["stopped_after_step"]


def run_cli_findings(folder, name, target, golden, *extra) -> dict:
    out = folder / name
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        code = run_cli(["triage", "--target", target, "--golden", golden, "-o", out, "--keep-dumps", *extra])
    finally:
        os.chdir(cwd)
    found = json.loads((out / "triage.json").read_text())
    assert code == (1 if found["outcome"] == "culprit" or found["failures"] else 0)
    return found


@pytest.mark.serial
def test_ctrl_c_stops_the_runs_and_leaves_what_finished(tiny):
    """Ctrl-C while both runs hang inside their step: exit 130, both process groups ended (SIGTERM first, so each
    collector writes the step it was recording), the logs and partial dumps readable under -o."""
    import signal
    import subprocess
    import time

    from msprobe.io import process_alive
    from msprobe.triage.launch import read_statuses

    out = tiny / "interrupted"
    command = f"{sys.executable} train.py --hang"
    triage = subprocess.Popen([sys.executable, "-m", "msprobe", "triage", "--target", command, "--golden", command,
                               "-o", str(out)], cwd=tiny, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              preexec_fn=ctrl_c_reaches_the_child)
    deadline = time.monotonic() + 180
    folders = []
    while time.monotonic() < deadline and not (len(folders) == 2 and all(
            any(s.get("recorded") for s in read_statuses(str(folder))) for folder in folders)):
        time.sleep(0.5)
        folders = [status.parent for status in out.glob("triage_*/round1_statistics/*/status")]
    triage.send_signal(signal.SIGINT)
    _stdout, stderr = triage.communicate(timeout=120)
    assert triage.returncode == 130 and "interrupted" in stderr
    for folder in folders:
        (status,) = [s for s in read_statuses(str(folder)) if s.get("recorded")]
        assert not process_alive(status["pid"])
        (dump,) = (folder / "dump" / "step0").iterdir()
        assert json.loads((dump / "dump.json").read_text())["data"]
        assert (folder / "run.log").is_file()


# issue 40: the judgement of the compare core kept on a bfloat16-autocast pair, a module-level and an extra-op culprit
# (model, bug, amp) -> (outcome, category)
JUDGED = {("cnn", "none", True): (cl.DTYPE_ONLY, None), ("cnn", "bn_eps", True): (cl.CULPRIT, cl.ARGUMENT),
          ("transformer", "residual", False): (cl.CULPRIT, cl.MODULE_CODE),
          ("lstm", "rootscale", False): (cl.CULPRIT, cl.ARGUMENT), ("cnn", "data", False): (cl.CULPRIT, cl.INPUT)}


@pytest.fixture(scope="module", params=list(JUDGED), ids=lambda case: "-".join(map(str, case)))
def judged_run(request, tmp_path_factory):
    return zoo.judged_case("pytorch", request.param, tmp_path_factory)


def test_the_zoo_keeps_the_judgement_of_the_compare(judged_run):
    """A bfloat16-autocast target with no bug: no culprit, the runs differ in dtype; a batch norm's eps planted in it:
    the batch norm, an argument; a dropped residual: the block, its own code, at its forward's definition (round 3
    says why a module is not replayed); the features scaled outside every module (an op the golden never calls):
    named, round 2 compares the op reading its output on both sides, round 3 replays it on the target's side; images
    three times the golden's: the first conv, an input (round 2: the difference enters there, not upstream)."""
    (model, bug, amp), findings = judged_run
    outcome, category = JUDGED[(model, bug, amp)]
    zoo.check_named(findings, bug, (outcome, category))
    if outcome == cl.DTYPE_ONLY:
        assert findings.exit_code == 0 and len(findings.rounds) == 1
        assert "bfloat16 in the target" in findings.dtype_change["dtypes"] and "train.py" in \
            findings.dtype_change["source"]
        return
    assert findings.exit_code == 1 and "train.py" in findings.source
    second, third = findings.rounds[1]["evidence"], findings.rounds[2]["evidence"]
    assert not second[0].startswith("skipped")
    # round 2 never contradicts its table: an input row it compared is not "not compared"
    compared_inputs = [row for row in second[1:] if ".input." in row.split(":")[0] and "max abs err None" not in row]
    assert not compared_inputs or "was not compared" not in second[0], second
    assert not any("not in the tensor dump" in line or "holds no" in line for line in third), third
    if bug == "bn_eps":
        assert findings.culprit.startswith("Functional.batch_norm.") and "0.1" in findings.reason
    elif bug == "residual":
        assert findings.culprit == "Module.head.mix.Mix.forward.0" and "def forward of class Mix" in findings.source
        assert "Tensor.__add__ once in the golden, never in the target" in findings.reason
        assert second[0] == "its inputs are identical, its outputs differ"
        assert third[0].startswith("skipped: Module.head.mix.Mix.forward.0 is a module")
    elif bug == "data":
        assert findings.culprit == "Functional.conv2d.0.forward" and "self.conv1(images)" in findings.source
        assert second[0].startswith("its inputs already differ, its outputs differ") and "upstream" not in second[0]
    else:
        assert findings.culprit.startswith("Tensor.__mul__.") and findings.module is None
        assert "the op reading its output" in second[0] and "already differs" in second[0]
        assert any("does not call" in line for line in third) and not third[0].startswith("skipped")
