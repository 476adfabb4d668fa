"""Write output files under a temporary name and rename them when complete; remove the temporaries that a killed
run of this tool left behind."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
import socket

NAME_MAX = 255                      # bytes of one file name on Linux file systems

# .tmp-<random>-<pid>@<host>-<tag><name>: the writer's process and machine, so that a later run can tell a
# temporary whose writer is dead (killed with SIGKILL, the machine rebooted) from one still being written
_OURS = re.compile(r"^\.tmp-[0-9a-f]{12}-(\d+)@([0-9a-f]{8})-")


def host_tag() -> str:
    """8 hex digits naming this machine (the writer's host in shared output directories)."""
    return hashlib.sha256(socket.gethostname().encode("utf-8", "backslashreplace")).hexdigest()[:8]


@contextlib.contextmanager
def atomic_path(path: str):
    """Yield a temporary path beside `path` (an empty file); on success it replaces `path`, on failure (Ctrl-C
    included, wherever it lands) it is removed."""
    made: list = []
    try:
        temporary = new_temporary(path, made)
        yield temporary
        os.chmod(temporary, 0o640)
        os.replace(temporary, path)
    except BaseException as exc:
        remove_temporaries(made)
        if isinstance(exc, OSError) and not exc.filename:   # a failed write (disk full) names no file
            exc.filename = path
        raise


def new_temporary(path: str, made: list, tag: str = "") -> str:
    """Create an empty `.tmp-<random>-<pid>@<host>-<tag><name>` file beside `path` and return its path (the name
    is cut to fit a file name when `path`'s own name is near the limit). The name is put in `made` before the
    file is made, so that remove_temporaries(made) removes it whenever the caller stops."""
    directory = os.path.dirname(os.path.abspath(path)) or "."
    owner = f"{os.getpid()}@{host_tag()}-{tag}"
    name = os.path.basename(path)
    while len(f".tmp-{'0' * 12}-{owner}{name}".encode("utf-8", "surrogateescape")) > NAME_MAX and name:
        name = name[1:]
    for _ in range(100):
        candidate = os.path.join(directory, f".tmp-{secrets.token_hex(6)}-{owner}{name}")
        made.append(candidate)
        try:
            os.close(os.open(candidate, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            made.pop()                 # somebody else's
            continue
        return candidate
    raise FileExistsError(f"no free temporary name beside {path}")


def remove_temporaries(made: list) -> None:
    for name in made:
        with contextlib.suppress(OSError):
            os.unlink(name)
    made.clear()


def write_text(path: str, text: str) -> None:
    """UTF-8; a lone surrogate (from a `\\ud800` escape in a dump) is written as the text `\\ud800`."""
    with atomic_path(path) as temporary, open(temporary, "w", encoding="utf-8", errors="backslashreplace") as handle:
        handle.write(text)


def process_alive(pid: int) -> bool:
    """Whether process `pid` of this machine exists (a process of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError as exc:
        return exc.errno != errno.ESRCH
    return True


def remove_stale_temporaries(directory: str, before: float) -> list:
    """Remove the temporaries of this tool in `directory` whose writer, a process of this machine, is dead and
    which were last changed before `before` (a time.time()); files of other names, of writers that live or run
    on another machine are kept. Returns the removed names."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    removed, host = [], host_tag()
    for name in names:
        found = _OURS.match(name)
        if not found or found.group(2) != host or process_alive(int(found.group(1))):
            continue
        path = os.path.join(directory, name)
        try:
            info = os.lstat(path)
            if info.st_mtime < before and not os.path.isdir(path):
                os.unlink(path)
                removed.append(name)
        except OSError:
            continue
    return removed
