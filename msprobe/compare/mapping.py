"""Cross-framework name mapping (spec §3.9, DECISIONS 9, 11): API, cell and data mappings that turn target
(MindSpore) item names into golden (PyTorch) compare keys. Strategies compose; see `MappingSet.key`."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache

from msprobe.compare.name_rules import FUNCTION_NAMES, LAYOUT_OPS, PARAMETER_NAMES, PRIMITIVE_RULES, ApiRule
from msprobe.dump.paths import load_yaml
from msprobe.dump.reader import read_stack
from msprobe.errors import MsprobeError
from msprobe.io import write_text
from msprobe.log import get_logger
from msprobe.names import counter, printable
from msprobe.substrings import SubstringIndex
from msprobe.table.cells import NA

DIRECTION_MARKERS = (".forward.", ".backward.", ".parameters_grad")
INDEX_KEYS = {"input": ("ms_args", "pt_args"), "output": ("ms_outputs", "pt_outputs"),
              "parameters": ("ms_parameters", "pt_parameters"),
              "parameters_grad": ("ms_parameters_grad", "pt_parameters_grad")}
SINGULAR = {"ms_output": "ms_outputs", "pt_output": "pt_outputs"}
ALLOWED_KEYS = {"ms_api", "pt_api"} | {k for pair in INDEX_KEYS.values() for k in pair} | set(SINGULAR)


@lru_cache(maxsize=1)
def builtin_api_table() -> dict:
    """The shipped MindSpore -> PyTorch API table (`{api_type}.{api_name}` on both sides)."""
    import yaml

    path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "ms_to_pt_api.yaml")
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle) or {}


def parse_api_rules(documents: list, path: str) -> list:
    """Custom API mapping in any of the three shapes (DECISIONS 11): one mapping, a list, several documents."""
    entries = []
    for document in documents:
        if isinstance(document, dict):
            entries.append(document)
        elif isinstance(document, list):
            entries.extend(document)
        else:
            raise MsprobeError(f"{path}: an api mapping must be a mapping or a list of mappings.")
    rules = []
    for number, entry in enumerate(entries, start=1):
        where = f"{path}: entry {number}"
        if not isinstance(entry, dict):
            raise MsprobeError(f"{where} must be a mapping with ms_api and pt_api.")
        unknown = set(entry) - ALLOWED_KEYS
        if unknown:
            raise MsprobeError(f"{where} ({entry.get('ms_api')}) has unknown keys: {', '.join(sorted(map(str, unknown)))}.")
        if not isinstance(entry.get("ms_api"), str) or not isinstance(entry.get("pt_api"), str):
            raise MsprobeError(f"{where} needs ms_api and pt_api as '{{api_type}}.{{api_name}}' texts.")
        where = f"{where} ({entry['ms_api']} -> {entry['pt_api']})"
        for singular, plural in SINGULAR.items():
            if singular in entry and plural in entry:
                raise MsprobeError(f"{where}: give {plural} or {singular}, not both.")
        normalised = {SINGULAR.get(k, k): v for k, v in entry.items()}
        indices = {}
        for state, (ms_key, pt_key) in INDEX_KEYS.items():
            ms_list, pt_list = normalised.get(ms_key), normalised.get(pt_key)
            if ms_list is None and pt_list is None:
                continue
            if not isinstance(ms_list, list) or not isinstance(pt_list, list):
                raise MsprobeError(f"{where}: {ms_key} and {pt_key} must both be lists.")
            if len(ms_list) != len(pt_list):
                raise MsprobeError(f"{where}: {ms_key} and {pt_key} have different lengths "
                                   f"({len(ms_list)} and {len(pt_list)}).")
            for key, values in ((ms_key, ms_list), (pt_key, pt_list)):
                if any(not isinstance(v, int) or isinstance(v, bool) or v < 0 for v in values):
                    raise MsprobeError(f"{where}: {key} must hold non-negative integer indices.")
                if len(set(values)) != len(values):
                    raise MsprobeError(f"{where}: {key} repeats an index.")
            indices[state] = {str(a): str(b) for a, b in zip(ms_list, pt_list)}
        rules.append(ApiRule(entry["ms_api"], entry["pt_api"], indices))
    return rules


def check_rule_arity(rules: list, target_items, golden_items) -> None:
    """Indices must exist: an index beyond every recorded argument of the API is an error naming the entry."""
    for rule in rules:
        for items, api, side in ((target_items, rule.ms_api, 0), (golden_items, rule.pt_api, 1)):
            seen: dict = {}
            for name, state in zip(items.name, items.state):
                if name.startswith(api + "."):
                    rest = name[len(api) + 1:].split(".")
                    marker = next((i for i, part in enumerate(rest) if part in ("input", "output", "parameters")), None)
                    if marker is not None and marker + 1 < len(rest) and counter(rest[marker + 1]) is not None:
                        seen.setdefault(state, set()).add(counter(rest[marker + 1]))
            for state, mapping in rule.indices.items():
                if state not in seen:
                    continue
                limit = max(seen[state])
                values = [int(k if side == 0 else v) for k, v in mapping.items()]
                bad = [v for v in values if v > limit]
                if bad:
                    raise MsprobeError(f"api mapping {rule.ms_api} -> {rule.pt_api}: {state} index {bad[0]} is out "
                                       f"of range for {api if side == 0 else rule.pt_api} (recorded indices 0..{limit}).")


def _split_api(name: str) -> tuple[str, str]:
    """('Mint.add', rest) for 'Mint.add.0.forward...'; Primitive entries use three segments."""
    parts = name.split(".", 3 if name.startswith("Primitive.") else 2)
    if len(parts) < 3:
        return name, ""
    head = ".".join(parts[:-1])
    return head, parts[-1]


def map_api_name(name: str, table: dict) -> str:
    """Built-in API mapping of one item name (spec §3.9.1)."""
    if name.startswith(("Cell.", "Module.")):
        return name
    head, _, rest = name.partition(".")
    api = f"{head}.{rest.partition('.')[0]}"
    if api in FUNCTION_NAMES:
        return FUNCTION_NAMES[api] + name[len(api):]
    api_type = head
    if api_type == "Mint":
        return "Torch" + name[4:]
    if api_type == "MintFunctional":
        return "Functional" + name[len("MintFunctional"):]
    parts = name.split(".", 2)
    if len(parts) >= 2:
        api = f"{parts[0]}.{parts[1]}"
        mapped = table.get(api)
        if mapped:
            return mapped + name[len(api):]
    return name



def map_primitive(name: str, state: str) -> str | None:
    """The built-in mapping of a Primitive item (PRIMITIVE_RULES); None for another primitive or name."""
    if not name.startswith("Primitive."):
        return None
    head, rest = _split_api(name)
    rule = PRIMITIVE_RULES.get(head.rpartition(".")[2])
    if rule is None:
        return None
    parts = rest.split(".")
    backward = len(parts) > 1 and parts[1] == "backward"
    mapping = rule.indices.get(("grad_" if backward else "") + state)
    if mapping is not None and len(parts) > 3 and counter(parts[3]) is not None:
        if parts[3] not in mapping:
            return name + ".abandoned"
        parts[3] = mapping[parts[3]]
    return rule.pt_api + "." + ".".join(parts)


def map_custom_api(name: str, state: str, rules: list) -> str | None:
    """Custom API mapping of one item name; None when no rule covers its API."""
    for rule in rules:
        if name.startswith("Primitive."):
            head, rest = _split_api(name)
            if not head.startswith(rule.ms_api + ".") and head != rule.ms_api:
                continue
            entry_rest = rest
            renamed_head = rule.pt_api
        else:
            if not name.startswith(rule.ms_api + "."):
                continue
            entry_rest = name[len(rule.ms_api) + 1:]
            renamed_head = rule.pt_api
        if ".backward." in name and state in ("input", "output"):
            # backward inputs are the gradients of the forward outputs, backward outputs those of the inputs
            state = "output" if state == "input" else "input"
        mapping = rule.indices.get(state)
        parts = entry_rest.split(".")
        marker = next((i for i, part in enumerate(parts) if part in ("input", "output", "parameters", "kwargs")), None)
        if mapping is not None and marker is not None and marker + 1 < len(parts) and counter(parts[marker + 1]) is not None:
            index = parts[marker + 1]
            if index not in mapping:
                return name + ".abandoned"        # an argument the mapping leaves out never matches
            parts[marker + 1] = mapping[index]
        return renamed_head + "." + ".".join(parts)
    return None


def parse_text_mapping(documents: list, path: str, what: str) -> dict:
    """A flat yaml mapping of texts to texts (cell mapping, data mapping), over any number of documents."""
    mapping: dict = {}
    for document in documents:
        if not isinstance(document, dict):
            raise MsprobeError(f"{path}: a {what} must be a mapping of target names to golden names.")
        for key, value in document.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise MsprobeError(f"{path}: {what} entry {key!r}: both sides must be texts.")
            mapping[key] = value
    return mapping


class CellMapping:
    """A cell mapping's table (target text: golden text) and how it renames a cell's `{cell_path}.{Class}`: the whole
    text when it is a key, else every key occurring in it, in the table's order, each replacing its first occurrence
    in the text as the keys before it left it (spec §3.9.3). The keys are found through a SubstringIndex and each
    cell's result is kept: a lookup, not a pass over every key per item (a 50,000-key yaml cost ~3 ms per name)."""

    def __init__(self, table: dict):
        self.table = table
        self.keys = [key for key in table if key]
        self.rank = {key: i for i, key in enumerate(self.keys)}
        self.index = SubstringIndex(self.keys)
        self.done: dict = {}

    def __bool__(self) -> bool:
        return bool(self.table)

    def rename(self, cell: str) -> str:
        if cell in self.table:
            return self.table[cell]
        renamed = self.done.get(cell)
        if renamed is None:
            renamed, last = cell, -1
            while True:
                later = [self.rank[key] for key in self.index.find(renamed) if self.rank[key] > last]
                if not later:
                    break
                last = min(later)
                key = self.keys[last]
                renamed = renamed.replace(key, self.table[key], 1)
            self.done[cell] = renamed
        return renamed


