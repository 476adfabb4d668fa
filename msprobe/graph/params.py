"""A node's input/output parameter dicts (spec §5) and their text formatting (spec §11.3)."""

from __future__ import annotations

import re
import zlib

from msprobe.dump.reader import SENTINELS

SOURCES = (("input_args", "input"), ("input_kwargs", "input"), ("input", "input"), ("output", "output"),
           ("parameters", "parameters"))
STATS = ("Max", "Min", "Mean", "Norm")
_LONG_DECIMAL = re.compile(r"-?\d+\.\d{7,}%?")
_WHOLE_LONG_DECIMAL = re.compile(r"^-?\d+\.\d{7,}%?$")
_NUMBER = re.compile(r"(-?\d+\.(\d+))((?:e[-+]?\d+)?%?)")


def _leaves(name: str, record: dict):
    """(flattened path, leaf or None) for every leaf of a dump record, in dump order (iterative)."""
    if ".parameters_grad" in name:
        roots = [(f"{name}.{key}", value[0] if isinstance(value, list) and len(value) == 1 else value)
                 for key, value in record.items()]
    else:
        roots = [(f"{name}.{prefix}", record[source]) for source, prefix in SOURCES if source in record]
    stack = list(reversed(roots))
    while stack:
        path, value = stack.pop()
        if value is None:
            yield path, None
        elif isinstance(value, dict):
            if isinstance(value.get("type"), str):
                yield path, value
            else:
                stack.extend(reversed([(f"{path}.{k}", v) for k, v in value.items()]))
        elif isinstance(value, list):
            stack.extend(reversed([(f"{path}.{i}", v) for i, v in enumerate(value)]))
        else:
            yield path, {"type": type(value).__name__, "value": value}


def _item(path: str, leaf: dict | None) -> tuple[str, dict]:
    if leaf is None:
        return path, {"type": None, "Max": None}
    item = {k: SENTINELS.get(v, v) if type(v) is str else v for k, v in leaf.items()}
    data_name = item.get("data_name") or "-1"
    item["data_name"] = data_name
    key = data_name.rsplit(".", 1)[0] if data_name != "-1" and "." in data_name else (
        data_name if data_name != "-1" else path)
    if item.get("type") not in ("torch.Tensor", "mindspore.Tensor", "numpy.ndarray") and "value" in item \
            and "dtype" not in item:
        value = item["value"]
        kind = item.get("type")
        if kind == "torch.Size":
            item["dtype"], item["shape"] = "torch.Size", str(value)
        elif kind == "slice":
            item["dtype"], item["shape"] = "slice", f"({len(value)},)" if isinstance(value, list) else "[]"
        else:
            item["dtype"], item["shape"] = f"<class '{kind}'>", "[]"
        for stat in STATS:
            item.setdefault(stat, value)
        item.setdefault("requires_grad", None)
    for stat in STATS:
        item.setdefault(stat, None)
    if "md5" not in item:
        item["md5"] = f"{zlib.crc32(str(item.get('value')).encode()) & 0xFFFFFFFF:08x}" \
            if "value" in item else "00000000"
    return key, item


def node_params(name: str, record: dict) -> tuple[dict, dict]:
    """(input_data, output_data): parameter key -> raw item dict (values not yet formatted)."""
    inputs: dict = {}
    outputs: dict = {}
    for path, leaf in _leaves(name, record):
        key, item = _item(path, leaf)
        if ".output." in path + "." and ".input." not in path:
            outputs[key] = item
        else:
            inputs[key] = item
    return inputs, outputs


def _text_old(value) -> str:
    kind = type(value)
    if kind is float:
        text = repr(value)
        if "e" in text and len(text) < 50:
            return f"{value:.6e}"
        return repr(round(value, 6))
    if kind is str:
        if value == " ":
            return "null"
        if "'" in value or "None" in value:
            value = value.replace("'", "").replace("None", "null")
        if "." not in value:
            return value
        number = _NUMBER.fullmatch(value)     # a number as Python writes it, maybe with an exponent or a %
        if number is None:
            return _LONG_DECIMAL.sub(_six_match, value)
        mantissa, fraction, rest = number.groups()
        return ("%.6f" % float(mantissa) if len(fraction) >= 7 else mantissa) + rest
    if value is None:
        return "null"
    return str(value).replace("'", "")


def _six_match(match) -> str:
    return _six(match.group(0))


def _text_new(value) -> str:
    if value is None or value == " ":
        return "null"
    if isinstance(value, str):
        text = value.replace("'", "").replace("None", "null")
        return _six(text) if _WHOLE_LONG_DECIMAL.match(text) else text
    return str(value).replace("'", "")


def _six(text: str) -> str:
    percent = text.endswith("%")
    number = float(text.rstrip("%"))
    return f"{number:.6f}{'%' if percent else ''}"


def new_caches() -> tuple:
    """Text caches (strings, floats) for one graph write; values recur across the nodes of a graph."""
    return {}, {}


def format_params(params: dict, old: bool, keep_md5: bool, caches: tuple) -> dict:
    """Parameter dicts as the plugin shows them: every value a string (spec §11.3). `caches` comes from
    new_caches() and serves one write (one spelling: `old` for .vis, the new one for .vis.db)."""
    text = _text_old if old else _text_new
    if len(caches[0]) + len(caches[1]) > 1_000_000:
        caches[0].clear()
        caches[1].clear()
    strings, floats = caches

    def spelled(value):
        kind = type(value)
        if kind is str:
            found = strings.get(value)
            if found is None:
                found = strings[value] = text(value)
            return found
        if kind is float and value:
            found = floats.get(value)
            if found is None:
                found = floats[value] = text(value)
            return found
        return text(value)

    drop = _DROP_OLD if old else _DROP_NEW
    if not keep_md5:
        drop = drop | {"md5"}
    out = {}
    for key, item in params.items():
        kind = item.get("type")
        if kind is None and item.get("Max") is None:
            out[key] = _NULL
            continue
        if kind == "torch.ProcessGroup":
            item = {k: item[k] for k in ("type", "group_ranks", "group_id", "data_name") if k in item}
        formatted = {field: spelled(value) for field, value in item.items() if field not in drop}
        out[key] = _NULL if formatted.get("Max") == "null" and kind != "torch.ProcessGroup" else formatted
    return out


_NULL = {"value": "null"}
_DROP_OLD = frozenset(("requires_grad", "full_op_name", "state"))
_DROP_NEW = frozenset(("full_op_name", "state"))
