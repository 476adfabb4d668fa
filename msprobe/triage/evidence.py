"""What triage reads in a dump besides the compare: where a step's dump is, the culprit's entry on each side
(its arguments, dtypes and source line), and the first op whose outputs turn NaN/Inf from finite inputs."""

from __future__ import annotations

import math
import os
import re

from msprobe.dump.reader import SENTINELS, load_json

_STEP = re.compile(r"step(\d+)")
_NON_FINITE_TEXT = frozenset({"nan", "inf", "-inf", "infinity", "-infinity"})


def step_dumps(dump_root: str, step: int) -> list:
    """The process folders (rank<N> or proc<pid>) of one step of a dump root that hold a dump.json, sorted."""
    folder = os.path.join(dump_root, f"step{step}")
    if not os.path.isdir(folder):
        return []
    return sorted(os.path.join(folder, name) for name in os.listdir(folder)
                  if os.path.isfile(os.path.join(folder, name, "dump.json")))


def compare_paths(target_root: str, golden_root: str, step: int) -> tuple | None:
    """What to hand compare for one step: the two dump.json files when each side has one process (proc<pid>
    folders have different names), else the two step folders (rank folders pair by rank). None when a side has
    no dump."""
    target, golden = step_dumps(target_root, step), step_dumps(golden_root, step)
    if not target or not golden:
        return None
    if len(target) == 1 and len(golden) == 1:
        return os.path.join(target[0], "dump.json"), os.path.join(golden[0], "dump.json")
    return os.path.dirname(target[0]), os.path.dirname(golden[0])


def dump_file(path: str, rank: int | None) -> str:
    """The dump.json of `rank` (or the only one) under a path compare was given (a file or a step folder)."""
    if os.path.isfile(path):
        return path
    folders = sorted(os.listdir(path))
    wanted = f"rank{rank}" if rank is not None else None
    for name in folders:
        if (wanted is None or name == wanted) and os.path.isfile(os.path.join(path, name, "dump.json")):
            return os.path.join(path, name, "dump.json")
    return os.path.join(path, folders[0], "dump.json") if folders else path


def load_dump(path: str) -> dict:
    content = load_json(path, "dump.json")
    return content if isinstance(content, dict) else {}


def call_of(entry: str) -> str:
    """`Functional.conv2d.1.forward` -> `Functional.conv2d.1`."""
    return entry.rpartition(".")[0] if entry.endswith((".forward", ".backward")) else entry


def forward_of(entry: str) -> str:
    return call_of(entry) + ".forward"


def signature(record) -> list:
    """The arguments of a forward entry as comparable leaves: (path, kind, dtype, shape, value) where value is the
    non-tensor argument's value (None for tensors: their values are the compare's business)."""
    leaves: list = []

    def walk(node, path):
        if isinstance(node, dict) and "type" in node:
            kind = node.get("type")
            tensor = "shape" in node and ("Max" in node or "md5" in node or "data_name" in node)
            leaves.append((path, kind, node.get("dtype"), tuple(node.get("shape") or ()) if tensor else None,
                           None if tensor else _plain(node.get("value"))))
        elif isinstance(node, dict):
            for key in sorted(node):
                walk(node[key], f"{path}.{key}")
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, f"{path}.{index}")
        elif node is None:
            leaves.append((path, "None", None, None, None))

    if isinstance(record, dict):
        walk(record.get("input_args", []), "args")
        walk(record.get("input_kwargs", {}), "kwargs")
    return leaves


def _plain(value):
    return SENTINELS.get(value, value) if isinstance(value, str) else value


def tensor_dtypes(record) -> list:
    """The dtypes of a forward entry's tensor arguments, then of its outputs, spelled without their framework
    (`torch.float32`, `Float32` -> `float32`)."""
    inputs = [leaf[2] for leaf in signature(record) if leaf[3] is not None]
    return [str(d).rpartition(".")[2].lower() for d in inputs + output_dtypes(record) if d]


def output_dtypes(record) -> list:
    return [leaf.get("dtype") for leaf in _records(record.get("output") if isinstance(record, dict) else None)]


def _records(node) -> list:
    """The argument records ({"type": ...}) of a nested input/output structure, in order."""
    if isinstance(node, dict) and "type" in node:
        return [node]
    if isinstance(node, dict):
        return [leaf for key in sorted(node) for leaf in _records(node[key])]
    if isinstance(node, list):
        return [leaf for value in node for leaf in _records(value)]
    return []


def _stats_of(node) -> list:
    return [leaf[key] for leaf in _records(node) for key in ("Max", "Min", "Mean", "Norm") if key in leaf]


def _non_finite(value) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, str):
        return value in SENTINELS or value.strip().lower() in _NON_FINITE_TEXT
    return False


def first_non_finite(content: dict) -> str | None:
    """The first forward entry (dump order) whose outputs hold NaN/Inf while its inputs are finite: the op that
    produces them. None when every output is finite."""
    data = content.get("data") if isinstance(content, dict) else None
    if not isinstance(data, dict):
        return None
    for name, record in data.items():
        if not name.endswith(".forward") or not isinstance(record, dict):
            continue
        if any(_non_finite(v) for v in _stats_of(record.get("output"))):
            inputs = _stats_of(record.get("input_args")) + _stats_of(record.get("input_kwargs"))
            if not any(_non_finite(v) for v in inputs):
                return name
    return None


def is_module(entry: str) -> bool:
    return entry.startswith(("Module.", "Cell."))


def stack_of(dump_path: str, entry: str) -> list:
    """The source lines recorded for `entry` in the stack.json beside dump.json ([] when none)."""
    path = os.path.join(os.path.dirname(dump_path), "stack.json")
    if not os.path.isfile(path):
        return []
    content = load_json(path, "stack.json")
    if isinstance(content, dict):
        for key, value in content.items():           # {"0": [[names], [lines]]} or {name: [lines]}
            if key == entry and isinstance(value, list):
                return [str(line) for line in value]
            if isinstance(value, list) and len(value) == 2 and isinstance(value[0], list) and entry in value[0]:
                return [str(line) for line in value[1]]
    return []


def user_line(stack: list) -> str:
    """The innermost line of the user's code in a stack (not torch's, mindspore's or ours)."""
    skip = ("site-packages", "dist-packages", "/torch/", "/mindspore/", "/msprobe/")
    chosen = next((line for line in stack if not any(part in line for part in skip)), stack[0] if stack else "")
    return " ".join(chosen.split())