def map_cell_name(name: str, mapping) -> str:
    """Cell -> Module, then the cell mapping (a CellMapping, or its table as a dict) on the `{cell_path}.{Class}`
    part."""
    if not name.startswith("Cell."):
        return name
    renamed = "Module" + name[4:]
    if not mapping:
        return renamed
    start = renamed.find(".") + 1
    stops = [renamed.find(marker, start) for marker in DIRECTION_MARKERS]
    stops = [s for s in stops if s >= 0]
    if not stops:
        return renamed
    stop = min(stops)
    table = mapping if isinstance(mapping, CellMapping) else CellMapping(mapping)
    return renamed[:start] + table.rename(renamed[start:stop]) + renamed[stop:]


# Built-in mapping of the MindSpore cell and parameter names that differ from PyTorch's (-am and -cm without a
# yaml; a -cm yaml's entries come first): the cell class (the last segment of the cell's path) and the parameter
# names of nn.Dense, nn.LayerNorm, nn.BatchNorm*, nn.Embedding (name_rules.PARAMETER_NAMES).
CELL_CLASSES = {"Dense": "Linear", "SequentialCell": "Sequential", "CellList": "ModuleList", "CellDict": "ModuleDict"}
_PARAMETER_MARKERS = (".parameters.", ".parameters_grad.")


