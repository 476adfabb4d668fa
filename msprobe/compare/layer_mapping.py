"""Layer mapping (-lm, spec §3.9.4, DECISIONS 12): place every entry in the module tree of its run (from
construct.json; an API without a parent there by the framework function that called it, from stack.json),
translate target scopes into golden scopes with the yaml, pair entries by position inside the translated node,
and pair their items by name suffix. The result is a data mapping, in which every item of a placed target entry
that finds no partner maps to N/A (it stays unmatched, as in the reference)."""

from __future__ import annotations

from dataclasses import dataclass, field

from msprobe.compare.error_origin import numel
from msprobe.compare.name_rules import golden_op, golden_suffix, out_of_place
from msprobe.dump.flatten import Items
from msprobe.dump.naming import BACKWARD, FORWARD, PARAMETERS_GRAD
from msprobe.errors import MsprobeError
from msprobe.names import counter, error_line

ROOT_TYPE = "TopLayer"
MODULE_PREFIXES = ("Cell.", "Module.")
NA = "N/A"
# Stack lines (innermost call first) of the dump tool: its API wrapper is a `...Template(` line; the caller's
# region ends at the enclosing cell's construct (MindSpore) or module's forward/backward (PyTorch).
FRAMEWORK_FILES = ("site-packages/torch", "package/torch", "site-packages/mindspore", "package/mindspore")
REGION_END = {"mindspore": ("construct",), "pytorch": ("in forward,", "in backward,")}
SKIPPED_FILES = ("msprobe", "MindSpeed")
SKIPPED_FUNCTIONS = ("construct", "__call__")


def framework_caller(lines, framework: str) -> str:
    """The framework function an API was called from, when the user's code did not call it directly: in the
    stack region after the dump tool's Template line (up to the enclosing construct/forward), the outermost of the
    framework frames before the first user frame (e.g. MindSpore's `_tensor_getitem` for an add inside
    indexing); "" when the user's code called the API, or for a frame of msprobe or a construct/__call__."""
    if not isinstance(lines, list):
        return ""
    ends = REGION_END.get(framework, REGION_END["pytorch"])
    start, stop = -1, len(lines)
    for index, line in enumerate(lines):
        if not isinstance(line, str):
            return ""
        if "Template" in line:
            start = index
        elif start >= 0 and any(end in line for end in ends):
            stop = index
            break
    caller = ""
    for line in lines[start + 1:stop]:
        if not any(marker in line.split(",")[0] for marker in FRAMEWORK_FILES):
            break
        caller = line
    fields = caller.split(",")
    if len(fields) < 3 or any(marker in fields[0] for marker in SKIPPED_FILES) \
            or any(name in fields[2] for name in SKIPPED_FUNCTIONS):
        return ""
    words = fields[2].split()
    return words[1] if len(words) > 1 else ""


@dataclass
class ModuleNode:
    type: str
    entries: dict = field(default_factory=dict)   # direction -> entry names in dump order


def module_scope(name: str) -> tuple[tuple, str] | None:
    """(path segments, class) of a Cell/Module entry name."""
    parts = name.split(".")
    if parts[-1] == PARAMETERS_GRAD:
        body = parts[1:-1]
    elif len(parts) >= 2 and (parts[-2] == PARAMETERS_GRAD or parts[-2] in (FORWARD, BACKWARD)):
        body = parts[1:-2]
    else:
        return None
    if len(body) < 2:
        return None
    return tuple(body[:-1]), body[-1]


def _parent_of(name: str, construct: dict):
    parent = construct.get(name)
    if parent is None and f".{BACKWARD}" in name:
        parent = construct.get(name.replace(f".{BACKWARD}", f".{FORWARD}"))
    if isinstance(parent, list):
        parent = parent[0] if parent else None
    return parent if isinstance(parent, str) else None


