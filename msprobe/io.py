"""Write output files under a temporary name and rename them when complete; remove the temporaries that a killed
run of this tool left behind; remove a folder of ours without following a symbolic link."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
import socket
import stat

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


_NO_FOLLOW = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)


def remove_tree(base: str, relative: str) -> None:
    """Remove base/relative and everything under it, never following a symbolic link: each folder is opened
    relative to its parent with O_NOFOLLOW, so a link anywhere (the folder itself, a folder on the way to it, an
    entry inside) is at most removed as a link, and nothing outside `base` is touched. Best effort: what cannot be
    removed (or is not a folder on the way) is left."""
    parts = [part for part in relative.replace(os.sep, "/").split("/") if part not in ("", ".")]
    if not parts or ".." in parts:
        return
    if not (_fd_calls_supported() and hasattr(os, "O_NOFOLLOW")):
        _remove_tree_by_path(base, parts)
        return
    try:
        handle = os.open(base, _NO_FOLLOW)
    except OSError:
        return
    try:
        for part in parts[:-1]:
            inner = os.open(part, _NO_FOLLOW, dir_fd=handle)
            os.close(handle)
            handle = inner
        _remove_entry(handle, parts[-1])
    except OSError:
        pass
    finally:
        os.close(handle)


def _fd_calls_supported() -> bool:
    return {os.open, os.stat, os.unlink, os.rmdir} <= os.supports_dir_fd and os.scandir in os.supports_fd


def _remove_entry(parent: int, name: str) -> None:
    try:
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if not stat.S_ISDIR(info.st_mode):
            os.unlink(name, dir_fd=parent)
            return
        handle = os.open(name, _NO_FOLLOW, dir_fd=parent)      # a link put there meanwhile fails here
    except OSError:
        return
    try:
        with os.scandir(handle) as entries:
            names = [entry.name for entry in entries]
        for inner in names:
            _remove_entry(handle, inner)
    finally:
        os.close(handle)
    with contextlib.suppress(OSError):
        os.rmdir(name, dir_fd=parent)


def _remove_tree_by_path(base: str, parts: list) -> None:
    """Where the system has no *at() calls: the same by path, checking each folder on the way for a link."""
    import shutil

    path = base
    for part in parts:
        path = os.path.join(path, part)
        if os.path.islink(path):
            if part == parts[-1]:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            return
    shutil.rmtree(path, ignore_errors=True)
