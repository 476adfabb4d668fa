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
    """The forward entry of a call: `Functional.conv2d.1.backward` -> `Functional.conv2d.1.forward`; a module's
    `Module.a.B.backward.0` -> `Module.a.B.forward.0` (a module's entry ends with its call count)."""
    if is_module(entry):
        head, direction, count = entry.rpartition(".")[0].rpartition(".")[0], entry.rsplit(".", 2)[-2], \
            entry.rpartition(".")[2]
        return f"{head}.forward.{count}" if direction in ("forward", "backward") else entry
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
    return [dtype_name(d) for d in inputs + output_dtypes(record) if d]


def dtype_name(dtype) -> str:
    """A dtype without its framework: `torch.float32`, `Float32` -> `float32`."""
    return str(dtype).rpartition(".")[2].lower()


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


_LIBRARY_PARTS = ("site-packages", "dist-packages", "/torch/", "/mindspore/", "<frozen ", "<string>")
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))     # msprobe/
_FRAME = re.compile(r'^\s*File "?(?P<file>.+?)"?, line (?P<line>\d+), in (?P<function>[^,\s]+)')


def _own_parts() -> tuple:
    """`/msprobe/<sub-package or module>` for every entry of msprobe's package folder: a frame of msprobe's own
    code, wherever it is installed (a checkout's path, a wheel's site-packages), but not a user's folder that is
    merely named msprobe."""
    try:
        names = sorted(name for name in os.listdir(_PACKAGE) if not name.startswith((".", "__")))
    except OSError:
        names = []
    return tuple(f"/msprobe/{name.removesuffix('.py')}" for name in names)


_OWN = _own_parts()


def is_user_frame(line: str) -> bool:
    """A frame of the user's code: not the Python library's, torch's, mindspore's or msprobe's (MindSpore stacks
    begin with MindSpore's and the collector's hook frames; the user's come after them)."""
    text = line.replace("\\", "/")
    return not any(part in text for part in _LIBRARY_PARTS) and not any(
        part + "/" in text or part + ".py" in text for part in _OWN)


def user_line(stack: list) -> str:
    """The innermost line of the user's code in a stack (not torch's, mindspore's or ours); "" when it holds
    none."""
    chosen = next((line for line in stack if is_user_frame(str(line))), "")
    return " ".join(str(chosen).split())


def frame_file(line: str) -> str | None:
    """The file of a stack line (`File /a/train.py, line 16, in forward, ...`), None when it names none."""
    found = _FRAME.match(str(line))
    return found.group("file") if found else None


def culprit_stack(dump_path: str, entry: str, stack: list | None = None) -> list:
    """The stack of a culprit: its own (given or from stack.json), else for a backward entry its forward entry's
    (a backward runs from the autograd engine: the forward's call is the user's line)."""
    found = list(stack or []) or stack_of(dump_path, entry)
    if not found and (entry.endswith(".backward") or ".backward." in entry):
        found = stack_of(dump_path, entry.replace(".backward.", ".forward.") if ".backward." in entry
                         else entry[:-len("backward")] + "forward")
    return found


def module_class(entry: str) -> tuple | None:
    """(class name, method name) of a module or cell entry: `Module.block.Block.forward.0` -> (Block, forward),
    `Cell.proj.NoisyDense.forward.0` -> (NoisyDense, construct); None for another name."""
    parts = entry.split(".")
    if len(parts) < 4 or parts[0] not in ("Module", "Cell") or parts[-2] not in ("forward", "backward"):
        return None
    return parts[-3], "construct" if parts[0] == "Cell" else "forward"


def descendants(construct: dict, module: str) -> list:
    """The entries of a construct.json whose chain of parents reaches `module`, in the file's order."""
    found = []
    for name, parent in construct.items():
        seen = 0
        while parent is not None and seen < 1000:
            if isinstance(parent, list):
                parent = parent[0] if parent else None
            if parent == module:
                found.append(name)
                break
            parent, seen = construct.get(parent) if isinstance(parent, str) else None, seen + 1
    return found


def module_definition(dump_path: str, module: str) -> str:
    """Where a module's (cell's) forward (construct) is defined: `File <file>, line <n>, def forward of class
    <Class>`, found in the files of the user's frames of the calls made inside it (and of its own call), parsed as
    Python without running them; else the user's line inside it that calls its first child; "" when none."""
    named = module_class(module)
    if named is None:
        return ""
    construct = load_dump(os.path.join(os.path.dirname(dump_path), "construct.json"))
    inner = [stack_of(dump_path, name) for name in descendants(construct, module)[:50]]
    frames = [line for stack in inner for line in stack if is_user_frame(str(line))]
    frames += [line for line in stack_of(dump_path, module) if is_user_frame(str(line))]
    files = list(dict.fromkeys(path for path in map(frame_file, frames) if path))
    for path in files[:20]:
        line = _definition_line(path, *named)
        if line:
            return f"File {path}, line {line}, def {named[1]} of class {named[0]}"
    first_inner = next((user_line(stack) for stack in inner if user_line(stack)), "")
    return first_inner


def _definition_line(path: str, class_name: str, method: str) -> int | None:
    """The line of `def <method>` in `class <class_name>` of a Python file, read as text and parsed (never run);
    None when the file cannot be read or holds no such method."""
    import ast

    try:
        if os.path.getsize(path) > 20 * 1024 * 1024:
            return None
        with open(path, encoding="utf-8", errors="replace") as handle:
            tree = ast.parse(handle.read(), path)
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == method:
                    return item.lineno
    return None


def calls_inside(target_construct: dict, golden_construct: dict, module: str, golden_module: str | None = None) -> str:
    """The APIs one run calls directly inside a module and the other does not (or calls more often), as a phrase:
    `the golden calls Tensor.__add__ once inside it, the target never`; "" when both call the same."""
    from collections import Counter

    def direct(construct: dict, parent: str) -> Counter:
        return Counter(call_of(name).rpartition(".")[0] for name, owner in construct.items()
                       if _parent(owner) == parent and name.endswith(".forward") and not is_module(name))

    target, golden = direct(target_construct, module), direct(golden_construct, golden_module or module)
    parts = []
    for api in sorted(set(target) | set(golden)):
        if target[api] != golden[api]:
            parts.append(f"{api} {_times(golden[api])} in the golden, {_times(target[api])} in the target")
    return ("calls made directly inside it: " + "; ".join(parts[:3])) if parts else ""


def _parent(owner):
    return (owner[0] if owner else None) if isinstance(owner, list) else owner


def _times(count: int) -> str:
    return {0: "never", 1: "once", 2: "twice"}.get(count, f"{count} times")
