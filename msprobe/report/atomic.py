"""Write output files under a temporary name and rename them when complete."""

from __future__ import annotations

import contextlib
import os
import secrets


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
    except BaseException:
        remove_temporaries(made)
        raise


def new_temporary(path: str, made: list, tag: str = "") -> str:
    """Create an empty `.tmp-<random>-<tag><name>` file beside `path` and return its path. The name is put in
    `made` before the file is made, so that remove_temporaries(made) removes it whenever the caller stops."""
    directory = os.path.dirname(os.path.abspath(path)) or "."
    for _ in range(100):
        candidate = os.path.join(directory, f".tmp-{secrets.token_hex(6)}-{tag}{os.path.basename(path)}")
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
    with atomic_path(path) as temporary, open(temporary, "w", encoding="utf-8") as handle:
        handle.write(text)
