"""The next dump, written for the user (issue 27): once -da knows the culprit, the next step is always the same, dump
the real tensors of that op and of the module that holds it, and nothing else. -da writes the collector
configuration for it beside its analysis file.

The configuration uses only the keys the collectors document (docs/dump.md): `task` tensor, the dump's own `level`,
its `step` and `rank`, `dump_path`, `async_dump`, and the task section's `scope`, `list` and `data_mode`. The
selection is a `list` of entry-name substrings that the reference's collector reads the same way: the culprit API's
forward and backward entries (`Functional.conv2d.1.forward`, `Functional.conv2d.1.backward`) and its innermost
module as a prefix (`Module.conv2.Conv2d.`, which matches its forward, backward and parameter-gradient entries; at
level mix every API called inside it as well). Each run gets its own file and its own dump folder (issue 34): `side_configs` gives the target run the target
dump's names and `<dump root>/target`, the golden run the golden dump's names (the same when the names agree; a
PyTorch golden of a MindSpore target gets its `Torch.*`/`Module.*` names) and `<dump root>/golden`, so that two
runs never write into the same rank folders and the compare that follows has one folder per side (`commands`).
"""

from __future__ import annotations

import json
import os
import re

from msprobe.compare.layer_mapping import module_scope
from msprobe.io import write_text

LEVELS = ("L0", "L1", "mix")
DUMP_PATH = "./next_dump"
MODULES = ("Module.", "Cell.")
SIDES = ("target", "golden")


def culprit_names(entry: str, target, golden_entry: str | None, golden, job) -> dict | None:
    """What the next dump needs to know of the culprit (computed where the dumps are read): its API and module on
    both sides, the dump's level, step and rank. None when the dump's level is not a collector level."""
    if target.level not in LEVELS:
        return None
    sides = [_names(entry, target)]
    if golden_entry is not None and golden_entry != entry:
        sides.append(_names(golden_entry, golden))
    rank = re.fullmatch(r"_rank(\d+)", job.suffix or "")
    return {"sides": sides, "level": target.level, "step": _step(job), "rank": [int(rank.group(1))] if rank else []}


def _names(entry: str, dump) -> dict:
    """{"api": the API entry or None, "module": the entry of the innermost module holding it (or the module entry
    itself) or None}. The parent construct.json gives is used only when it is a module's or cell's call entry of
    that dump (`Module.conv2.Conv2d.forward.0`, an entry of construct.json itself): any other text ("Cell", a name
    the dump lacks) would select more than the culprit."""
    if entry.startswith(MODULES):
        return {"api": None, "module": entry}
    construct = dump.construct or {}
    parent = construct.get(entry)
    if isinstance(parent, list):
        parent = parent[0] if parent else None
    is_module = isinstance(parent, str) and parent.startswith(MODULES) and parent in construct \
        and re.search(r"\.(forward|backward)\.\d+$", parent) is not None and module_scope(parent) is not None
    return {"api": entry, "module": parent if is_module else None}


def _step(job) -> list:
    """The step of the dump: from the output sub-folder of its job (step0, graph/step1) or the folders of its path."""
    for text in (job.out_subdir or "", os.path.dirname(os.path.abspath(job.target))):
        for part in reversed(re.split(r"[\\/]", text)):
            found = re.fullmatch(r"step(\d+)", part)
            if found:
                return [int(found.group(1))]
    return []


def selection(info: dict) -> list:
    """The `list` of the configuration: the culprit API's forward and backward entries and its module's prefix, for
    each side's names, without repeats."""
    out: list = []
    for names in info["sides"]:
        api, module = names["api"], names["module"]
        if api:
            head = _call(api)
            out += [head + ".forward", head + ".backward"]
        if module:
            out.append(module_prefix(module))
    return list(dict.fromkeys(out))


def _call(api: str) -> str:
    """`Functional.conv2d.1.forward` -> `Functional.conv2d.1` (the call, either direction)."""
    return api.rpartition(".")[0] if api.endswith((".forward", ".backward")) else api


def module_prefix(module: str) -> str:
    """`Module.conv2.Conv2d.forward.0` -> `Module.conv2.Conv2d.` (its forward, backward and parameter gradients);
    a name without a module path and class (`Cell.forward.0`) is kept whole: its prefix would be every cell."""
    if module_scope(module) is None:
        return module
    if ".parameters_grad" in module:
        return module.split(".parameters_grad")[0] + "."
    head, _, index = module.rpartition(".")
    if index.isdigit() and head.endswith((".forward", ".backward")):
        return head.rpartition(".")[0] + "."
    return module + "."


def what(info: dict) -> str:
    """The culprit as the console names it: `Functional.conv2d.1 and its module Module.conv2.Conv2d.forward.0`."""
    names = info["sides"][0]
    if names["api"] is None:
        return names["module"]
    api = _call(names["api"])
    return f"{api} and its module {names['module']}" if names["module"] else api


def config(info: dict, dump_path: str = DUMP_PATH) -> dict:
    """The collector configuration of the next dump (the names of every side of `info`)."""
    return {"task": "tensor", "dump_path": dump_path, "rank": info["rank"], "step": info["step"],
            "level": info["level"], "async_dump": False,
            "tensor": {"scope": [], "list": selection(info), "data_mode": ["all"]}}


def side_configs(info: dict, dump_root: str = DUMP_PATH) -> dict:
    """{"target": config, "golden": config}: each run's configuration, its own side's names only, writing into
    `<dump_root>/target` and `<dump_root>/golden`."""
    sides = info["sides"]
    return {side: config(dict(info, sides=[sides[min(index, len(sides) - 1)]]), os.path.join(dump_root, side))
            for index, side in enumerate(SIDES)}


def write_configs(info: dict, stem: str, dump_root: str) -> dict:
    """Write `<stem>_target.json` and `<stem>_golden.json`; {side: path}."""
    paths = {}
    for side, content in side_configs(info, dump_root).items():
        paths[side] = f"{stem}_{side}.json"
        write_text(paths[side], json.dumps(content, indent=2, ensure_ascii=False) + "\n")
    return paths


def compare_command(info: dict, dump_root: str, output_dir: str, table_format: str | None = None) -> str:
    """The compare of the two next dumps, as a shell command (the step folder of each side when the step is
    known; rank folders pair by rank, a single proc<pid> folder with the other side's): a plain compare of their
    real tensors, whose table and advisor name what differs in the culprit (no -da: the divergence is known),
    with --csv when `table_format` is "csv"."""
    import shlex

    step = f"step{info['step'][0]}" if info["step"] else ""
    target, golden = (os.path.join(dump_root, side, step) if step else os.path.join(dump_root, side) for side in SIDES)
    return (f"msprobe compare -tp {shlex.quote(target)} -gp {shlex.quote(golden)} -o {shlex.quote(output_dir)}"
            + (" --csv" if table_format == "csv" else ""))
