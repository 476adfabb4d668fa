"""Paths a collector writes: the step/rank folder of a step, and tensor file names. Names are data: an entry or
argument name (a module path, a dict key) becomes a file name only through tensor_file_name, and dump.json keeps
the name it gave in the record's data_name."""

from __future__ import annotations

import hashlib
import os
import re

NAME_MAX = 255          # bytes of one file name on the usual file systems
# '%' (the escape itself), path separators, control characters and lone surrogates (a name decoded from bytes
# that were not UTF-8) are escaped as %XX of their UTF-8 (surrogatepass) bytes
_UNSAFE = re.compile(r"[%/\\\x00-\x1f\x7f\ud800-\udfff]")
_HASH_CHARS = 16


def _escape(match: re.Match) -> str:
    return "".join(f"%{byte:02X}" for byte in match.group().encode("utf-8", "surrogatepass"))


def escape_file_name(name: str) -> str:
    """`name` with every character that cannot stand in a portable file name escaped as %XX; '.' and '..' (the
    only names that are still not files) become %2E and %2E%2E."""
    escaped = _UNSAFE.sub(_escape, name)
    return escaped.replace(".", "%2E") if escaped in (".", "..") else escaped


def tensor_file_name(name: str, suffix: str = ".pt", limit: int = NAME_MAX) -> str:
    """The file name of a tensor whose structural name is `name`: escaped, and when it does not fit in `limit`
    bytes, cut and followed by '~' and 16 hex digits of the SHA-256 of the whole escaped name (so two long names
    that share a prefix still get two files)."""
    escaped = escape_file_name(name)
    full = escaped + suffix
    if len(full.encode("utf-8")) <= limit:
        return full
    digest = hashlib.sha256(escaped.encode("utf-8")).hexdigest()[:_HASH_CHARS]
    room = limit - len(suffix.encode("utf-8")) - 1 - _HASH_CHARS
    head = escaped.encode("utf-8")[:room].decode("utf-8", "ignore")     # never half a character
    return f"{head}~{digest}{suffix}"


def step_directory(dump_path: str, step: int, rank: int | None, pid: int | None = None) -> str:
    """Where one step of one process writes: <dump_path>/step<N>/rank<R>, or proc<pid> without a rank."""
    leaf = f"rank{rank}" if rank is not None else f"proc{os.getpid() if pid is None else pid}"
    return os.path.join(dump_path, f"step{step}", leaf)
