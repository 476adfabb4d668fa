"""atomic_path: the output appears complete or not at all, and no temporary file is left, wherever an error or a
Ctrl-C lands (even inside the making of the temporary file)."""

from __future__ import annotations

import os
import stat

import pytest

from msprobe.report import atomic
from msprobe.report.atomic import atomic_path, new_temporary, remove_temporaries


def test_complete_write_replaces_the_target(tmp_path):
    target = tmp_path / "out.csv"
    target.write_text("old")
    with atomic_path(str(target)) as temporary:
        assert os.path.basename(temporary).startswith(".tmp-") and os.path.exists(temporary)
        with open(temporary, "w") as handle:
            handle.write("new")
    assert target.read_text() == "new" and os.listdir(tmp_path) == ["out.csv"]
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640


@pytest.mark.parametrize("error", [KeyboardInterrupt, OSError])
def test_failure_leaves_the_old_target_and_no_temporary(tmp_path, error):
    target = tmp_path / "out.csv"
    target.write_text("old")
    with pytest.raises(error), atomic_path(str(target)) as temporary:
        with open(temporary, "w") as handle:
            handle.write("half")
        raise error()
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["out.csv"]


def test_ctrl_c_right_after_the_temporary_is_made(tmp_path, monkeypatch):
    real_close = os.close
    calls = []

    def close_then_interrupt(fd):
        real_close(fd)
        if not calls:
            calls.append(fd)
            raise KeyboardInterrupt      # after the file exists, before new_temporary returns its name

    monkeypatch.setattr(atomic.os, "close", close_then_interrupt)
    with pytest.raises(KeyboardInterrupt), atomic_path(str(tmp_path / "out.csv")):
        pass
    monkeypatch.undo()
    assert os.listdir(tmp_path) == []


def test_names_do_not_collide_and_foreign_files_are_kept(tmp_path, monkeypatch):
    made: list = []
    first = new_temporary(str(tmp_path / "x"), made)
    tokens = iter(["aaaaaaaaaaaa", "aaaaaaaaaaaa", "bbbbbbbbbbbb"])
    monkeypatch.setattr(atomic.secrets, "token_hex", lambda _: next(tokens))
    foreign = new_temporary(str(tmp_path / "y"), [])           # .tmp-aaaaaaaaaaaa-y, not ours
    second = new_temporary(str(tmp_path / "y"), made)          # collides once, then takes b...
    assert os.path.basename(second) == f".tmp-bbbbbbbbbbbb-{os.getpid()}@{atomic.host_tag()}-y"
    assert made == [first, second]
    remove_temporaries(made)
    assert os.listdir(tmp_path) == [os.path.basename(foreign)] and made == []


def _dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_stale_temporaries_of_dead_writers_are_removed_and_nothing_else(tmp_path):
    host = atomic.host_tag()
    dead, alive = _dead_pid(), os.getpid()
    names = {"dead": f".tmp-0123456789ab-{dead}@{host}-compare_result_20260101000000.csv",
             "dead-part": f".tmp-0123456789ac-{dead}@{host}-part-build_20260101000000.vis",
             "alive": f".tmp-0123456789ad-{alive}@{host}-compare_result_20260101000000.csv",
             "other-host": f".tmp-0123456789ae-{dead}@{'0' * 8 if host != '0' * 8 else '1' * 8}-x.csv",
             "old-format": ".tmp-0123456789af-x.csv", "user": ".tmp-notes.txt", "result": "compare_result_1.csv"}
    for name in names.values():
        (tmp_path / name).write_text("x")
        os.utime(tmp_path / name, (1_000_000, 1_000_000))
    young = f".tmp-0123456789b0-{dead}@{host}-young.csv"     # changed after the run started: kept
    (tmp_path / young).write_text("x")
    removed = atomic.remove_stale_temporaries(str(tmp_path), before=2_000_000)
    assert sorted(removed) == sorted([names["dead"], names["dead-part"]])
    kept = {n for k, n in names.items() if not k.startswith("dead")} | {young}
    assert set(os.listdir(tmp_path)) == kept


def test_temporary_name_fits_when_the_target_name_is_near_the_limit(tmp_path):
    target = tmp_path / ("r" * 240 + ".csv")
    with atomic_path(str(target)) as temporary:
        assert len(os.path.basename(temporary)) <= atomic.NAME_MAX and temporary.endswith(".csv")
        with open(temporary, "w") as handle:
            handle.write("ok")
    assert target.read_text() == "ok" and os.listdir(tmp_path) == [target.name]


def test_write_text_writes_a_lone_surrogate_escaped(tmp_path):
    atomic.write_text(str(tmp_path / "a.json"), '{"name": "x\ud800y"}')
    assert (tmp_path / "a.json").read_bytes() == b'{"name": "x\\ud800y"}'
