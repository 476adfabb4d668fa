"""Ctrl-C around fork: the interpreter runs its at-fork hooks (logging's lock release, ...) in Python, and a
KeyboardInterrupt raised inside one is reported as "ignored" and lost, so the command would run on. While a process
forks, SIGINT is only noted; it is raised once the caller knows its child, so that the child is stopped too."""

from __future__ import annotations

import signal


class HeldInterrupts:
    """SIGINT noted instead of handled, from creation to restore() (in the main thread; elsewhere no Python
    handler runs, so nothing is held); deliver() then hands a noted one to the handler that was in place."""

    def __init__(self):
        self.noted = False
        try:
            self.previous = signal.signal(signal.SIGINT, self._note)
        except ValueError:                        # not the main thread
            self.previous = None

    def _note(self, signum, frame) -> None:
        self.noted = True

    def restore(self) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)

    def deliver(self) -> None:
        if not self.noted:
            return
        self.noted = False
        if callable(self.previous):
            self.previous(signal.SIGINT, None)    # Python's own handler raises KeyboardInterrupt here
        elif self.previous == signal.SIG_DFL:
            signal.raise_signal(signal.SIGINT)