def entry_scopes(items: Items, construct: dict, stacks: dict | None = None, framework: str = "") -> dict:
    """entry name -> (scope path, direction, type) for every entry that can be placed. An API entry without a
    parent module in construct.json is placed under the framework function that called it (framework_caller of
    its stack, a backward entry by its forward entry's stack), when there is one."""
    stacks = stacks or {}
    scopes = {}
    for name, parts in zip(items.entry_names, items.entry_parts):
        segments = name.split(".")
        if len(segments) < 4:
            continue
        if name.startswith(MODULE_PREFIXES):
            placed = module_scope(name)
            if placed is None:
                continue
            path, kind = placed
        else:
            kind = out_of_place(golden_op(name, segments[-3]))   # its PyTorch function's name: layer_norm, linear
            parent = _parent_of(name, construct)
            placed = module_scope(parent) if parent and parent.startswith(MODULE_PREFIXES) else None
            caller = "" if parent else framework_caller(
                stacks.get(name.replace(f".{BACKWARD}", f".{FORWARD}") if parts.direction == BACKWARD else name),
                framework)
            path = (placed[0] if placed else ()) + ((caller,) if caller else ()) + (kind,)
        scopes[name] = (path, parts.direction, kind)
    return _renumber_parallel_layers(scopes, construct)


def _renumber_parallel_layers(scopes: dict, construct: dict | None = None) -> dict:
    """Under every ParallelTransformer, the children of `layers` count from 0 (pipeline stages). A
    ParallelTransformer is known from its own entry or, when the dump records none (its layers only), from the
    parents construct.json names."""
    owners = {path for path, _, kind in scopes.values() if kind == "ParallelTransformer"}
    parents = {p for v in (construct or {}).values() for p in (v if isinstance(v, list) else [v]) if isinstance(p, str)}
    for parent in parents:
        placed = module_scope(parent) if parent.startswith(MODULE_PREFIXES) else None
        if placed is not None and placed[1] == "ParallelTransformer":
            owners.add(placed[0])
    if not owners:
        return scopes
    lowest: dict = {}
    for path, _, _ in scopes.values():
        for owner in owners:
            depth = len(owner)
            if path[:depth] == owner and len(path) > depth + 1 and path[depth] == "layers" \
                    and counter(path[depth + 1]) is not None:
                lowest[owner] = min(lowest.get(owner, 10 ** 9), counter(path[depth + 1]))
    renamed = {}
    for name, (path, direction, kind) in scopes.items():
        for owner, base in lowest.items():
            depth = len(owner)
            if path[:depth] == owner and len(path) > depth + 1 and path[depth] == "layers" \
                    and counter(path[depth + 1]) is not None:
                path = path[:depth + 1] + (str(counter(path[depth + 1]) - base),) + path[depth + 2:]
        renamed[name] = (path, direction, kind)
    return renamed


def build_tree(scopes: dict) -> dict:
    tree: dict = {(): ModuleNode(ROOT_TYPE)}
    for name, (path, direction, kind) in scopes.items():
        for depth in range(1, len(path)):
            tree.setdefault(path[:depth], ModuleNode(path[depth - 1]))
        node = tree.setdefault(path, ModuleNode(kind))
        node.type = kind
        node.entries.setdefault(direction, []).append(name)
    return tree


