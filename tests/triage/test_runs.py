"""msprobe triage's folders and processes (issue 40, hostile round 5): each triage writes into a folder of its own
under -o (a rerun, an earlier triage's leftovers, two triages at once); a target that crashes before its first step
is a failure, never "the runs agree" read from stale files; the clean-up never follows a symbolic link; SIGTERM and
SIGHUP end both runs and leave a readable partial answer; a crashed run's log is read from its end; round 1's
commands reproduce it; a script's own PrecisionDebugger started without a model does not die; a run that imported
torch but called no model is reported as such. The tests that run training commands are marked slow (each starts
Python processes that import torch)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from msprobe.io import process_alive, remove_tree
from msprobe.triage import loop
from msprobe.triage.launch import Run, log_tail, read_statuses

from conftest import run_cli

TINY = Path(__file__).with_name("tiny_train.py")       # --crash-early, --hang, --own-nomodel, --nomodel: its docstring


@pytest.fixture
def tiny(tmp_path):
    shutil.copy(TINY, tmp_path / "train.py")
    return tmp_path


def command(*options: str) -> str:
    return " ".join([shlex.quote(sys.executable), "train.py", *options])


def triage_cli(folder: Path, out: Path, target: str, golden: str | None, *extra) -> tuple:
    """`msprobe triage` in its own process, from `folder`: (exit status, stdout, stderr)."""
    argv = [sys.executable, "-m", "msprobe", "triage", "--target", target, "-o", str(out), *extra]
    if golden is not None:
        argv[6:6] = ["--golden", golden]
    done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=240)
    return done.returncode, done.stdout, done.stderr


def triage_folders(out: Path) -> list:
    return sorted(path for path in out.glob("triage_*") if path.is_dir() and not path.is_symlink())


def write_stale_triage(out: Path, side_kind: str = "rank0") -> None:
    """What an earlier triage of the old layout (everything straight under -o) left: each side's dump of a rank
    folder and a status file saying the run was stopped after its step."""
    entry = {"input_args": [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1.0, "Min": 0.0,
                             "Mean": 0.5, "Norm": 1.0}],
             "output": [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1.0, "Min": 0.0,
                         "Mean": 0.5, "Norm": 1.0}]}
    for side in ("target", "golden"):
        folder = out / "round1_statistics" / side
        dump = folder / "dump" / "step0" / side_kind
        dump.mkdir(parents=True)
        (dump / "dump.json").write_text(json.dumps({"task": "statistics", "level": "mix", "framework": "pytorch",
                                                    "dump_data_dir": None,
                                                    "data": {"Functional.relu.0.forward": entry}}))
        (folder / "status").mkdir()
        (folder / "status" / "status_1.json").write_text(json.dumps(
            {"pid": 1, "framework": "pytorch", "models": ["Sequential"], "steps_done": 1, "recorded": True,
             "finished": True, "stopped": True, "errors": []}))


# ---------------------------------------------------------------------------------------------- no training run
def test_the_log_tail_is_read_from_the_end_with_bounded_memory(tmp_path):
    """A crashed run's 300 MiB log: its last lines, read without holding the log in memory (the log is sparse:
    300 MiB of size, next to no disk)."""
    log = tmp_path / "run.log"
    end = "".join(f"line {i}\n" for i in range(40)) + "RuntimeError: planted crash\n"
    with open(log, "wb") as handle:
        handle.truncate(300 * 1024 * 1024)
        handle.seek(0, os.SEEK_END)
        handle.write(end.encode())
    run = Run("target", "python train.py", str(tmp_path))
    tracemalloc.start()
    try:
        tail = run.tail(3)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert tail == "line 38\nline 39\nRuntimeError: planted crash\n"
    assert peak < 1024 * 1024, peak
    # a log without a newline at all, a missing log
    (tmp_path / "one.log").write_bytes(b"x" * 200_000)
    assert log_tail(str(tmp_path / "one.log"), 5) == "x" * 65536
    assert log_tail(str(tmp_path / "missing.log"), 5) == ""


def test_the_clean_up_never_follows_a_symbolic_link(tmp_path):
    """Round 2's dumps are removed; a round folder, a side folder or a dump folder that is a link to data outside,
    and a link inside a dump, are at most removed as links: the data outside stays."""
    outside = tmp_path / "outside"
    for name in ("round", "side", "dump", "inner"):
        (outside / name / "target" / "dump").mkdir(parents=True)
        (outside / name / "target" / "dump" / "keep.txt").write_text("user data")
    (outside / "inner" / "keep.txt").write_text("user data")
    data_links = []
    for name, how in (("round", "round2_tensors"), ("side", "round2_tensors/target"),
                      ("dump", "round2_tensors/target/dump")):
        folder = tmp_path / f"triage_{name}"
        link = folder / how
        link.parent.mkdir(parents=True, exist_ok=True)
        target = outside / name if how == "round2_tensors" else \
            outside / name / "target" if how.endswith("target") else outside / name / "target" / "dump"
        link.symlink_to(target, target_is_directory=True)
        data_links.append(folder)
        loop._clean(str(folder))
    # a real dump folder holding a link to a folder and to a file outside
    folder = tmp_path / "triage_inner"
    dump = folder / "round2_tensors" / "golden" / "dump" / "step0" / "proc1"
    dump.mkdir(parents=True)
    (dump / "dump.json").write_text("{}")
    (dump / "linked_folder").symlink_to(outside / "inner", target_is_directory=True)
    (dump / "linked_file").symlink_to(outside / "inner" / "keep.txt")
    (folder / "round1_statistics" / "target" / "dump").mkdir(parents=True)
    loop._clean(str(folder))
    assert not (folder / "round2_tensors" / "golden" / "dump").exists()
    assert (folder / "round1_statistics" / "target" / "dump").is_dir()        # round 1's statistics dumps stay
    kept = sorted(str(path.relative_to(outside)) for path in outside.rglob("keep.txt"))
    assert kept == ["dump/target/dump/keep.txt", "inner/keep.txt", "inner/target/dump/keep.txt",
                    "round/target/dump/keep.txt", "side/target/dump/keep.txt"]
    # nothing outside base, whatever the relative path says
    remove_tree(str(tmp_path / "triage_inner"), "../outside")
    assert (outside / "inner" / "keep.txt").is_file()


def test_each_triage_makes_a_folder_of_its_own(tmp_path, monkeypatch):
    """Two triages in one second get two folders; a name already taken (a folder or a link another triage or
    the user left) is never reused."""
    monkeypatch.setattr(time, "strftime", lambda *args: "20260101120000")
    (tmp_path / "triage_20260101120000_2").symlink_to(tmp_path, target_is_directory=True)
    first, second = loop.own_folder(str(tmp_path)), loop.own_folder(str(tmp_path))
    assert [os.path.basename(first), os.path.basename(second)] == ["triage_20260101120000",
                                                                   "triage_20260101120000_3"]
    assert not os.listdir(first) and not os.path.islink(second)


# ---------------------------------------------------------------------------------------------- training runs
@pytest.mark.slow
def test_triages_into_a_used_output_folder_and_at_once(tiny):
    """-o holding an earlier triage's kept dumps and status files (the old layout), an interrupted triage's
    folder, and a round folder that is a link to data outside: two triages at once into it both run, each in a
    folder of its own, and touch none of it."""
    out = tiny / "out"
    write_stale_triage(out, "proc1")
    interrupted = out / "triage_20200101000000"
    (interrupted / "round1_statistics" / "target").mkdir(parents=True)
    (interrupted / "round1_statistics" / "target" / "run.log").write_text("interrupted\n")
    outside = tiny / "outside"
    (outside / "target" / "dump").mkdir(parents=True)
    (outside / "target" / "dump" / "keep.txt").write_text("user data")
    (out / "round2_tensors").symlink_to(outside, target_is_directory=True)
    argv = [sys.executable, "-m", "msprobe", "triage", "--target", command(), "--golden", command(), "-o", str(out),
            "--keep-dumps", "--json"]
    both = [subprocess.Popen(argv, cwd=tiny, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    results = [process.communicate(timeout=240) for process in both]
    assert [process.returncode for process in both] == [0, 0], results
    found = [json.loads(stdout) for stdout, _stderr in results]
    assert [f["outcome"] for f in found] == ["agree", "agree"] and not found[0]["failures"]
    folders = {f["output_dir"] for f in found}
    assert len(folders) == 2 and {str(p) for p in triage_folders(out)} == folders | {str(interrupted)}
    for folder in folders:
        (dump,) = Path(folder, "round1_statistics", "target", "dump", "step0").iterdir()
        assert json.loads((dump / "dump.json").read_text())["data"]
    # the latest answer at the top of -o; the leftovers and the data outside untouched
    assert json.loads((out / "triage.json").read_text())["output_dir"] in folders
    assert (out / "round1_statistics" / "target" / "dump" / "step0" / "proc1" / "dump.json").is_file()
    assert (interrupted / "round1_statistics" / "target" / "run.log").read_text() == "interrupted\n"
    assert (outside / "target" / "dump" / "keep.txt").read_text() == "user data"


@pytest.mark.slow
def test_a_target_that_crashes_before_its_first_step_is_a_failure(tiny):
    """Stale rank dumps and status files of an earlier triage in -o never stand in for a run: the target that
    crashed before its first step is a failure (exit 1) with its traceback's end, nothing is compared."""
    out = tiny / "out"
    write_stale_triage(out, "rank0")
    code, stdout, stderr = triage_cli(tiny, out, command("--crash-early"), command(), "--json")
    assert code == 1, (stdout, stderr)
    found = json.loads(stdout)
    assert found["outcome"] == "failed" and found["culprit"] is None
    (failure,) = found["failures"]
    assert "the target run" in failure and "exited with status 1 before step 0" in failure
    assert "RuntimeError: planted crash before the first step" in failure
    (record,) = found["rounds"]
    assert [run["exit_status"] for run in record["runs"]] == [1, 0]
    assert record["runs"][1]["stopped_after_step"]
    assert (Path(found["output_dir"]) / "triage.html").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["SIGTERM", "SIGHUP"])