def map_cell_defaults(name: str) -> str:
    """A Module key (map_cell_name's output) with the built-in cell class and parameter names applied."""
    start = name.find(".") + 1
    stops = [s for s in (name.find(marker, start) for marker in DIRECTION_MARKERS) if s >= 0]
    if not stops:
        return name
    stop = min(stops)
    path, dot, cls = name[start:stop].rpartition(".")
    if dot and cls in CELL_CLASSES:
        name = name[:start] + path + "." + CELL_CLASSES[cls] + name[stop:]
    if any(marker in name for marker in _PARAMETER_MARKERS):
        head, dot, leaf = name.rpartition(".")
        if leaf in PARAMETER_NAMES:
            name = head + dot + PARAMETER_NAMES[leaf]
    return name


# Why a target row of a MindSpore dump has no PyTorch partner (the Err_message note of an unmatched row)
UNMATCHED_CELL = ("note: not compared: the golden run has no module at this place (a renamed layer: -cm with a yaml, "
                  "or -lm).")
UNMATCHED_PRIMITIVE = ("note: not compared: a MindSpore primitive that no PyTorch op of the golden run stands for "
                       "(nn.Dense's Shape, Reshape, MatMul and BiasAdd are one linear there); its cell (mix) or "
                       "-lm pairs it.")
UNMATCHED_ABSENT = ("note: not compared: the golden run records no {op} call (PyTorch's collector dumps casts, "
                    "reshapes and other low-risk APIs at risk_level ALL only).")
UNMATCHED_LEFT_OUT = ("note: not compared: an argument, output or gradient that the PyTorch op has not (LayerNorm's "
                      "mean and rstd, Gather's axis).")
UNMATCHED_IN_PLACE = ("note: not compared: the golden run calls {op} in place ({op}_) and records no backward of "
                      "it.")
UNMATCHED_OTHER = ("note: not compared: no golden item matches this one (the golden run calls {op} another number "
                   "of times, or records no such argument or output).")


def unmatched_reasons(golden_items):
    """A function: target entry name -> the note of its unmatched rows (UNMATCHED_*), across frameworks."""
    golden_ops = {_op_of(name) for name in golden_items.entry_names}
    golden_backward_ops = {_op_of(name) for name in golden_items.entry_names if name.endswith(".backward")}
    cache: dict = {}

    def reason(entry_name: str) -> str:
        found = cache.get(entry_name)
        if found is None:
            op = _op_of(entry_name)
            if entry_name.startswith("Cell."):
                found = UNMATCHED_CELL
            elif entry_name.startswith("Primitive."):
                found = UNMATCHED_LEFT_OUT if op in PRIMITIVE_RULES else UNMATCHED_PRIMITIVE
            elif op not in golden_ops and _op_of(map_api_name(entry_name, builtin_api_table())) not in golden_ops:
                found = UNMATCHED_ABSENT.format(op=printable(op))
            elif entry_name.endswith(".backward") and _called_in_place_only_forward(
                    _op_of(map_api_name(entry_name, builtin_api_table())), golden_ops, golden_backward_ops):
                found = UNMATCHED_IN_PLACE.format(op=printable(op))
            else:
                found = UNMATCHED_OTHER.format(op=printable(op))
            cache[entry_name] = found
        return found

    return reason


def _called_in_place_only_forward(op: str, golden_ops: set, golden_backward_ops: set) -> bool:
    """The golden run calls op in place (op_) and records no backward of op or op_ (F.relu_)."""
    return op + "_" in golden_ops and op not in golden_backward_ops and op + "_" not in golden_backward_ops


def _op_of(entry_name: str) -> str:
    """The op of an entry name without its framework's prefix: Tensor.permute.3.forward -> permute."""
    parts = entry_name.split(".")
    if parts[0] == "Primitive" and len(parts) > 2:
        return parts[2]
    return parts[1] if len(parts) > 1 else entry_name


@dataclass
class MappingSet:
    """The active mappings of one compare. Precedence: data mapping (user -dm, then the one generated by -lm) >
    custom API mapping > built-in API mapping (-am) or cell mapping (-cm) > the name itself."""

    api: bool = False
    api_rules: list = field(default_factory=list)
    cell: bool = False
    cell_table: CellMapping | dict = field(default_factory=dict)
    data: dict = field(default_factory=dict)
    generated: dict = field(default_factory=dict)   # the part of data that -lm generated
    twins: dict = field(default_factory=dict)       # table's PyTorch API -> its twin in the golden (twin_apis)
    linears: dict = field(default_factory=dict)     # nn.Dense's items -> linear's (split_op_partners)
    in_place: dict = field(default_factory=dict)    # a golden API called in place only (in_place_aliases)

    @property
    def active(self) -> bool:
        return self.api or self.cell or bool(self.data)

    def key(self, name: str, renumbered: str, state: str) -> tuple[str, bool]:
        """(golden key, from data mapping). Data-mapped keys are golden item names as written in the dump."""
        mapped = self.data.get(name)
        if mapped is not None and (mapped != NA or name not in self.linears or name not in self.generated):
            return mapped, True
        key = renumbered
        custom = map_custom_api(key, state, self.api_rules) if self.api and self.api_rules else None
        linear = self.linears.get(name) if custom is None else None
        if linear is not None:
            return linear, True
        if self.api and not key.startswith(("Cell.", "Module.")):
            if custom is None:
                custom = map_primitive(key, state)
            key = custom if custom is not None else map_api_name(key, builtin_api_table())
            if self.in_place and custom is None:
                key = _renamed(key, self.in_place)
        if (self.cell or self.api) and key.startswith("Cell."):
            key = map_cell_defaults(map_cell_name(key, self.cell_table))
        return _renamed(key, self.twins), False


@dataclass(frozen=True)
class MappingOptions:
    """What the user asked for: None = off, "" = on without a yaml, else the yaml path."""

    api: str | None = None
    cell: str | None = None
    data: str | None = None
    layer: str | None = None

    @property
    def active(self) -> bool:
        return any(v is not None for v in (self.api, self.cell, self.data, self.layer))


