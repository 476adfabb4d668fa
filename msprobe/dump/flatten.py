"""Turn dump entries into items: one row per leaf (tensor or scalar), in a columnar table (spec §2.4-2.6, §3.3)."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from operator import itemgetter

from msprobe.dump.naming import (
    BACKWARD,
    FORWARD,
    PARAMETERS_GRAD,
    EntryName,
    renumber_call_direction,
    split_entry_name,
)
from msprobe.dump.paths import is_plain_file_name
from msprobe.dump.reader import SENTINELS
from msprobe.errors import DumpFormatError
from msprobe.table.safety import first_formula

MAX_DEPTH = 400
P2P_CLASS = "torch.distributed.P2POp"
# What a collector could not record: skipped wherever it is (an entry, a section, a record), and said on the rows
DUMP_ERROR = "dump_error"
PEER_KEYS = ("src", "dst", "group_src", "group_dst")

ROW_FIELDS = ("name", "entry", "state", "dtype", "shape", "requires_grad", "stat_max", "stat_min", "stat_mean",
              "stat_norm", "md5", "data_name", "is_tensor")

# Body sections in the order their items appear in a result table: inputs, parameters, outputs.
SECTIONS = (("input_args", "input", "input"), ("input_kwargs", "input", "input"), ("input", "input", "input"),
            ("parameters", "parameters", "parameters"), ("output", "output", "output"))


def crc32_text(text: str) -> str:
    return format(zlib.crc32(text.encode("utf-8", "surrogatepass")), "08x")


EMPTY_CRC = crc32_text("")


@dataclass
class Items:
    """Columnar item table of one dump; every list has one element per item, in dump order."""

    name: list = field(default_factory=list)        # item name (data_name-derived when present)
    entry: list = field(default_factory=list)       # index into entry_names
    state: list = field(default_factory=list)       # input | output | parameters | parameters_grad | debug
    dtype: list = field(default_factory=list)       # dtype text or None
    shape: list = field(default_factory=list)       # shape text or None
    requires_grad: list = field(default_factory=list)  # "True" / "False" / None
    stat_max: list = field(default_factory=list)    # recorded statistics, raw JSON values
    stat_min: list = field(default_factory=list)
    stat_mean: list = field(default_factory=list)
    stat_norm: list = field(default_factory=list)
    md5: list = field(default_factory=list)         # md5/CRC-32 text or None (null leaf)
    data_name: list = field(default_factory=list)   # tensor file name or "-1"
    is_tensor: list = field(default_factory=list)   # bool
    extra: dict = field(default_factory=dict)       # item index -> P2P fields (op, peer, tag, group_id)
    entry_names: list = field(default_factory=list)
    entry_parts: list = field(default_factory=list)  # EntryName per entry
    entry_first: list = field(default_factory=list)  # index of the first item of each entry (or -1)
    record: list = field(default_factory=list)      # the leaf's own dict as dumped, or None (read by the graph)
    notes: dict = field(default_factory=dict)       # item index -> why its data is missing (the dump's dump_error)

    def __len__(self) -> int:
        return len(self.name)

    def keys(self, renumber_backward: bool) -> list:
        """Compare keys: item names, with backward call counts renumbered per op (spec §3.4)."""
        if not renumber_backward:
            return list(self.name)
        entry_keys = []
        seen: dict[str, int] = {}
        for parts in self.entry_parts:
            if parts.direction != BACKWARD:
                entry_keys.append(None)
                continue
            number = seen.get(parts.op_no_number, 0)
            seen[parts.op_no_number] = number + 1
            entry_keys.append(f"{parts.op_no_number}.{renumber_call_direction(parts.call_direction, number)}")
        keys = []
        for name, entry in zip(self.name, self.entry):
            renamed = entry_keys[entry]
            original = self.entry_names[entry]
            if renamed is not None and name.startswith(original):
                keys.append(renamed + name[len(original):])
            else:
                keys.append(name)
        return keys


    def fuzzy_keys(self, construct: dict | None) -> list:
        """Keys that ignore API call counts: the n-th call of an API under one parent module pairs with the
        n-th call of the same API under the same parent on the other side (DECISIONS 10). Modules, cells and
        parameter gradients keep their exact names."""
        construct = construct or {}
        counters: dict[tuple, int] = {}
        entry_keys = []
        backward_seen: dict[str, int] = {}
        for name, parts in zip(self.entry_names, self.entry_parts):
            if name.startswith(("Module.", "Cell.")) or parts.direction not in (FORWARD, BACKWARD):
                if parts.direction == BACKWARD:  # module backward calls are renumbered as in exact matching
                    number = backward_seen.get(parts.op_no_number, 0)
                    backward_seen[parts.op_no_number] = number + 1
                    name = f"{parts.op_no_number}.{renumber_call_direction(parts.call_direction, number)}"
                entry_keys.append(name)
                continue
            parent = construct.get(name)
            if isinstance(parent, list):  # Megatron dumps: [parent, micro_step]
                parent = parent[0] if parent else None
            group = (parent or "", parts.op_no_number, parts.direction)
            number = counters.get(group, 0)
            counters[group] = number + 1
            entry_keys.append(f"{parent or ''}|{parts.op_no_number}.{number}.{parts.direction}")
        return [entry_keys[entry] + name[len(self.entry_names[entry]):]
                if name.startswith(self.entry_names[entry]) else name
                for name, entry in zip(self.name, self.entry)]


class _Flattener:
    def __init__(self, items: Items, source: str):
        self.items = items
        self.source = source
        self.shape_texts: dict = {}   # shape tuple -> its text, shared by every item of that shape
        self.dtypes: dict = {}        # dtype text -> one shared copy
        self.rows: list = []   # one tuple per item, in ROW_FIELDS order; transposed into items at the end
        self.entry_notes: list = []   # dump_error texts of the entry being walked, outside any leaf
        self.records: list = []    # the leaf dict of each item (Items.record)
        self.plain_texts: set = set()   # short texts found no formula (type, dtype), not checked again

    def check_texts(self, name: str, record: dict) -> None:
        """Refuse a record holding a text a spreadsheet could run as a formula (type, dtype, data_name, md5, a str
        value: spec §7.3, as the reference refuses them)."""
        known = self.plain_texts
        for value in record.values():
            if value.__class__ is str and value not in known:
                break
        else:
            return
        texts = [value for value in record.values() if value.__class__ is str and value not in known]
        bad = first_formula(texts)
        if bad is not None:
            raise DumpFormatError(f"{self.source}: data info of {name} contains special characters: {bad!r} could "
                                  "run as a spreadsheet formula.")
        if len(known) < 10_000:
            known.update(text for text in texts if len(text) <= 40)

    def leaf(self, name: str, record, state: str, entry: int) -> None:
        if record is None:
            dtype = shape = grad = md5 = None
            stats = (None, None, None, None)
            data_name = "-1"
            tensor = False
        else:
            known = self.plain_texts
            for value in record.values():   # check_texts, inline for the usual record whose texts are known
                if value.__class__ is str and value not in known:
                    self.check_texts(name, record)
                    break
            get = record.get
            note = get(DUMP_ERROR)
            if isinstance(note, str):
                self.items.notes[len(self.rows)] = note
            if record.get("class_type") == P2P_CLASS:
                self.items.extra[len(self.rows)] = {k: record.get(k) for k in ("op", "peer", "tag", "group_id")}
                record = record.get("tensor") or {}
                if isinstance(record, dict):
                    self.check_texts(name, record)
                get = record.get
            data_name = get("data_name")
            if data_name:
                if not isinstance(data_name, str):
                    raise DumpFormatError(f"{self.source}: data_name of {name} must be a string.")
                if is_plain_file_name(data_name):  # a hostile name keeps the structural item name
                    name = data_name.rsplit(".", 1)[0] if "." in data_name else data_name
            else:
                data_name = "-1"
            dtype = get("dtype")
            if dtype is not None:
                tensor = True
                dtype = self.dtypes.setdefault(dtype, dtype) if type(dtype) is str else str(dtype)
                shape = get("shape")
                if shape.__class__ is not list and not isinstance(shape, list):
                    raise DumpFormatError(f"{self.source}: shape of {name} must be a list.")
                try:
                    key = tuple(shape)
                    text = self.shape_texts.get(key)
                    if text is None:
                        text = self.shape_texts[key] = str(shape)
                except TypeError:   # unhashable elements: not a plain shape, keep its text
                    text = str(shape)
                shape = text
                grad = get("requires_grad")
                if grad is True:
                    grad = "True"
                elif grad is False:
                    grad = "False"
                elif grad is not None:
                    raise DumpFormatError(f"{self.source}: requires_grad of {name} must be true or false.")
                stats = (get("Max"), get("Min"), get("Mean"), get("Norm"))
                if not (stats[0].__class__ is float and stats[1].__class__ is float and stats[2].__class__ is float
                        and stats[3].__class__ is float):   # ints, None, a text or a bool among them
                    stats = tuple(map(_tensor_stat, stats))
                md5 = get("md5")
                # no md5 recorded: the CRC-32 of the record's value text, as the reference computes it (a tensor
                # dumped with its `value`, e.g. a small int64 tensor: crc32("[1, 2, 3]") = b8213bc1)
                if md5:
                    md5 = str(md5)
                else:
                    md5 = crc32_text(str(record["value"])) if "value" in record else EMPTY_CRC   # one shared text
            else:
                tensor = False
                dtype, shape, stats, md5 = self.scalar(name, record)
                grad = None
        self.rows.append((name, entry, state, dtype, shape, grad, stats[0], stats[1], stats[2], stats[3], md5,
                          data_name, tensor))
        self.records.append(record)

    def finish(self) -> None:
        if self.rows:    # column by column: zip(*rows) would make an iterator per row
            for index, column in enumerate(ROW_FIELDS):
                setattr(self.items, column, list(map(itemgetter(index), self.rows)))
        self.items.record = self.records
        self.rows = []
        self.records = []

    def scalar(self, name: str, record: dict):
        kind = record.get("type")
        value = record.get("value")
        if type(value) is str and value in SENTINELS:
            value = SENTINELS[value]
        if kind == "torch.Size":
            return kind, str(value), (None, None, None, None), crc32_text(str(value))
        if kind == "slice":
            return kind, f"({len(value)},)" if isinstance(value, list) else "()", (None,) * 4, crc32_text(str(value))
        if kind == "ellipsis":
            return kind, "[]", ("...",) * 4, crc32_text("...")
        if name.rsplit(".", 1)[-1] in PEER_KEYS:
            text = str(value)
            return str(kind), "[]", (text,) * 4, text
        if kind == "torch.ProcessGroup":
            text = str(record.get("group_ranks"))
            return kind, "[]", (text,) * 4, text
        return f"<class '{_python_type_name(value)}'>", "[]", (value,) * 4, crc32_text(str(value))

    def walk(self, name: str, value, state: str, entry: int, depth: int, skip_list_index: bool = False) -> None:
        if depth > MAX_DEPTH:
            raise DumpFormatError(f"{self.source}: {name} is nested deeper than {MAX_DEPTH} levels.")
        if isinstance(value, dict):
            if isinstance(value.get("type"), str) or value.get("class_type") == P2P_CLASS:
                self.leaf(name, value, state, entry)
                return
            for key, child in value.items():
                if key == DUMP_ERROR and isinstance(child, str):
                    self.entry_notes.append(child)      # what the collector could not record here
                    continue
                self.walk(f"{name}.{key}", child, state, entry, depth + 1)
        elif isinstance(value, list):
            leaf = self.leaf if depth < MAX_DEPTH else None
            for index, child in enumerate(value):
                child_name = name if skip_list_index else f"{name}.{index}"
                if leaf is not None and child.__class__ is dict and child.get("type").__class__ is str:
                    leaf(child_name, child, state, entry)     # the usual element: a record (as walk would)
                else:
                    self.walk(child_name, child, state, entry, depth + 1)
        elif value is None:
            self.leaf(name, None, state, entry)
        else:
            raise DumpFormatError(f"{self.source}: unexpected value of type {type(value).__name__} at {name}.")


def _tensor_stat(value):
    """Statistics of bool tensors (any/all) are kept as text, as the reference writes them; NaN/Infinity
    tokens come back as floats."""
    kind = type(value)
    if kind is float or kind is int or value is None:
        return value
    if kind is bool:
        return str(value)
    if kind is str:
        return SENTINELS.get(value, value)
    return value


def _python_type_name(value) -> str:
    if value is None:
        return "NoneType"
    return type(value).__name__


def flatten(data: dict, source: str = "dump.json", debug: bool = False) -> Items:
    """Flatten every entry of data (dump.json 'data') into items; entries with unparsable names are skipped."""
    items = Items()
    walker = _Flattener(items, source)
    bad = first_formula(list(data))      # every entry name at once
    if bad is not None:
        raise DumpFormatError(f"{source}: api name {bad!r} contains special characters: it could run as "
                              "a spreadsheet formula.")
    for entry_name, body in data.items():
        parts = split_entry_name(entry_name, debug)
        if parts is None:
            continue
        entry = len(items.entry_names)
        items.entry_names.append(entry_name)
        items.entry_parts.append(parts)
        first = len(walker.rows)
        walker.entry_notes = []
        if isinstance(body, dict) and isinstance(body.get(DUMP_ERROR), str):
            walker.entry_notes.append(body[DUMP_ERROR])
        if debug:
            walker.walk(entry_name, body, "debug", entry, 0)
        elif parts.direction == PARAMETERS_GRAD:
            if isinstance(body, dict):
                for param, value in body.items():
                    if param == DUMP_ERROR and isinstance(value, str):
                        continue
                    walker.walk(f"{entry_name}.{param}", value, PARAMETERS_GRAD, entry, 1, skip_list_index=True)
            elif body is not None:
                raise DumpFormatError(f"{source}: entry {entry_name} must be an object.")
        elif isinstance(body, dict):
            for key, segment, state in SECTIONS:
                section = body.get(key)
                if section is None:
                    continue
                walker.walk(f"{entry_name}.{segment}", section, state, entry, 1)
        elif body is not None:
            raise DumpFormatError(f"{source}: entry {entry_name} must be an object, got {type(body).__name__}.")
        items.entry_first.append(first if len(walker.rows) > first else -1)
        if walker.entry_notes:      # a part of the entry was not recorded: said on each of its rows
            text = "; ".join(dict.fromkeys(walker.entry_notes))
            for row in range(first, len(walker.rows)):
                items.notes.setdefault(row, text)
    walker.finish()
    return items


def entry_has_md5(body) -> bool:
    """md5-mode detection (spec §3.2): an 'md5' key among the direct elements of a section."""
    if not isinstance(body, dict):
        return False
    for section in body.values():
        if isinstance(section, list):
            for element in section:
                if isinstance(element, dict) and "md5" in element:
                    return True
        elif isinstance(section, dict):
            if "md5" in section:
                return True
            for element in section.values():
                if isinstance(element, dict) and "md5" in element:
                    return True
    return False


def tree_has_md5(value, depth: int = 0) -> bool:
    """md5 search over a whole tree (debug.json)."""
    if depth > MAX_DEPTH:
        return False
    if isinstance(value, dict):
        if "md5" in value:
            return True
        return any(tree_has_md5(v, depth + 1) for v in value.values())
    if isinstance(value, list):
        return any(tree_has_md5(v, depth + 1) for v in value)
    return False


__all__ = ["Items", "flatten", "entry_has_md5", "tree_has_md5", "EntryName", "crc32_text"]