def test_a_stop_signal_ends_both_runs_and_leaves_a_partial_answer(tiny, stop):
    """SIGTERM or SIGHUP to the triage while both runs hang inside their step: both process groups are ended
    (SIGTERM first, so each collector writes what it recorded), the exit status is 128 + the signal's number, and
    triage.json says where it stopped, with the runs' logs and partial dumps readable."""
    out = tiny / "out"
    triage = subprocess.Popen([sys.executable, "-m", "msprobe", "triage", "--target", command("--hang"),
                               "--golden", command("--hang"), "-o", str(out)], cwd=tiny, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        sides = []
        while time.monotonic() < deadline and not (len(sides) == 2 and all(
                "hanging" in (side / "run.log").read_text() for side in sides)):
            time.sleep(0.3)
            sides = [side for side in out.glob("triage_*/round1_statistics/*") if (side / "run.log").is_file()]
        assert len(sides) == 2
        triage.send_signal(getattr(signal, stop))
        _stdout, stderr = triage.communicate(timeout=120)
    finally:                                    # a failed wait: the triage ends its runs on SIGTERM
        if triage.poll() is None:
            triage.terminate()
            try:
                triage.wait(60)
            except subprocess.TimeoutExpired:
                triage.kill()
                triage.wait()
    assert triage.returncode == 128 + getattr(signal, stop), stderr
    assert f"interrupted ({stop})" in stderr
    for side in sides:
        (status,) = [s for s in read_statuses(str(side)) if s.get("recorded")]
        assert not process_alive(status["pid"])
        (dump,) = (side / "dump" / "step0").iterdir()
        content = json.loads((dump / "dump.json").read_text())
        assert content["data"] and "SIGTERM" in content["incomplete"]
    (folder,) = triage_folders(out)
    found = json.loads((folder / "triage.json").read_text())
    assert found["outcome"] == "interrupted" and stop in found["failures"][0]
    assert [run["side"] for run in found["rounds"][0]["runs"]] == ["target", "golden"]
    assert all(run["exit_status"] is not None for run in found["rounds"][0]["runs"])


@pytest.mark.slow
def test_round_one_commands_reproduce_the_round(tiny):
    """The commands printed for round 1 name files the clean-up keeps: its compare alone gives the round's table
    again, and its runs by hand (from any folder) write the same dumps."""
    out = tiny / "out"
    code, stdout, stderr = triage_cli(tiny, out, command(), command("--steps", "2"), "--json")
    assert code == 0, (stdout, stderr)
    found = json.loads(stdout)
    *runs, compare = found["rounds"][0]["commands"]
    assert len(runs) == 2 and compare.startswith("msprobe compare ")
    words = shlex.split(compare)
    for path in (words[words.index("-tp") + 1], words[words.index("-gp") + 1]):
        assert Path(path).exists(), path
    again = tiny / "again"
    words[words.index("-o") + 1] = str(again)
    assert run_cli(words[1:]) == 0
    assert list(again.glob("compare_result_*"))
    for line in runs:                        # from another folder: each command goes where the triage ran it
        subprocess.run(["bash", "-c", line], cwd="/", check=True, timeout=120, capture_output=True)
    for side in ("target", "golden"):
        dumps = sorted(Path(found["output_dir"], "round1_statistics", side, "dump", "step0").iterdir())
        assert len(dumps) == 2
        first, second = (json.loads((dump / "dump.json").read_text())["data"] for dump in dumps)
        assert first == second


@pytest.mark.slow
def test_a_scripts_own_debugger_started_without_a_model(tiny):
    """A script whose own L1 PrecisionDebugger calls start() without a model: the triage's level mix needs one, so
    the debugger waits for the first model called in the step (never an error raised into the training); the
    step is recorded with its modules, where the triage asks."""
    out = tiny / "out"
    code, stdout, stderr = triage_cli(tiny, out, command("--own-nomodel"), command("--own-nomodel"), "--json", "--keep-dumps")
    assert code == 0, (stdout, stderr)
    found = json.loads(stdout)
    assert found["outcome"] == "agree" and not found["failures"]
    assert all(run["stopped_after_step"] and run["exit_status"] == 0 for run in found["rounds"][0]["runs"])
    (dump,) = Path(found["output_dir"], "round1_statistics", "target", "dump", "step0").iterdir()
    names = list(json.loads((dump / "dump.json").read_text())["data"])
    assert "Module.0.Linear.forward.0" in names and "Functional.linear.0.forward" in names
    assert not (tiny / "own_dump").exists()


@pytest.mark.slow
def test_a_run_that_imported_torch_but_called_no_model(tiny):
    """A run that imported torch and called no model, and one that ended before the chosen step, are said to be
    so (exit 2: nothing to triage), not "never imported torch or mindspore"."""
    out = tiny / "out"
    code, stdout, stderr = triage_cli(tiny, out, command("--nomodel"), command("--nomodel"))
    assert code == 2, (stdout, stderr)
    assert "imported torch but no model was called in step 0" in stderr and "never imported" not in stderr
    code, stdout, stderr = triage_cli(tiny, out, command(), command(), "--step", "5")
    assert code == 2, (stdout, stderr)
    assert "imported torch but ended after 3 optimizer steps, before step 5" in stderr
