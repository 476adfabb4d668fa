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
    assert second.endswith(".tmp-bbbbbbbbbbbb-y") and made == [first, second]
    remove_temporaries(made)
    assert os.listdir(tmp_path) == [os.path.basename(foreign)] and made == []
