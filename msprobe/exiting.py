"""Whether this process ends without freeing its heap: the `msprobe` console script leaves with os._exit once its
outputs are complete, so data it holds at the end need not be released object by object (for a large graph that
takes a tenth of a second). Worker processes (local or Ray) are not marked: they run task after task."""

from __future__ import annotations

import os

_PID: int | None = None


def leave_without_teardown() -> None:
    """Mark this process (the console script, before it runs the command)."""
    global _PID
    _PID = os.getpid()


def leaves_without_teardown() -> bool:
    """True in the marked process itself (not in a child forked or spawned from it)."""
    return _PID == os.getpid()
