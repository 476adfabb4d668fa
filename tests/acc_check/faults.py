"""Write faults for the hostile tests of acc_check and op_generate: every file opened for writing under one
directory fails with an errno (a read-only directory, a name too long) or takes only so many bytes before its
writes fail (a full disk). Installed in-process with pytest's monkeypatch, or in a subprocess by
`python -c "import faults; faults.main()"` with the FAULT_* variables of `environment()`."""

from __future__ import annotations

import builtins
import errno
import os
import sys

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


class _Budget:
    def __init__(self, left: int):
        self.left = left


class _Limited:
    """A file object whose writes fail with ENOSPC once the shared byte budget is used up."""

    def __init__(self, handle, budget: _Budget):
        self._handle, self._budget = handle, budget

    def write(self, text):
        size = len(text.encode("utf-8")) if isinstance(text, str) else len(text)
        if size > self._budget.left:      # as a real full disk: the error names no file
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._budget.left -= size
        return self._handle.write(text)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._handle.close()

    def __iter__(self):
        return iter(self._handle)

    def __getattr__(self, name):
        return getattr(self._handle, name)


def install(root: str, code: str, after: int = -1, setattr_=setattr) -> None:
    """Fail writes under `root`: with errno `code` at open when `after` < 0, else ENOSPC once `after` bytes in all
    were written there."""
    root = os.path.abspath(root) + os.sep
    real_open, real_os_open = builtins.open, os.open
    budget = _Budget(after)

    def inside(path) -> bool:
        return isinstance(path, (str, bytes, os.PathLike)) and \
            os.path.abspath(os.fsdecode(path)).startswith(root)

    def fault(path):
        number = getattr(errno, code)
        return OSError(number, os.strerror(number), os.fsdecode(path))

    def fake_open(file, mode="r", *args, **kwargs):
        writing = any(flag in mode for flag in "wax+")
        if writing and inside(file) and after < 0:
            raise fault(file)
        handle = real_open(file, mode, *args, **kwargs)
        return _Limited(handle, budget) if writing and inside(file) else handle

    def fake_os_open(path, flags, *args, **kwargs):
        if flags & WRITE_FLAGS and inside(path) and after < 0:
            raise fault(path)
        return real_os_open(path, flags, *args, **kwargs)

    setattr_(builtins, "open", fake_open)
    setattr_(os, "open", fake_os_open)


def environment(root, code: str = "ENOSPC", after: int = -1) -> dict:
    return {"FAULT_ROOT": str(root), "FAULT_ERRNO": code, "FAULT_AFTER": str(after)}


def main() -> None:
    """`msprobe <sys.argv[1:]>` with the faults of the FAULT_* variables installed."""
    install(os.environ["FAULT_ROOT"], os.environ["FAULT_ERRNO"], int(os.environ["FAULT_AFTER"]))
    from msprobe.cli.main import console_main

    sys.argv = ["msprobe", *sys.argv[1:]]
    console_main()