def _present_rules(rules: list, target_items, golden_items, label: str) -> list:
    """Rules whose ms_api occurs in the target and pt_api in the golden dump; others are reported and ignored."""
    target_apis = {".".join(name.split(".", 3)[:3 if name.startswith("Primitive.") else 2])
                   for name in target_items.entry_names}
    target_apis |= {".".join(name.split(".", 2)[:2]) for name in target_items.entry_names}
    golden_apis = {".".join(name.split(".", 2)[:2]) for name in golden_items.entry_names}
    kept = []
    for rule in rules:
        if rule.ms_api in target_apis and rule.pt_api in golden_apis:
            kept.append(rule)
        else:
            get_logger().warning("%sapi mapping %s -> %s is ignored: %s does not occur in the %s dump.", label,
                                 rule.ms_api, rule.pt_api, *((rule.ms_api, "target") if rule.ms_api not in target_apis
                                                            else (rule.pt_api, "golden")))
    return kept


TWIN_TYPES = {"Torch": "Functional", "Functional": "Torch"}


def _api_head(name: str) -> str:
    """The API of an entry or item name: `Torch.sigmoid.0.forward.input.0` -> `Torch.sigmoid`."""
    return ".".join(name.split(".", 2)[:2])


def _renamed(key: str, apis: dict) -> str:
    """key with its API replaced as the table {API: API} says (unchanged when the table has none for it)."""
    api = _api_head(key)
    other = apis.get(api)
    return other + key[len(api):] if other is not None else key


def _twin_form(api: str) -> str:
    """Torch.sigmoid <-> Functional.sigmoid; any other API stands for itself."""
    head, _, op = api.partition(".")
    return f"{TWIN_TYPES[head]}.{op}" if head in TWIN_TYPES else api


def _golden_aliases(target_items, golden_items, alias) -> dict:
    """{API: alias(API)} for the APIs the target calls (as the built-in table names them) that the golden dump
    lacks while it records their alias."""
    golden_apis = {_api_head(name) for name in golden_items.entry_names}
    aliases = {}
    for name in target_items.entry_names:
        if name.startswith(("Cell.", "Primitive.")):
            continue
        api = _api_head(map_api_name(name, builtin_api_table()))
        other = alias(api)
        if other != api and api not in golden_apis and other in golden_apis:
            aliases[api] = other
    return aliases


def twin_apis(target_items, golden_items) -> dict:
    """The built-in table's PyTorch APIs that the golden dump lacks while it has their twin: `torch.sigmoid` and
    `torch.nn.functional.sigmoid` are one function recorded under two names (Torch.* and Functional.*), and the
    table can name only one of them (the reference's table says Functional.sigmoid, ours Torch.sigmoid)."""
    return _golden_aliases(target_items, golden_items, _twin_form)


def _golden_forms(calls: dict, golden_entries) -> dict:
    """split_op_partners' calls keyed by the form of their function the golden dump records: Torch.sigmoid where
    the table says so and the golden has it, else Functional.sigmoid if only that is recorded (twin_apis)."""
    golden_apis = {_api_head(name) for name in golden_entries}
    return {(_twin_form(function) if function not in golden_apis and _twin_form(function) in golden_apis
             else function): ops for function, ops in calls.items()}


def build_mappings(options: MappingOptions, target, golden, target_items, golden_items, output_dir: str | None,
                   stamp: str, label: str = "", suffix: str = "") -> MappingSet:
    """The MappingSet of one compare; a layer mapping is generated here and saved as data_mapping_<ts>.yaml."""
    logger = get_logger()
    if (options.api is not None or options.layer is not None) and target.framework == "pytorch":
        raise MsprobeError("-am and -lm map MindSpore names to PyTorch names: the target dump must be a MindSpore "
                           "(or mindtorch) dump.")
    mappings = MappingSet()
    if options.api is not None:
        mappings.linears = split_op_partners(target_items, golden_items)
        mappings.in_place = in_place_aliases(target_items, golden_items)
        mappings.api = True
        mappings.twins = twin_apis(target_items, golden_items)
        if options.api:
            rules = parse_api_rules(load_yaml(options.api, "api mapping file"), options.api)
            check_rule_arity(rules, target_items, golden_items)
            mappings.api_rules = _present_rules(rules, target_items, golden_items, label)
    if options.cell is not None:
        mappings.cell = True
        if options.cell:
            mappings.cell_table = CellMapping(parse_text_mapping(load_yaml(options.cell, "cell mapping file"),
                                                                 options.cell, "cell mapping"))
    data: dict = {}
    if options.layer is not None:
        from msprobe.compare.layer_mapping import generate_data_mapping, parse_layer_mapping

        table = parse_layer_mapping(load_yaml(options.layer, "layer mapping file"), options.layer) if options.layer else {}
        if not target.construct or not golden.construct:
            logger.warning("%sLayer mapping needs construct.json beside both dump.json files (dump at level L0 or "
                           "mix); it is skipped.", label)
        else:
            data = generate_data_mapping(target_items, golden_items, target.construct, golden.construct, table,
                                         _stacks(target), _stacks(golden), (target.framework, golden.framework))
            logger.info("%sLayer mapping paired %d items (%d left unmatched).", label,
                        sum(1 for v in data.values() if v != NA), sum(1 for v in data.values() if v == NA))
            mappings.generated = dict(data)
            mappings.linears = split_op_partners(target_items, golden_items)   # where place found no partner
            if output_dir:
                write_data_mapping(data, output_dir, suffix, stamp, label)
    if options.data is not None:
        data.update(parse_text_mapping(load_yaml(options.data, "data mapping file"), options.data, "data mapping"))
    mappings.data = data
    return mappings


