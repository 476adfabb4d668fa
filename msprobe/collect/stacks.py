"""The call stacks of stack.json, framework-free: the caller's frames innermost first, without the collector's own,
formatted as the reference writes them ("File <path>, line <n>, in <function>, \\n <source line>"). One function for
both collectors (msprobe/pytorch, msprobe/mindspore)."""

from __future__ import annotations

import os
import sys
import traceback

_COLLECT = os.path.dirname(os.path.abspath(__file__))
# every file of the msprobe package: the collectors, and the hooks `msprobe triage` injects around the user's calls
_PACKAGE = os.path.dirname(_COLLECT) + os.sep


def stack_lines(cache: dict, own_directory: str, skip: int = 1) -> tuple:
    """The stack of the caller's caller (`skip` frames up from here), innermost first, without the frames of files
    in `own_directory` (the collector's package) or anywhere in the msprobe package (this one, the triage
    injection's wrappers around the model's calls). Formatting (source lines included) is cached in `cache` per chain of (code, instruction)
    positions, since a training step calls the same sites again and again (at most 100,000 chains)."""
    key = []
    frame = sys._getframe(skip)
    while frame is not None:        # the instruction, not the line: f_lineno costs a line-table search per frame
        key.append((frame.f_code, frame.f_lasti))
        frame = frame.f_back
    key = tuple(key)
    lines = cache.get(key)
    if lines is None:
        frames = [f for f in traceback.extract_stack(sys._getframe(skip))
                  if not _is_own(os.path.abspath(f.filename), own_directory)]
        lines = tuple(f"File {f.filename}, line {f.lineno}, in {f.name}, \n {f.line or ''}" for f in reversed(frames))
        if len(cache) < 100_000:
            cache[key] = lines
    return lines


def _is_own(path: str, own_directory: str) -> bool:
    return os.path.dirname(path) == own_directory or path.startswith(_PACKAGE)
