"""Checks on user-given paths: existence, kind, symlinks, readability, size; safe tensor-file names."""

from __future__ import annotations

import os
import time

from msprobe.errors import MsprobeError, PathError
from msprobe.io import remove_stale_temporaries

GIB = 1024 ** 3
# Reject a file whose size reaches these limits (spec compare.md §7.2).
SIZE_LIMITS = {".yaml": GIB, ".yml": GIB, ".csv": GIB, ".xlsx": GIB, ".ir": GIB, ".pkl": GIB, ".db": 100 * GIB}
DEFAULT_SIZE_LIMIT = 10 * GIB


def _check_text(path: str, what: str) -> None:
    """A path no system call can take: empty, or holding NUL (Python raises ValueError for it)."""
    if not path:
        raise PathError(f"{what}: no path given.")
    if "\x00" in str(path):
        raise PathError(f"{what} {path} holds a NUL character, which no path can hold.")


def _check_exists(path: str, what: str) -> None:
    """The path is given, exists and is not a symbolic link."""
    _check_text(path, what)
    if not os.path.lexists(path):
        raise PathError(f"{what} {path} does not exist.")
    if os.path.islink(path):
        raise PathError(f"{what} {path} is a symbolic link; pass the real path instead.")


def check_input_file(path: str, what: str = "input file") -> str:
    """Return the absolute path of an existing, readable, non-symlinked regular file of sane size."""
    _check_exists(path, what)
    if os.path.isdir(path):
        raise PathError(f"{what} {path} is a directory, a file is expected.")
    if not os.path.isfile(path):
        raise PathError(f"{what} {path} is not a regular file.")
    if not os.access(path, os.R_OK):
        raise PathError(f"{what} {path} is not readable.")
    ext = os.path.splitext(path)[1].lower()
    limit = SIZE_LIMITS.get(ext, DEFAULT_SIZE_LIMIT)
    size = os.path.getsize(path)
    if size >= limit:
        raise PathError(f"The size ({size}) of {path} exceeds ({limit}) bytes, tools not support.")
    return os.path.abspath(path)


def check_input_dir(path: str, what: str = "input directory") -> str:
    _check_exists(path, what)
    if not os.path.isdir(path):
        raise PathError(f"{what} {path} is a file, a directory is expected.")
    if not os.access(path, os.R_OK | os.X_OK):
        raise PathError(f"{what} {path} is not readable.")
    return os.path.abspath(path)


def prepare_output_dir(path: str) -> str:
    """Create the output directory if needed and check that it is a writable directory; remove the temporary
    files that runs of msprobe killed with SIGKILL left there (msprobe/io.py)."""
    _check_text(path, "output path")
    if os.path.lexists(path) and not os.path.isdir(path):
        raise PathError(f"output path {path} exists and is not a directory.")
    if os.path.islink(path):
        raise PathError(f"output path {path} is a symbolic link; pass the real path instead.")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise PathError(f"cannot create output directory {path}: {exc.strerror}.") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise PathError(f"output directory {path} is not writable.")

    remove_stale_temporaries(path, time.time())
    return os.path.abspath(path)


def is_plain_file_name(name: str) -> bool:
    """A file name without any directory part (no separators, not . or ..)."""
    return bool(name) and "/" not in name and "\\" not in name and name not in (".", "..") and "\x00" not in name


TENSOR_DIR_NAME = "dump_tensor_data"


def tensor_dir_of(dump_path: str, recorded=None) -> str:
    """Where the tensor files of the dump `dump_path` (its dump.json) are read from: `dump_tensor_data` beside it;
    when there is none, the dump's recorded `dump_data_dir` (relative to the dump folder, or absolute) if that is a
    directory inside the dump folder reached through no symbolic link (acc_check's error data). Nothing outside
    the dump folder is ever read: an absolute `dump_data_dir` elsewhere is not followed (docs/security.md)."""
    folder = os.path.dirname(os.path.abspath(dump_path))
    beside = os.path.join(folder, TENSOR_DIR_NAME)
    if os.path.lexists(beside) or not isinstance(recorded, str) or not recorded:
        return beside
    candidate = os.path.normpath(os.path.join(folder, recorded))
    inside = os.path.relpath(candidate, folder)
    if inside == "." or inside.split(os.sep)[0] == os.pardir or os.path.isabs(inside):
        return beside
    step = folder
    for part in inside.split(os.sep):
        step = os.path.join(step, part)
        if os.path.islink(step):
            return beside
    return candidate if os.path.isdir(candidate) else beside


def safe_tensor_path(tensor_dir: str, data_name: str) -> tuple[str | None, str]:
    """Resolve data_name inside tensor_dir; return (path, "") or (None, reason) when unsafe or missing. A symbolic
    link anywhere on the way (the tensor directory or the file) is refused: what is read lies inside the dump
    folder."""
    if not is_plain_file_name(data_name):
        return None, f"invalid data_name {data_name!r}: it must be a plain file name inside dump_tensor_data."
    if os.path.islink(tensor_dir):
        return None, (f"the tensor directory {tensor_dir} is a symbolic link; refused (only files inside the dump "
                      "folder are read).")
    path = os.path.join(tensor_dir, data_name)
    if os.path.islink(path):
        return None, f"tensor file {data_name} is a symbolic link; refused."
    if not os.path.isfile(path):
        return None, f"tensor file {data_name} not found in {tensor_dir}."
    return path, ""


def load_yaml(path: str, what: str):
    """Read a mapping yaml (any number of documents) with a clear error for every problem."""
    import yaml

    path = check_input_file(path, what)
    if not path.lower().endswith((".yaml", ".yml")):
        raise MsprobeError(f"{what} {path} must be a .yaml file.")
    try:
        with open(path, encoding="utf-8") as handle:
            # libyaml's parser when PyYAML has it: the same documents, 4-50x faster on long lists
            documents = [d for d in yaml.load_all(handle, getattr(yaml, "CSafeLoader", yaml.SafeLoader))
                         if d is not None]
    except yaml.YAMLError as exc:
        raise MsprobeError(f"{what} {path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    except UnicodeDecodeError:
        raise MsprobeError(f"{what} {path} is not a UTF-8 text file.") from None
    return documents