def in_place_aliases(target_items, golden_items) -> dict:
    """{golden API: its in-place form} for the APIs the target calls (as the built-in table names them) that the
    golden run calls in place only: MindSpore has no in-place masked_fill or relu where PyTorch code often writes
    scores.masked_fill_(mask, v), x.relu_(): Tensor.masked_fill pairs with Tensor.masked_fill_, call by call."""
    return _golden_aliases(target_items, golden_items, lambda api: api + "_")


def _shape(text) -> tuple | None:
    try:
        return tuple(int(v) for v in str(text).strip("[]() ").split(",") if v.strip())
    except ValueError:
        return None


# Ops that MindSpore's nn cells record as a primitive (with a separate BiasAdd for a weighted op) and PyTorch's as one
# function: primitive class -> (PyTorch function, weight's rank or 0 for an op without weight, the order of its
# backward outputs in PyTorch's recording: "addmm" = bias, input, weight transposed; "inputs" = input, weight, bias)
SPLIT_OPS = {"MatMul": ("Functional.linear", 2, "addmm"), "Dense": ("Functional.linear", 2, "addmm"),
             "Conv2D": ("Functional.conv2d", 4, "inputs"), "ReLU": ("Functional.relu", 0, ""),
             "MaxPool": ("Functional.max_pool2d", 0, ""), "Sigmoid": ("Torch.sigmoid", 0, ""),
             "Tanh": ("Torch.tanh", 0, ""), "AvgPool": ("Functional.avg_pool2d", 0, ""),
             "AvgPool3D": ("Functional.avg_pool2d", 0, ""), "MaxPool3DWithArgmax": ("Functional.max_pool2d", 0, "")}
# Their primitives serve cells of other dimensions too: 4-D inputs only, or 5-D of depth 1 for the 3-D primitives
# that MindSpore's nn.AvgPool2d and nn.MaxPool2d call when they pad (the input unsqueezed to [N, C, 1, H, W],
# squeezed after; the max pool's second output, its argmax, has no counterpart)
POOLS_2D = ("MaxPool", "AvgPool", "AvgPool3D", "MaxPool3DWithArgmax")
# The golden calls a SPLIT_OPS function stands for: the function itself and the op in place, in any spelling
# (nn.ReLU(inplace=True) records F.relu; F.relu_, torch.relu_ and x.relu_() record Functional.relu_, Torch.relu_
# and Tensor.relu_), where MindSpore has only the out-of-place op (nn.ReLU, ops.relu). The other out-of-place
# spellings (torch.relu, x.relu()) have a MindSpore counterpart of their own name (mint.relu, Tensor.relu).
GOLDEN_FORMS = ("Functional.", "Torch.", "Tensor.")


def golden_calls(function: str, entry_names) -> list:
    """The forward entries of the golden run, in its order, that call `function` ("Functional.relu") or its op in
    place (GOLDEN_FORMS)."""
    op = function.split(".", 1)[1]
    heads = (function + ".",) + tuple(f"{form}{op}_." for form in GOLDEN_FORMS)
    return [e for e in entry_names if e.startswith(heads) and e.endswith(".forward")]


def split_op_partners(target_items, golden_items) -> dict:
    """Pairs the MindSpore calls of SPLIT_OPS with PyTorch's function calls, item by item (target item name ->
    golden item name). At L1 MindSpore's nn.Dense records MatMul (x @ W.T) and BiasAdd primitives (with Shape and
    Reshape around them), nn.Conv2d Conv2D and BiasAdd, nn.ReLU a ReLU primitive; PyTorch's modules one
    Functional.linear, conv2d, relu. A function call of the target (ops.dense, ops.conv2d, ops.relu) is one such
    call too. Each call of the target, in the order of the dump, pairs with the next golden call of the same
    function whose weight has the same shape and whose input the same number of elements, so a call one run makes
    and the other has not leaves the rest in step (global call counts drift: nn.Dense is Primitive.dense.Dense on
    2-D inputs only, and a model may call ops.dense itself where the other run calls a Linear module). Only the
    same quantities are paired: x, W, b and y (BiasAdd's output, or the op's own without a bias); backward: the
    gradient of y and, where PyTorch records them (by shape), the gradients of b, x and W. The op's output before
    the bias is added (BiasAdd's input and its gradient) has no counterpart in PyTorch's recording and stays
    unpaired."""
    def entries(items):
        by_entry: dict = {}
        for k, entry in enumerate(items.entry):
            name = items.entry_names[entry]
            by_entry.setdefault(name, {})[items.name[k][len(name):]] = _shape(items.shape[k])
        return by_entry

    t_items, g_items = entries(target_items), entries(golden_items)
    function_of = {spec[0].split(".")[1]: cls for cls, spec in SPLIT_OPS.items() if cls != "Dense"}
    function_of["linear"] = "MatMul"
    calls: dict = {}          # primitive class -> [(op entry, BiasAdd entry or None, output entry, direct)]
    forward = [e for e in target_items.entry_names if e.endswith(".forward")]
    for i, entry in enumerate(forward):
        head = entry.split(".")
        direct = not entry.startswith("Primitive.")
        if not direct:
            cls = head[2] if head[2] in SPLIT_OPS else None
        else:
            mapped = map_api_name(entry, builtin_api_table()).split(".")
            cls = function_of.get(mapped[1]) if len(mapped) > 1 and mapped[0] in ("Functional", "Torch") else None
        if cls is None:
            continue
        items = t_items.get(entry, {})
        x, w = items.get(".input.0"), items.get(".input.1")
        rank = SPLIT_OPS[cls][1]
        if not x or (rank and (not w or len(w) != rank or (rank == 2 and x[-1] != w[-1]))):
            continue
        if cls in POOLS_2D and not (len(x) == 4 or "3D" in cls and len(x) == 5 and x[2] == 1):
            continue
        nxt = forward[i + 1] if i + 1 < len(forward) else ""
        bias = None
        if rank and direct or cls == "Dense":
            bias = entry if ".input.2" in items else None
        elif rank and nxt.startswith("Primitive.") and nxt.split(".")[2] == "BiasAdd" and \
                t_items.get(nxt, {}).get(".input.0") == items.get(".output.0"):
            bias = nxt
        calls.setdefault(SPLIT_OPS[cls][0], []).append((entry, cls, bias, entry if direct or bias is None else bias,
                                                        direct or cls == "Dense"))
    calls = _golden_forms(calls, golden_items.entry_names)
    pairs: dict = {}
    position = {entry: at for at, entry in enumerate(forward)}
    for function, ops in calls.items():
        golden = golden_calls(function, golden_items.entry_names)
        at = 0
        for entry, cls, bias, output, direct in ops:
            _pair_split_op(t_items, g_items, golden, at, entry, cls, bias, output, direct, pairs)
            at = pairs.pop(None, at)
            _pair_dense_reshapes(t_items, forward, position, entry, output, pairs)
    pairs.update(layout_op_partners(t_items, g_items, forward, golden_items.entry_names))
    _pair_passed_tensors(target_items, t_items, g_items, forward, pairs)
    _pair_shape_queries(t_items, g_items, forward, pairs)
    return pairs


