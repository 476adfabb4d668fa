"""Forked: a function in a forked child, its value or exception back in the parent; cancelled or interrupted
children are reaped."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from msprobe.errors import MsprobeError
from msprobe.graph.forked import Forked

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the system cannot fork")


def _square(value):
    return value * value, os.getpid()


def _fail(message):
    raise MsprobeError(message)


def _sleep(seconds):
    time.sleep(seconds)
    return seconds


def _children() -> set:
    found = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == os.getpid():
                found.add(int(name))
    return found


def test_value_and_exception_come_back():
    value, pid = Forked(_square, 7).result()
    assert value == 49 and (pid != os.getpid() or (os.cpu_count() or 1) < 2)
    with pytest.raises(MsprobeError, match="bad dump"):
        Forked(_fail, "bad dump").result()
    value, pid = Forked(_square, 3, inline=True).result()
    assert value == 9 and pid == os.getpid()


def test_cancel_stops_the_child():
    before = _children()
    started = time.perf_counter()
    Forked(_sleep, 30).cancel()
    assert time.perf_counter() - started < 5
    assert _children() == before


def test_interrupt_while_waiting_raises_keyboard_interrupt_and_reaps():
    if (os.cpu_count() or 1) < 2:
        pytest.skip("runs inline on one core")
    before = _children()
    waiting = Forked(_sleep, 30)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    started = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        waiting.result()
    timer.join()
    assert time.perf_counter() - started < 5
    waiting.cancel()                      # a no-op now: nothing closed twice
    assert _children() == before


def test_ctrl_c_during_the_fork_is_raised_and_the_child_reaped(monkeypatch):
    """A SIGINT that arrives while the process forks (where the interpreter's at-fork hooks would swallow it) is
    noted and raised once the child is known, also when another thread exists; the child is killed and reaped."""
    real_fork = os.fork
    forked = []

    def fork_hit_by_ctrl_c():
        os.kill(os.getpid(), signal.SIGINT)        # pending: SIGINT is blocked around the fork
        pid = real_fork()
        if pid:
            forked.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", fork_hit_by_ctrl_c)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)    # another thread, which the kernel may pick for the signal
    other.start()
    handler = signal.getsignal(signal.SIGINT)
    try:
        before = _children()
        with pytest.raises(KeyboardInterrupt):
            Forked(_sleep, 30)
        assert forked and forked[0] not in _children() and _children() == before
    finally:
        stop.set()
        other.join()
    monkeypatch.undo()
    assert signal.getsignal(signal.SIGINT) is handler     # the handler is as it was
    assert Forked(_square, 3).result()[0] == 9
