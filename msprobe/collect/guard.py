"""Failures inside a collector never reach the user's training: each is caught, logged once per kind with the
name of the entry it hit, and leaves a one-line reason in the dump."""

from __future__ import annotations

import threading

from msprobe.errors import first_line
from msprobe.log import get_logger

REASON_LIMIT = 300        # characters of a dump_error text (a dispatcher error can be a hundred lines)


def one_line(exc: BaseException, limit: int = REASON_LIMIT) -> str:
    """`Type: first line of the message`, at most `limit` characters."""
    text = first_line(exc)
    return text if len(text) <= limit else text[:limit - 3] + "..."


class ErrorLog:
    """Log-once bookkeeping of one debugger (thread-safe)."""

    def __init__(self, prefix: str = "msprobe dump"):
        self.prefix = prefix
        self._seen: set = set()
        self._lock = threading.Lock()

    def once(self, key, message: str, *args) -> bool:
        """Log `message` (a warning, %-style args) the first time `key` is seen; whether it was logged."""
        with self._lock:
            if key in self._seen:
                return False
            self._seen.add(key)
        get_logger().warning(f"{self.prefix}: {message}", *args)
        return True

    def failed(self, what: str, name: str, exc: BaseException,
               consequence: str = "the entry is marked with dump_error and training continues") -> str:
        """Log a failure of `what` (a part of recording) at entry `name` once per (exception type, what); return
        the one-line reason stored in the dump."""
        reason = f"{what}: {one_line(exc)}"
        self.once((type(exc).__name__, what), "recording %s of %s failed (%s); %s", what, name, one_line(exc),
                  consequence)
        return reason
