"""HeldInterrupts: SIGINT noted while held, handed to the handler in place afterwards."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from msprobe.interrupts import HeldInterrupts


def test_noted_then_raised_by_the_previous_handler():
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        held = HeldInterrupts()
        os.kill(os.getpid(), signal.SIGINT)
        signal.getsignal(signal.SIGINT)          # a Python call: pending handlers run (this one only notes)
        assert held.noted
        held.restore()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        with pytest.raises(KeyboardInterrupt):
            held.deliver()
        held.deliver()                           # once
    finally:
        signal.signal(signal.SIGINT, previous)


def test_nothing_noted_nothing_raised():
    held = HeldInterrupts()
    held.restore()
    held.deliver()


def test_ignored_stays_ignored():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        held = HeldInterrupts()
        held.noted = True
        held.restore()
        held.deliver()
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_outside_the_main_thread_nothing_is_held():
    seen = []

    def body():
        held = HeldInterrupts()
        seen.append(held.previous)
        held.restore()
        held.deliver()

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [None]
