"""Run a function in a forked child process while this one goes on, and collect its result later. The child
inherits this process's data (nothing is copied in); only the result comes back, pickled through a pipe. Where
the system cannot fork or has a single core, the function runs at once, in this process."""

from __future__ import annotations

import os
import pickle
import signal

from msprobe.interrupts import HeldInterrupts


class Forked:
    def __init__(self, func, *args, inline: bool = False):
        """inline: run at once in this process (the cores are busy with other work already)."""
        self._pid = None
        self._value = self._error = None
        if inline or not hasattr(os, "fork") or (os.cpu_count() or 1) < 2:
            try:
                self._value = func(*args)
            except Exception as exc:  # noqa: BLE001 - raised again by result(), as from the child
                self._error = exc
            return
        read, write = os.pipe()
        held = HeldInterrupts()                   # a Ctrl-C while forking is raised once the child is known
        pid = os.fork()
        if pid == 0:                              # the child: compute, send, leave without cleanup
            held.restore()
            os.close(read)
            try:
                try:
                    payload = pickle.dumps((True, func(*args)), protocol=pickle.HIGHEST_PROTOCOL)
                except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent
                    payload = _pickled_error(exc)
                with os.fdopen(write, "wb") as pipe:
                    pipe.write(payload)
            finally:
                os._exit(0)
        self._pid, self._read = pid, read
        os.close(write)
        try:
            held.restore()
            held.deliver()
        except BaseException:
            self.cancel()
            raise

    def result(self):
        """The function's value (once); its exception is raised here."""
        if self._pid is not None:
            pid, self._pid = self._pid, None          # the pipe is closed and the child reaped whatever happens
            complete = False
            try:
                with os.fdopen(self._read, "rb") as pipe:
                    data = pipe.read()
                complete = True
            finally:
                if not complete:                       # interrupted (Ctrl-C): the child's work is not wanted
                    _kill(pid)
                _, status = os.waitpid(pid, 0)
            if not data:
                raise OSError(f"a worker process ended without a result (wait status {status})")
            ok, value = pickle.loads(data)
            if ok:
                self._value = value
            else:
                self._error = value
        if self._error is not None:
            raise self._error
        value, self._value = self._value, None      # given once: this object does not keep it alive
        return value


    def cancel(self) -> None:
        """Stop the child if it still runs (this process failed and will not want the result)."""
        if self._pid is not None:
            pid, self._pid = self._pid, None
            os.close(self._read)
            _kill(pid)
            os.waitpid(pid, 0)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _pickled_error(exc: BaseException) -> bytes:
    try:
        return pickle.dumps((False, exc))
    except Exception:  # noqa: BLE001 - an exception that does not pickle travels as its text
        return pickle.dumps((False, RuntimeError(f"{type(exc).__name__}: {exc}")))