# casts that MindSpore's cells make of their own parameters (nn.LayerNorm: gamma and beta to float32), which PyTorch's
# modules do not: their tensor is the argument of the next op
_CASTS = frozenset({"to", "float", "half", "double", "bfloat16", "type_as"})


def _passes_its_tensor(entry: str) -> bool:
    """A cast (which may leave its tensor unchanged) or a Reshape primitive (which always does)."""
    parts = entry.split(".")
    if parts[0] == "Primitive":
        return len(parts) == 5 and parts[2] == "Reshape"
    return len(parts) == 4 and parts[1] in _CASTS and parts[0] in _LAYOUT_TYPES


def _pair_passed_tensors(target_items, t_items, g_items, forward, pairs) -> None:
    """A target cast or Reshape primitive left without a partner that passes its tensor on unchanged (the same
    dtype and statistics in and out) is the tensor it passes: when its output is, with the very same statistics,
    an argument of one of the next ops (within 4 calls: nn.LayerNorm casts gamma and beta, then calls its LayerNorm
    primitive; nn.Embedding flattens its indices for Gather), or its input the output of the op just before
    (nn.Embedding reshapes Gather's output back), its input and output pair with that item's partner. A cast's
    dtype argument, a Reshape's target shape and their gradients stay unpaired."""
    index = None
    table = builtin_api_table()
    for at, entry in enumerate(forward):
        if not _passes_its_tensor(entry) or not pairs.get(entry + ".output.0", ".abandoned").endswith(".abandoned"):
            continue
        if index is None:
            index = {name: k for k, name in enumerate(target_items.name)}
        stats = _stats(target_items, index.get(entry + ".output.0"))
        if stats is None or stats != _stats(target_items, index.get(entry + ".input.0")):
            continue
        partner = None
        numel = _numel(t_items[entry].get(".output.0"))
        for later in forward[at + 1:at + 5]:
            suffix = next((sfx for sfx, shape in t_items.get(later, {}).items() if sfx.startswith(".input.")
                           and _numel(shape) == numel and _stats(target_items, index.get(later + sfx)) == stats),
                          None)
            if suffix is not None:
                partner = pairs.get(later + suffix) or map_primitive(later + suffix, "input") or \
                    map_api_name(later + suffix, table)
                break
        if partner is None and at and _numel(t_items.get(forward[at - 1], {}).get(".output.0")) == numel and \
                _stats(target_items, index.get(forward[at - 1] + ".output.0")) == stats:
            before = forward[at - 1] + ".output.0"
            partner = pairs.get(before) or map_primitive(before, "output") or map_api_name(before, table)
        if _golden_has(g_items, partner):
            pairs[entry + ".input.0"] = pairs[entry + ".output.0"] = partner


def _golden_has(g_items, name) -> bool:
    """Whether `name` (a golden item name, or a mapping's ".abandoned" mark) is an input or output of the golden."""
    if name is None or name.endswith(".abandoned"):
        return False
    entry = name[:max(name.rfind(".input."), name.rfind(".output."))]
    return name[len(entry):] in g_items.get(entry, {})


def _stats(items, k):
    """An item's dtype and recorded statistics, which a reshape keeps (None for a missing item or one without)."""
    if k is None or items.stat_max[k] is None:
        return None
    return items.dtype[k], items.stat_max[k], items.stat_min[k], items.stat_mean[k], items.stat_norm[k]


def _is_shape_query(entry: str) -> bool:
    return ".Shape." in entry if entry.startswith("Primitive.") else entry.startswith("Functional.shape.")


def _pair_shape_queries(t_items, g_items, forward, pairs) -> None:
    """MindSpore's cells ask a tensor's shape before they use it (nn.Dense, nn.BatchNorm2d: a Shape primitive or
    ops.shape), PyTorch records no such call. The queried tensor is the input of the next op, so the query's input
    pairs with that input's partner when the two have the same shape; the sizes it returns stay unpaired."""
    for at, entry in enumerate(forward):
        if not _is_shape_query(entry) or entry + ".input.0" in pairs:
            continue
        following = _neighbour(forward, at, 1)
        shape = t_items.get(entry, {}).get(".input.0")
        if following is None or shape is None or t_items.get(following, {}).get(".input.0") != shape:
            continue
        partner = pairs.get(following + ".input.0") or map_primitive(following + ".input.0", "input")
        if _golden_has(g_items, partner):
            pairs[entry + ".input.0"] = partner


# the API types under which the two frameworks record a layout op (LAYOUT_OPS): a Tensor method, a function
_LAYOUT_TYPES = ("Tensor", "Torch", "Functional", "Mint", "MintFunctional")


