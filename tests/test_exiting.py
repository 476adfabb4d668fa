"""Only the console script's own process is marked as leaving without freeing its heap; the graph keeps its last
trees alive there and nowhere else (workers run task after task)."""

from __future__ import annotations

import os

from msprobe import exiting
from msprobe.graph import run


def test_only_the_marked_process(monkeypatch):
    monkeypatch.setattr(exiting, "_PID", None)
    assert not exiting.leaves_without_teardown()
    exiting.leave_without_teardown()
    assert exiting.leaves_without_teardown()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:                                   # a forked worker is not the marked process
        os.write(write, b"1" if exiting.leaves_without_teardown() else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"0"
    os.close(read)
    os.close(write)


def test_trees_kept_only_in_the_marked_process(monkeypatch):
    monkeypatch.setattr(run, "_RETIRED", [])
    monkeypatch.setattr(exiting, "_PID", None)
    run._retire("tree")
    assert run._RETIRED == []
    monkeypatch.setattr(exiting, "_PID", os.getpid())
    run._retire("npu", "bench")
    assert run._RETIRED == ["npu", "bench"]