def _is_name(value) -> bool:
    """A type or child name of a layer mapping: a text, or a number YAML read from a bare digit (`5: 0`)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def parse_layer_mapping(documents: list, path: str) -> dict:
    """{type name: {target child: golden child}}. Every name must be a text (or a bare number): any other value
    (a list, a mapping, nested aliases of a YAML "billion laughs") is refused before it is turned into text."""
    mapping: dict = {}
    for document in documents:
        if not isinstance(document, dict):
            raise MsprobeError(f"{path}: a layer mapping must map type names to {{target child: golden child}}.")
        for type_name, children in document.items():
            if not _is_name(type_name):
                raise MsprobeError(f"{path}: a type name must be a text, got a {type(type_name).__name__}.")
            if not isinstance(children, dict):
                raise MsprobeError(f"{path}: the entry of {error_line(str(type_name))!r} must map target children to "
                                   "golden children.")
            key = ROOT_TYPE if type_name == "Cell" else str(type_name)
            table = mapping.setdefault(key, {})
            for child, value in children.items():
                if not _is_name(child) or not _is_name(value):
                    wrong = child if not _is_name(child) else value
                    raise MsprobeError(f"{path}: the entry of {error_line(str(type_name))!r} must map child names to "
                                       f"child names (texts), got a {type(wrong).__name__}.")
                table[str(child)] = str(value).split("(", 1)[0].strip()
    return mapping


def translate(path: tuple, tree: dict, mapping: dict) -> tuple:
    """The golden scope of a target scope: at each node the mapping of its type renames the next segment(s)."""
    out: list = []
    position = 0
    while position < len(path):
        node = tree.get(path[:position])
        table = mapping.get(node.type if node else "", {})
        for key in sorted(table, key=lambda k: -k.count(".")):
            segments = tuple(key.split("."))
            if path[position:position + len(segments)] == segments:
                out.extend(table[key].split("."))
                position += len(segments)
                break
        else:
            out.append(path[position])
            position += 1
    return tuple(out)


def generate_data_mapping(target: Items, golden: Items, target_construct: dict, golden_construct: dict,
                          mapping: dict, target_stacks: dict | None = None, golden_stacks: dict | None = None,
                          frameworks: tuple = ("mindspore", "pytorch")) -> dict:
    """Target item name -> golden item name (N/A without a partner) for every item of every placed entry."""
    target_scopes = entry_scopes(target, target_construct, target_stacks, frameworks[0])
    golden_tree = build_tree(entry_scopes(golden, golden_construct, golden_stacks, frameworks[1]))
    target_tree = build_tree(target_scopes)
    golden_items = _items_by_entry(golden)
    target_items = _items_by_entry(target)
    shapes = (dict(zip(target.name, target.shape)), dict(zip(golden.name, golden.shape)))
    data: dict = {}
    for name, (path, direction, _) in target_scopes.items():
        siblings = target_tree[path].entries[direction]
        position = siblings.index(name)
        partner_node = golden_tree.get(translate(path, target_tree, mapping))
        partners = partner_node.entries.get(direction, []) if partner_node else []
        by_suffix = golden_items.get(partners[position], {}) if position < len(partners) else {}
        for suffix, item_name in target_items.get(name, {}).items():
            partner = golden_suffix(name, suffix)
            golden_name = NA if partner is None else by_suffix.get(partner, NA)
            if golden_name != NA and (partner != suffix or name.startswith("Primitive.")):
                golden_name = _same_size(item_name, golden_name, suffix, by_suffix, shapes)
            data[item_name] = golden_name
    return data


def _same_size(target_name: str, golden_name: str, suffix: str, by_suffix: dict, shapes: tuple) -> str:
    """A primitive's item, or one a rule renames (name_rules.PLACED_RULES), pairs with the golden item the rule names
    when the two hold as many elements; else with the one golden item of its kind (outputs: gradients) of its shape,
    or else of its element count, N/A if none or several. PyTorch records a linear's gradients in the order of its
    inputs (x, W, b) after a linear on more than two dimensions, in addmm's (b, x, W transposed) after one on two."""
    t_shapes, g_shapes = shapes
    shape = t_shapes.get(target_name)
    size = numel(shape)
    if size != size or numel(g_shapes.get(golden_name)) == size:
        return golden_name
    kind = suffix.rsplit(".", 1)[0] + "."
    for same in (lambda g: g_shapes.get(g) == shape, lambda g: numel(g_shapes.get(g)) == size):
        found = [g for s, g in by_suffix.items() if s.startswith(kind) and same(g)]
        if found:
            return found[0] if len(found) == 1 else NA
    return NA


def _items_by_entry(items: Items) -> dict:
    """entry name -> {item name suffix after the entry name: item name}."""
    out: dict = {}
    for name, entry in zip(items.name, items.entry):
        entry_name = items.entry_names[entry]
        if name.startswith(entry_name):
            out.setdefault(entry_name, {})[name[len(entry_name):]] = name
    return out