def layout_op_partners(t_items, g_items, t_forward, g_entries) -> dict:
    """Pairs the shape changes, views and casts (name_rules.LAYOUT_OPS) of a golden dumped with them (PyTorch's
    risk_level ALL) call by call: each target call of op X (Tensor.X, Mint.X, ops.X), in the order of the dump,
    pairs with the next golden call of X (Tensor.X or torch.X) whose input and first output have the same shapes,
    so calls one run makes and the other has not (nn.LayerNorm's casts of gamma and beta) leave the rest in step.
    Between two such pairs, as many calls left on each side pair in order (a call whose shapes differ: a real
    difference, shown); the others never match (nor by call count). Item by item: arguments, outputs and the
    backward's gradients by their place; an item the partner has not (an argument named otherwise) stays unpaired."""
    golden: dict = {}            # op -> golden forward entries, in the order of the dump
    for entry in g_entries:
        parts = entry.split(".")
        if len(parts) == 4 and parts[3] == "forward" and parts[1] in LAYOUT_OPS and parts[0] in _LAYOUT_TYPES:
            golden.setdefault(parts[1], []).append(entry)
    if not golden:
        return {}
    table = builtin_api_table()
    target: dict = {}            # op -> target forward entries, in the order of the dump
    for entry in t_forward:
        parts = entry.split(".")
        if len(parts) == 4 and parts[0] in _LAYOUT_TYPES:
            op = map_api_name(entry, table).split(".")[1]
            if op in golden:
                target.setdefault(op, []).append(entry)
    pairs: dict = {}
    for op, calls in target.items():
        for entry, found in zip(calls, _align_calls(t_items, g_items, calls, golden[op])):
            backward = entry[:-len("forward")] + "backward"
            if found is None:
                _abandon(t_items, (entry, backward), pairs, every=True)
                continue
            g_entry = golden[op][found]
            for t_entry, partner in ((entry, g_entry), (backward, g_entry[:-len("forward")] + "backward")):
                g_have = g_items.get(partner, {})
                for suffix in t_items.get(t_entry, {}):
                    pairs[t_entry + suffix] = partner + suffix if suffix in g_have else t_entry + suffix + ".abandoned"
    return pairs


_LOOKAHEAD = 64      # golden calls searched ahead for a target call's partner (keeps the pairing linear)


def _align_calls(t_items, g_items, calls, golden) -> list:
    """Per target call, the index of its golden partner or None (layout_op_partners)."""
    def shapes(items, entry):
        have = items.get(entry, {})
        return have.get(".input.0"), have.get(".output.0")

    wanted = [shapes(g_items, entry) for entry in golden]
    found: list = []
    at = 0
    for entry in calls:
        mine = shapes(t_items, entry)
        k = next((k for k in range(at, min(at + _LOOKAHEAD, len(golden))) if wanted[k] == mine), None)
        found.append(k)
        if k is not None:
            at = k + 1
    start = 0
    while start < len(found):                # the calls left between two pairs, as many on each side: in order
        if found[start] is not None:
            start += 1
            continue
        stop = start
        while stop < len(found) and found[stop] is None:
            stop += 1
        low = found[start - 1] + 1 if start else 0
        high = found[stop] if stop < len(found) else len(golden)
        if high - low == stop - start:
            found[start:stop] = range(low, high)
        start = stop
    return found


def _neighbour(forward, at: int, step: int) -> str | None:
    """The forward entry before (step -1) or after (step 1) forward[at], shape queries skipped."""
    at += step
    while 0 <= at < len(forward) and _is_shape_query(forward[at]):
        at += step
    return forward[at] if 0 <= at < len(forward) else None


def _pair_dense_reshapes(t_items, forward, position, entry, output, pairs) -> None:
    """nn.Dense on an input of more than two dimensions records Shape and Reshape (to 2-D) before its MatMul and
    (Functional.shape and) Reshape back after its BiasAdd: their tensors are the linear's x and y, flattened or
    not (statistics do not depend on the shape), so they pair with the items MatMul's input and BiasAdd's output
    got (same element counts), and the Reshapes' gradients with those of x and y. Shape's sizes and Reshape's
    target shape have no counterpart in PyTorch's linear and stay unpaired."""
    if not entry.startswith("Primitive.matmul.MatMul."):
        return
    x_partner, y_partner = pairs.get(entry + ".input.0"), pairs.get(output + ".output.0")
    reshape = _neighbour(forward, position[entry], -1)
    numel = _numel(t_items[entry].get(".input.0"))
    if x_partner is not None and not x_partner.endswith(".abandoned") and reshape and ".Reshape." in reshape and \
            t_items[reshape].get(".output.0") == t_items[entry].get(".input.0"):
        for suffix in (".input.0", ".output.0"):
            pairs[reshape + suffix] = x_partner
        _pair_gradient(t_items, reshape, pairs.get(entry[:-len("forward")] + "backward.output.1"), numel, pairs)
    y_grad = pairs.get(output[:-len("forward")] + "backward.input.0")
    if output != entry and y_grad is not None and not y_grad.endswith(".abandoned"):
        # BiasAdd's gradient of its input (MatMul's output before the bias) is y's gradient, passed through
        bias_b = output[:-len("forward")] + "backward"
        if t_items.get(bias_b, {}).get(".output.1") == t_items[output].get(".output.0"):
            pairs[bias_b + ".output.1"] = y_grad
    after = _neighbour(forward, position[output], 1)
    numel = _numel(t_items[output].get(".output.0"))
    if y_partner is not None and not y_partner.endswith(".abandoned") and after and ".Reshape." in after and \
            t_items[after].get(".input.0") == t_items[output].get(".output.0"):
        for suffix in (".input.0", ".output.0"):
            pairs[after + suffix] = y_partner
        _pair_gradient(t_items, after, y_grad, numel, pairs)


