"""What a path means: a dump file, a rank folder, a step folder of ranks, a dump root of steps, or graph/pynative
halves. `locate` turns a target/golden pair of paths into compare jobs (spec §2.1, §3.10)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from msprobe.dump.paths import check_input_dir, check_input_file
from msprobe.errors import PathError, UsageError

RANK_DIR = re.compile(r"^rank(0|[1-9]\d*)?$")
PROC_DIR = re.compile(r"^proc\d+$")
STEP_DIR = re.compile(r"^step\d+$")
MIXED_HALVES = ("graph", "pynative")
DUMP_FILES = ("dump.json", "debug.json")


@dataclass(frozen=True)
class Job:
    """One pair of dump files to compare, and where its results go."""

    target: str
    golden: str
    out_subdir: str = ""   # relative to the output directory, e.g. "step0" or "graph/step1"
    suffix: str = ""       # result file suffix, e.g. "_rank0" or "_proc1234"
    label: str = ""        # log prefix, e.g. "[step0/rank1] "


@dataclass
class Located:
    jobs: list = field(default_factory=list)
    problems: list = field(default_factory=list)   # human-readable reasons why some parts are not compared
    linked: set = field(default_factory=set)       # folders (as <step>/<rank>) that are symbolic links


def _rank_key(name: str):
    digits = name[4:]
    return -1 if not digits else int(digits)


def _subdirs(path: str, pattern: re.Pattern, side: str, prefix: str, located: Located) -> list:
    """The folders of `path` whose names match; one that is a symbolic link is not compared, and is named as one
    (not as a folder the other side lacks): only folders inside the dump are read."""
    try:
        names = os.listdir(path)
    except OSError as exc:
        raise PathError(f"cannot list {path}: {exc.strerror}.") from None
    found = []
    for name in names:
        if pattern.match(name) and os.path.isdir(os.path.join(path, name)):
            if os.path.islink(os.path.join(path, name)):
                located.problems.append(f"{_join(prefix, name)} of the {side} dump is a symbolic link; not "
                                        "compared (only folders inside the dump are read).")
                located.linked.add(_join(prefix, name))
            else:
                found.append(name)
    return found


def dump_file_in(directory: str) -> str | None:
    for name in DUMP_FILES:
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            return path
    return None


def locate(target: str, golden: str) -> Located:
    """Compare jobs for a target/golden pair of paths (both files, or both directories)."""
    if not os.path.lexists(target):
        raise PathError(f"target path {target} does not exist.")
    if not os.path.lexists(golden):
        raise PathError(f"golden path {golden} does not exist.")
    if os.path.isdir(target) != os.path.isdir(golden):
        raise UsageError("The target_path and golden_path need to be of the same type: two dump files or two "
                         "directories.")
    if not os.path.isdir(target):
        check_input_file(target, "target dump file")
        check_input_file(golden, "golden dump file")
        return Located([Job(os.path.abspath(target), os.path.abspath(golden))])
    target = check_input_dir(target, "target directory")
    golden = check_input_dir(golden, "golden directory")
    located = Located()
    halves = [h for h in MIXED_HALVES if os.path.isdir(os.path.join(target, h)) and os.path.isdir(os.path.join(golden, h))]
    if halves:
        for half in halves:
            _locate_root(os.path.join(target, half), os.path.join(golden, half), half, located)
        for half in MIXED_HALVES:
            if half not in halves and (os.path.isdir(os.path.join(target, half)) or os.path.isdir(os.path.join(golden, half))):
                located.problems.append(f"{half}/ exists on one side only; not compared.")
    else:
        _locate_root(target, golden, "", located)
    if not located.jobs and not located.problems:
        located.problems.append(f"no dump.json or debug.json found under {target} and {golden}.")
    return located


def _locate_root(target: str, golden: str, prefix: str, located: Located) -> None:
    """A dump root of step folders, a step folder of rank folders, or a rank folder."""
    steps_t = set(_subdirs(target, STEP_DIR, "target", prefix, located))
    steps_g = set(_subdirs(golden, STEP_DIR, "golden", prefix, located))
    if steps_t or steps_g:
        for step in sorted(steps_t | steps_g, key=lambda s: int(s[4:])):
            if step not in steps_t or step not in steps_g:
                if _join(prefix, step) in located.linked:
                    continue
                side = "target" if step in steps_t else "golden"
                located.problems.append(f"{_join(prefix, step)} exists only in the {side} dump; not compared.")
                continue
            _locate_step(os.path.join(target, step), os.path.join(golden, step), _join(prefix, step), located)
        return
    _locate_step(target, golden, prefix, located)


def _locate_step(target: str, golden: str, out_subdir: str, located: Located) -> None:
    ranks_t = _subdirs(target, RANK_DIR, "target", out_subdir, located)
    ranks_g = _subdirs(golden, RANK_DIR, "golden", out_subdir, located)
    if ranks_t or ranks_g:
        for rank in sorted(set(ranks_t) | set(ranks_g), key=_rank_key):
            if rank not in ranks_t or rank not in ranks_g:
                if _join(out_subdir, rank) in located.linked:
                    continue
                side = "target" if rank in ranks_t else "golden"
                located.problems.append(f"{_join(out_subdir, rank)} exists only in the {side} dump; not compared.")
                continue
            _add_job(os.path.join(target, rank), os.path.join(golden, rank), out_subdir, rank, located)
        return
    procs_t = _subdirs(target, PROC_DIR, "target", out_subdir, located)
    procs_g = _subdirs(golden, PROC_DIR, "golden", out_subdir, located)
    if procs_t or procs_g:
        if len(procs_t) == 1 and len(procs_g) == 1:
            _add_job(os.path.join(target, procs_t[0]), os.path.join(golden, procs_g[0]), out_subdir, procs_t[0],
                     located)
        else:
            located.problems.append(f"{out_subdir or target}: expected exactly one proc<pid> folder on each side "
                                    f"(target has {len(procs_t)}, golden has {len(procs_g)}); not compared.")
        return
    if dump_file_in(target) or dump_file_in(golden):
        _add_job(target, golden, out_subdir, "", located)
        return
    located.problems.append(f"{out_subdir or target}: no rank*, proc* or step* folder and no dump.json; "
                            "nothing to compare.")


def _add_job(target_dir: str, golden_dir: str, out_subdir: str, rank: str, located: Located) -> None:
    name = _join(out_subdir, rank) or os.path.basename(target_dir)
    target_file, golden_file = dump_file_in(target_dir), dump_file_in(golden_dir)
    if target_file is None or golden_file is None:
        side = "target" if target_file is None else "golden"
        located.problems.append(f"{name}: the {side} folder holds no dump.json or debug.json; not compared.")
        return
    suffix = f"_{rank}" if rank else ""
    located.jobs.append(Job(target_file, golden_file, out_subdir, suffix, f"[{name}] "))


def _join(*parts: str) -> str:
    return "/".join(p for p in parts if p)


def stack_choice(stack_mode: bool, stack_path: str | None, jobs: list) -> str | None:
    """Where NPU_Stack_Info comes from (spec §1.3), as CompareOptions.stack: None = the stack.json beside each
    target dump when there is one; "" = none (a compare.json stack_path without -s); a path = that file.
    `-s` is an error when a compared pair has no stack file."""
    if stack_path is not None:
        if not stack_mode:
            return ""
        if len(jobs) != 1:
            raise UsageError(f"stack_path {stack_path} names one stack file; it applies to one pair of dump files, "
                             f"not {len(jobs)}.")
        return check_input_file(stack_path, "stack_path")
    if stack_mode:
        for job in jobs:
            beside = os.path.join(os.path.dirname(job.target), "stack.json")
            if not os.path.isfile(beside):
                raise PathError(f"-s/--stack_mode: no stack file for {job.target}: {beside} does not exist "
                                "(a compare.json can name one with stack_path).")
    return None
