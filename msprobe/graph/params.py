"""A node's input and output parameters (spec §5), made from the compare core's item table: dump/flatten.py walks
the dump (the grammar of entries, sections and leaves lives there only) and keeps each leaf's own dict, whose fields
the graph shows as dumped."""

from __future__ import annotations

from msprobe.dump.flatten import Items, crc32_text
from msprobe.dump.reader import SENTINELS
from msprobe.errors import DumpFormatError

STATS = ("Max", "Min", "Mean", "Norm")
TENSOR_TYPES = ("torch.Tensor", "mindspore.Tensor", "numpy.ndarray")
_ALL_STATS = frozenset(STATS)


def entry_params(items: Items, source: str) -> dict:
    """entry name -> (input_data, output_data) of every entry that has items: parameter key (the item's name) ->
    the leaf's fields, completed as the plugin shows them (values not yet spelled). Parameter gradients are
    inputs."""
    out: dict = {}
    names = items.entry_names
    last = -1
    inputs = outputs = None
    for index, (key, entry, state, record) in enumerate(zip(items.name, items.entry, items.state, items.record)):
        if entry != last:
            last = entry
            inputs, outputs = out[names[entry]] = ({}, {})
        item = {"type": None, "Max": None} if record is None else _item(items, index, key, record, source)
        if state == "output":
            outputs[key] = item
        else:
            inputs[key] = item
    return out


def _item(items: Items, index: int, key: str, record: dict, source: str) -> dict:
    """The leaf's fields with its NaN/Infinity sentinels as floats, a data_name ("-1" when none), a scalar's dtype
    and shape (as the compare core spells them), statistics (a scalar's value, else null where absent) and an md5
    (CRC-32 of a scalar's value text)."""
    data_name = record.get("data_name") or "-1"
    if data_name in SENTINELS:
        raise DumpFormatError(f"{source}: data_name of {key} must be a string.")
    item = {**record, "data_name": data_name}
    for field, value in record.items():
        if value.__class__ is str and value in SENTINELS:
            item[field] = SENTINELS[value]
    if "value" in item and "dtype" not in item and item.get("type") not in TENSOR_TYPES:
        value = item["value"]
        item["dtype"], item["shape"] = items.dtype[index], items.shape[index]
        for stat in STATS:
            item.setdefault(stat, value)
        item.setdefault("requires_grad", None)
    if not _ALL_STATS <= item.keys():
        for stat in STATS:
            item.setdefault(stat, None)
    if "md5" not in item:
        item["md5"] = crc32_text(str(item["value"])) if "value" in item else "00000000"
    return item