def _pair_gradient(t_items, reshape, partner, numel, pairs) -> None:
    """A Reshape's backward input and output (one gradient, shaped two ways) pair with `partner`, a golden item."""
    backward = reshape[:-len("forward")] + "backward"
    if partner is None or partner.endswith(".abandoned"):
        return
    for suffix in (".input.0", ".output.0"):
        if _numel(t_items.get(backward, {}).get(suffix)) == numel:
            pairs[backward + suffix] = partner


def _pair_split_op(t_items, g_items, golden, at, entry, cls, bias, output, direct, pairs) -> None:
    """One call of split_op_partners; pairs[None] is the next golden call to look at."""
    _, rank, order = SPLIT_OPS[cls]
    x, w = t_items[entry][".input.0"], t_items[entry].get(".input.1")
    found = next((k for k in range(at, len(golden)) if _numel(g_items[golden[k]].get(".input.0")) == _numel(x)
                  and (not rank or g_items[golden[k]].get(".input.1") == w)), None)
    op_b, out_b = entry[:-len("forward")] + "backward", output[:-len("forward")] + "backward"
    if found is None:
        if direct:      # a function's call counts no longer say which golden call it is
            _abandon(t_items, (entry, op_b), pairs)
        return
    pairs[None] = found + 1
    g_fwd_name = golden[found]
    g_bwd_name = g_fwd_name[:-len("forward")] + "backward"
    g_fwd, g_bwd = g_items[g_fwd_name], g_items.get(g_bwd_name, {})

    squeeze = _squeezed if cls in POOLS_2D else (lambda shape: shape)

    def pair(t_entry, t_suffix, g_suffix, same_shape=False, g_have=g_fwd):
        have = t_items.get(t_entry, {})
        if t_suffix not in have or g_suffix not in g_have or _numel(have[t_suffix]) != _numel(g_have[g_suffix]) or \
                (same_shape and squeeze(have[t_suffix]) != squeeze(g_have[g_suffix])):
            return
        pairs[t_entry + t_suffix] = (g_fwd_name if g_have is g_fwd else g_bwd_name) + g_suffix

    pair(entry, ".input.0", ".input.0")
    pair(output, ".output.0", ".output.0")
    pair(out_b, ".input.0", ".input.0", g_have=g_bwd)
    if not rank:
        pair(op_b, ".output.0", ".output.0", same_shape=True, g_have=g_bwd)
        _abandon(t_items, (op_b,), pairs)
        return
    pair(entry, ".input.1", ".input.1", same_shape=True)
    if bias is not None:
        pair(bias, ".input.2" if direct else ".input.1", ".input.2", same_shape=True)
        if not direct:
            pair(op_b, ".input.0", ".input.0", g_have=g_bwd)
    # the gradients of x, W and b: a MindSpore function records them in the order of its inputs, a primitive in
    # the reverse order (nn.Dense's MatMul: W, x; BiasAdd: b, then its input's)
    if direct:
        function = not entry.startswith("Primitive.")
        t_x, t_w, t_b = ((op_b, f".output.{k}") for k in ((0, 1, 2) if function else (2, 1, 0)))
    else:
        t_x, t_w, t_b = (op_b, ".output.1"), (op_b, ".output.0"), (out_b, ".output.0") if bias else None
    if len([k for k in g_bwd if k.startswith(".output.")]) >= 2:   # else the gradient of a flattened output only
        b_at, x_at, w_at = (".output.0", ".output.1", ".output.2") if order == "addmm" else \
            (".output.2", ".output.0", ".output.1")
        b_grad = t_items.get(t_b[0], {}).get(t_b[1]) if t_b else None
        if b_grad is not None and len(b_grad) == 1 and g_bwd.get(b_at) == b_grad:
            pair(*t_b, b_at, g_have=g_bwd)
        if t_items.get(t_w[0], {}).get(t_w[1]) == w and g_bwd.get(w_at) == (w[::-1] if order == "addmm" else w):
            pair(*t_w, w_at, g_have=g_bwd)
        if t_items.get(t_x[0], {}).get(t_x[1]) == x:
            pair(*t_x, x_at, same_shape=True, g_have=g_bwd)
    _abandon(t_items, (op_b, out_b), pairs)


def _abandon(t_items, entries, pairs, every=False) -> None:
    """The backward outputs of a split op's entries that got no partner never match (nor by call count); `every`:
    none of the entries' items does."""
    for entry in entries:
        for suffix in t_items.get(entry, {}):
            if (every or suffix.startswith(".output.") or entry.endswith(".forward")) and entry + suffix not in pairs:
                pairs[entry + suffix] = entry + suffix + ".abandoned"


def _squeezed(shape):
    """A shape without its dimensions of size 1 (a 2-D pool's [N, C, 1, H, W] through a 3-D primitive)."""
    return shape if shape is None else tuple(v for v in shape if v != 1)


def _numel(shape) -> int | None:
    if shape is None:
        return None
    total = 1
    for v in shape:
        total *= v
    return total


def _stacks(dump) -> dict:
    """The stacks of a dump (entry -> lines): those read with it, else its stack.json, else none."""
    if dump.stack is not None:
        return dump.stack
    path = os.path.join(os.path.dirname(dump.path), "stack.json")
    return read_stack(path) if os.path.isfile(path) and not os.path.islink(path) else {}


def write_data_mapping(data: dict, output_dir: str, suffix: str, stamp: str, label: str = "") -> str:
    """data_mapping<suffix>_<stamp>.yaml: the data mapping a layer mapping generated."""
    import yaml


    path = data_mapping_path(output_dir, suffix, stamp)
    write_text(path, yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    get_logger().info("%sThe data mapping generated by the layer mapping is saved in: %s", label, path)
    return path


def data_mapping_path(output_dir: str, suffix: str, stamp: str) -> str:
    return os.path.join(output_dir, f"data_mapping{suffix}_{stamp}.yaml")
