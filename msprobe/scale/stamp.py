"""The timestamp that names the files of a run (compare_result_<stamp>.xlsx, compare_result_rank0_<stamp>.csv,
build_<stamp>.vis...), unique in its output directory: two runs started in the same second into one directory
would otherwise replace each other's results.

Every writer of msprobe names its files so (compare, graph, merge_result, code_mapping, acc_check,
multi_acc_check, the Python API's result.write()). A run claims a second by creating `.msprobe_run_<stamp>.lock` (exclusively; it holds `<pid>@<host>`) in its output
directory and checking that no file in the directories it writes to already carries that stamp. When the second
is taken (another run holds it or has used it), the run waits for the next second and tries again, so names keep
the reference's 14-digit format (which merge_result reads) and always show when the run started. The lock is
removed when the command ends; a lock whose process of this machine is dead (a run killed with SIGKILL) is removed
by the next run into that directory.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import time

from msprobe.errors import MsprobeError
from msprobe.io import host_tag, process_alive

MAX_WAIT = 120.0                      # seconds; more runs than this in one directory at once is refused
_LOCK = re.compile(r"^\.msprobe_run_(\d{14})\.lock$")
_HELD: list = []                      # locks of this process, removed by release_claims()


def timestamp() -> str:
    """This second as the 14 digits that name a run's files (20260101120000)."""
    return time.strftime("%Y%m%d%H%M%S")


def lock_name(stamp: str) -> str:
    return f".msprobe_run_{stamp}.lock"


def claim_stamp(directories: list, now=None) -> str:
    """A timestamp (YYYYmmddHHMMSS of the current second) that no other run holds and no file in `directories`
    uses; directories[0] (created if missing) keeps the claim until release_claims()."""
    now = now or time.time
    home = directories[0]
    os.makedirs(home, exist_ok=True)
    remove_stale_locks(home)
    deadline = time.monotonic() + MAX_WAIT
    tried = None
    while True:
        moment = now()
        stamp = time.strftime("%Y%m%d%H%M%S", time.localtime(moment))
        if stamp != tried:
            tried = stamp
            lock = os.path.join(home, lock_name(stamp))
            if _create(lock):
                if not _used(directories, stamp, lock):
                    _HELD.append(lock)
                    return stamp
                with contextlib.suppress(OSError):
                    os.unlink(lock)
        if time.monotonic() > deadline:
            raise MsprobeError(f"no free timestamp for the result files in {home} for {MAX_WAIT:.0f} s: too many "
                               "runs write into this directory at once.")
        time.sleep(max(0.01, 1.0 - moment % 1.0 + 0.005))


@contextlib.contextmanager
def claimed_stamp(directories: list):
    """claim_stamp for the duration of a `with` block: a writer that outlives its files (the Python API's
    result.write()) gives its claim back as soon as its files carry the stamp."""
    stamp = claim_stamp(directories)
    lock = _HELD[-1]
    try:
        yield stamp
    finally:
        with contextlib.suppress(ValueError):
            _HELD.remove(lock)
        with contextlib.suppress(OSError):
            os.unlink(lock)


def release_claims() -> None:
    """Remove the locks this process holds (the end of a command)."""
    while _HELD:
        with contextlib.suppress(OSError):
            os.unlink(_HELD.pop())


atexit.register(release_claims)


def remove_stale_locks(directory: str) -> None:
    """Remove the run locks in `directory` of processes of this machine that are dead."""
    with contextlib.suppress(OSError):
        for name in os.listdir(directory):
            if not _LOCK.match(name):
                continue
            path = os.path.join(directory, name)
            with contextlib.suppress(OSError, ValueError):
                with open(path, encoding="ascii") as handle:
                    pid, _, host = handle.read(64).strip().partition("@")
                if host == host_tag() and not process_alive(int(pid)):
                    os.unlink(path)


def _create(lock: str) -> bool:
    try:
        descriptor = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return False
    try:
        os.write(descriptor, f"{os.getpid()}@{host_tag()}\n".encode())
    finally:
        os.close(descriptor)
    return True


def _used(directories: list, stamp: str, lock: str) -> bool:
    mine = os.path.basename(lock)
    for directory in directories:
        with contextlib.suppress(OSError):
            if any(stamp in name and name != mine for name in os.listdir(directory)):
                return True
    return False
