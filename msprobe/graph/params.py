"""A node's input/output parameter dicts (spec §5) and their text formatting (spec §11.3)."""

from __future__ import annotations

import re
import zlib
from itertools import chain, compress, repeat
from json.encoder import encode_basestring
from operator import is_, itemgetter

import numpy as np
import orjson

from msprobe.dump.reader import SENTINELS
from msprobe.errors import DumpFormatError

# Statistics compare columns whose cells of two floats stay numbers until written (the compare core's
# stat_numbers; scoring.attach_and_score keeps them in Graph.cells): column -> what follows the number in the
# cell's text (the relative errors are in percent). A float in such a field is spelled as repr(value) + suffix.
STAT_CELLS = {"Max diff": "", "Min diff": "", "Mean diff": "", "L2norm diff": "", "MaxRelativeErr": "%",
              "MinRelativeErr": "%", "MeanRelativeErr": "%", "NormRelativeErr": "%"}
NODE_BATCH = 2048       # nodes a writer formats at once (their texts never exist for a whole graph)
SOURCES = (("input_args", "input"), ("input_kwargs", "input"), ("input", "input"), ("output", "output"),
           ("parameters", "parameters"))
STATS = ("Max", "Min", "Mean", "Norm")
_ALL_STATS = frozenset(STATS)
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
            for index, child in enumerate(value):
                if child.__class__ is dict and child.get("type").__class__ is str:     # a leaf: at once
                    yield f"{path}.{index}", child
                    continue
                stack.extend(reversed([(f"{path}.{i}", v) for i, v in enumerate(value[index:], index)]))
                break
        else:
            yield path, {"type": type(value).__name__, "value": value}


def _item(path: str, leaf: dict | None) -> tuple[str, dict]:
    if leaf is None:
        return path, {"type": None, "Max": None}
    data_name = leaf.get("data_name") or "-1"
    if data_name.__class__ is not str or data_name in SENTINELS:
        raise DumpFormatError(f"data_name of {path} must be a string.")
    item = {**leaf, "data_name": data_name}
    for field, value in leaf.items():
        if value.__class__ is str and value in SENTINELS:
            item[field] = SENTINELS[value]
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
    if not _ALL_STATS <= item.keys():
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


class Formatter:
    """JSON text of parameter dicts as the plugin shows them: every value a string (spec §11.3), for one graph
    write. `old`: the .vis spelling (else the .vis.db one); `spaced`: json.dumps' separators (else compact).

    Many dicts are spelled at once, column by column: the items that have the same keys in the same order (nearly
    all tensors) form a group, each of their fields is spelled as one column, and every item is filled into the
    group's template. Floats are spelled a column at a time with numpy and orjson (_float_texts_old and the
    others below). Strings, shapes and the other values recur across the nodes of a graph (one op's output is the
    next op's input): they are looked up in caches of quoted texts, and the missing ones made once each; they are
    cached apart (1 == True, but their texts differ)."""

    _LIMIT = 1_000_000      # cached texts kept at most

    def __init__(self, old: bool, keep_md5: bool, spaced: bool = False):
        self.text = _text_old if old else _text_new
        self.float_texts = _float_texts_old if old else _float_texts_new
        self.cell_texts = _cell_texts_old if old else _cell_texts_new
        self.drop = (_DROP_OLD if old else _DROP_NEW) | (frozenset() if keep_md5 else {"md5"})
        self.colon, self.comma = (": ", ", ") if spaced else (":", ",")
        self.null = "{" + _quote("value") + self.colon + _quote("null") + "}"
        self.strings: dict = {}
        self.others: dict = {}        # (class, value) of bools, ints, None -> quoted text
        self.shapes: dict = {}        # shape tuple -> quoted text
        self.templates: dict = {}     # key sequence -> (template, kept fields, position of Max among them or -1)

    def params(self, params: dict, rows: dict | None = None, cells: dict | None = None) -> str:
        """JSON text of one parameter dict (input_data or output_data of a node); see many."""
        return self.many([params], [rows], cells)[0]

    def nodes(self, nodes: list, cells: dict) -> list:
        """(input_data text, output_data text) of each node, its compare rows (Node.rows) into cells filled in."""
        texts = self.many([params for node in nodes for params in (node.input_data, node.output_data)],
                          [node.rows for node in nodes for _ in range(2)], cells)
        return list(zip(texts[::2], texts[1::2]))

    def many(self, dicts: list, rows: list | None = None, cells: dict | None = None) -> list:
        """JSON texts of parameter dicts, in order. rows: per dict, parameter key -> row of cells (compare column
        -> values), whose values follow the parameter's own fields."""
        caches = (self.strings, self.others, self.shapes)
        if sum(map(len, caches)) > self._LIMIT:
            for cache in caches:
                cache.clear()
        colon = self.colon
        cell_fields = tuple(cells or ())
        groups: dict = {}          # (key sequence, with cells) -> ([item], [(parts, index)], [row])
        documents = []
        for params, found in zip(dicts, rows or repeat(None)):
            parts = []
            for key, item in params.items():
                kind = item.get("type")
                if kind is None and item.get("Max") is None:
                    parts.append(_quote(key) + colon + self.null)
                    continue
                if kind == "torch.ProcessGroup":
                    parts.append(_quote(key) + colon + self._group(item))
                    continue
                row = found.get(key) if found else None
                fields = (tuple(item), row is not None)
                group = groups.get(fields)
                if group is None:
                    group = groups[fields] = ([], [], [])
                group[0].append(item)
                group[1].append((parts, len(parts)))
                if row is not None:
                    group[2].append(row)
                parts.append(_quote(key) + colon)
            documents.append(parts)
        for (fields, with_cells), (items, places, found_rows) in groups.items():
            if with_cells:      # a compare column of the same name as a field replaces its value, in its place
                fields += tuple(field for field in cell_fields if field not in fields)
            template, kept, at = self.templates.get(fields) or self._template(fields)
            own = [field for field in kept if not (with_cells and field in cells)]
            if len(own) == 1:
                values = [list(map(itemgetter(own[0]), items))]
            else:
                values = list(zip(*map(itemgetter(*own), items))) if own else []
            by_field = dict(zip(own, values))
            columns = [self._column(by_field[field] if field in by_field
                                    else list(map(cells[field].__getitem__, found_rows)), field) for field in kept]
            texts = list(map(template.__mod__, zip(*columns)))
            if at >= 0 and _QUOTED_NULL in columns[at]:
                for index, text in enumerate(columns[at]):
                    if text == _QUOTED_NULL:
                        texts[index] = self.null
            for (parts, index), text in zip(places, texts):
                parts[index] += text
        comma = self.comma
        return ["{" + comma.join(parts) + "}" for parts in documents]

    def _template(self, fields: tuple) -> tuple:
        """(`{"field":%s,...}` over the kept fields, the kept fields, where Max is among them)."""
        kept = tuple(field for field in fields if field not in self.drop)
        template = "{" + self.comma.join(_quote(field).replace("%", "%%") + self.colon + "%s" for field in kept) + "}"
        entry = self.templates[fields] = (template, kept, kept.index("Max") if "Max" in kept else -1)
        return entry

    def _column(self, values: list, field: str) -> list:
        """Quoted texts of one field of a group's items, made kind by kind."""
        kinds = set(map(type, values))
        if len(kinds) == 1:
            return self._uniform(values, kinds.pop(), field)
        out = [None] * len(values)
        for kind in kinds:
            where = [index for index, value in enumerate(values) if value.__class__ is kind]
            for index, text in zip(where, self._uniform([values[index] for index in where], kind, field)):
                out[index] = text
        return out

    def _uniform(self, values: list, kind: type, field: str) -> list:
        """Quoted texts of values of one kind."""
        if kind is str:
            return self._cached(values, self.strings, lambda new: [_quote(self.text(v)) for v in new])
        if kind is float:
            suffix = STAT_CELLS.get(field)
            if suffix is not None:
                return self.cell_texts(values, suffix, '"')
            return self.float_texts(values, '"')
        if kind is list:
            keys = list(map(tuple, values))
            if set(map(type, chain.from_iterable(keys))) <= {int}:     # plain shapes
                return self._cached(keys, self.shapes, lambda new: [_quote(self.text(list(v))) for v in new])
        return [self._one(value) for value in values]

    @staticmethod
    def _cached(keys: list, cache: dict, make) -> list:
        """Texts of keys through cache; make(new keys) gives the texts of those missing, each made once."""
        out = list(map(cache.get, keys))
        if None not in out:
            return out
        new = list(dict.fromkeys(compress(keys, map(is_, out, repeat(None)))))
        cache.update(zip(new, make(new)))
        return list(map(cache.__getitem__, keys))

    def _one(self, value) -> str:
        """Quoted text of a value that is neither a string nor a float; bools, ints and None are cached by class
        and value (other values, which may hold floats or equal-comparing elements, are spelled each time)."""
        kind = value.__class__
        if kind is not bool and kind is not int and value is not None:
            return _quote(self.text(value))
        key = (kind, value)
        text = self.others.get(key)
        if text is None:
            text = self.others[key] = _quote(self.text(value))
        return text

    def _group(self, item: dict) -> str:
        kept = [(k, item[k]) for k in ("type", "group_ranks", "group_id", "data_name") if k in item]
        return "{" + self.comma.join(_quote(k) + self.colon + self._one(v) for k, v in kept
                                     if k not in self.drop) + "}"


# Floats are spelled many at once (the batch functions below give quote + text + quote, the quote "" or '"'; each
# equals its per-value function of _text_old/_text_new, which the tests check). numpy rounds the values to 6
# decimals as "%.6f" does (_six_decimals, between 1e-4 and 1e9, where repr has no exponent) or to 7 significant
# digits as "%.6e" does (_seven_digits, most values where repr has one), and orjson writes the rounded numbers
# (_joined); other values, and the few numpy cannot round surely, are spelled one after another (the *_each
# functions).

def _float_texts_old(values: list, quote: str = "") -> list:
    """_text_old of floats: repr(round(v, 6)), which between 1e-4 and 1e9 is the 6-decimal text without its
    trailing zeros."""
    return _spelled(values, quote, _rounded_reprs, _float_texts_old_each)


def _float_texts_new(values: list, quote: str = "") -> list:
    """_text_new of floats: repr(v)."""
    return _spelled(values, quote, _plain_reprs, _float_texts_new_each)


def _cell_texts_old(values: list, suffix: str, quote: str = "") -> list:
    """_text_old(repr(v) + suffix) of floats: a decimal mantissa of 7 or more fraction digits is written with 6,
    the exponent and suffix kept."""
    return _spelled(values, quote, lambda v, q: _six_cells(v, suffix, q, True),
                    lambda some: _cell_texts_old_each(some, suffix))


def _cell_texts_new(values: list, suffix: str, quote: str = "") -> list:
    """_text_new(repr(v) + suffix) of floats: a plain decimal of 7 or more fraction digits is written with 6."""
    return _spelled(values, quote, lambda v, q: _six_cells(v, suffix, q, False),
                    lambda some: _cell_texts_new_each(some, suffix))


_FEW = 32           # fewer values are spelled one after another (numpy's fixed cost is higher)
_TENS = np.array([10.0 ** k for k in range(23)])        # the powers of ten a float holds exactly


def _spelled(values: list, quote: str, spell, each) -> list:
    """quote + text + quote of every float of values: spell(array, quote) gives [(rows, their texts)] of the rows
    it can spell, each(values) the texts of the others, one after another."""
    if len(values) < _FEW:
        return _quoted(each(values), quote)
    array = np.array(values, dtype=np.float64)
    parts = [(rows, texts) for rows, texts in spell(array, quote) if texts]
    if len(parts) == 1 and len(parts[0][1]) == len(values):
        return parts[0][1]
    left = np.ones(len(array), dtype=bool)
    where = []
    for rows, _ in parts:
        where.append(np.flatnonzero(rows))
        left[rows] = False
    rest = np.flatnonzero(left)
    texts = list(chain.from_iterable(texts for _, texts in parts))
    if len(rest):
        texts += _quoted(each([values[i] for i in rest.tolist()]), quote)
    out = np.empty(len(array), dtype=object)
    out[np.concatenate(where + [rest])] = np.array(texts, dtype=object)       # one scatter of every text
    return out.tolist()


def _six_decimals(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(|v| * 10^6 rounded to an integer as "%.6f" rounds the exact value, rows where that is sure): rows between
    1e-4 and 1e9 (the product is below 2^53, its error below half its spacing) whose product is not within two
    spacings of a half (the exact product could lie on the other side; exact ties round to even in "%.6f")."""
    size = np.abs(v)
    with np.errstate(invalid="ignore", over="ignore"):
        sure = (size >= 1e-4) & (size < 1e9)
        product = size * 1e6
        whole = np.floor(product)
        part = product - whole          # exact (whole and product are within a factor 2)
        sure &= np.abs(part - 0.5) > 2 * np.spacing(product)
    return whole + (part > 0.5), sure


def _seven_digits(v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(M, e, exact, sure): |v| rounded to 7 significant digits as "%.6e" rounds the exact value, M * 10^(e - 6)
    with 10^6 <= M < 10^7; whether that decimal reads back as v; the rows where all this is sure. Those are rows
    between 1e-15 and 1e-4 or 1e16 and 1e27 (one multiplication or division by an exact power of ten takes them
    to the 7 digits, correctly rounded) whose scaled value is not within eight spacings of a half."""
    size = np.abs(v)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        sure = ((size >= 1e-15) & (size < 1e-4)) | ((size >= 1e16) & (size < 1e27))
        size = np.where(sure, size, 1e-10)
        exponent = np.floor(np.log10(size)).astype(np.int64)
        for _ in range(2):              # log10 may be one off next to a power of ten
            scaled = _scale(size, 6 - exponent)
            exponent += (scaled >= 1e7).astype(np.int64) - (scaled < 1e6)
        scaled = _scale(size, 6 - exponent)
        whole = np.floor(scaled)
        part = scaled - whole
        sure &= (scaled >= 1e6) & (scaled < 1e7) & (np.abs(part - 0.5) > 8 * np.spacing(scaled))
        digits = whole + (part > 0.5)
        carry = digits >= 1e7           # 9999999.5 and up: 1.000000 of the next power
        digits[carry] = 1e6
        exponent += carry
        exact = _scale(digits, exponent - 6) == size
    return digits, exponent, exact, sure


def _scale(values: np.ndarray, powers: np.ndarray) -> np.ndarray:
    """values * 10^powers, each one correctly rounded operation (|powers| <= 22)."""
    ten = _TENS[np.minimum(np.abs(powers), 22)]
    return np.where(powers >= 0, values * ten, values / ten)


def _rounded_reprs(v: np.ndarray, quote: str) -> list:
    """_float_texts_old: repr(round(v, 6)) between 1e-4 and 1e9 (the float nearest to the 6-decimal text is the
    exact quotient, correctly rounded), "%.6e" where repr has an exponent."""
    scaled, sure = _six_decimals(v)
    parts = [(sure, _joined(np.copysign(scaled[sure] / 1e6, v[sure]), "", quote))]
    digits, exponent, _, sure = _seven_digits(v)
    return parts + _by_exponent(sure, digits, exponent, v, "", quote, padded=True)


def _plain_reprs(v: np.ndarray, quote: str) -> list:
    """_float_texts_new: repr(v) between 1e-4 and 1e9."""
    size = np.abs(v)
    with np.errstate(invalid="ignore"):
        rows = (size >= 1e-4) & (size < 1e9)
    return [(rows, _joined(v[rows], "", quote))]


def _six_cells(v: np.ndarray, suffix: str, quote: str, old: bool) -> list:
    """_cell_texts_*: between 1e-4 and 1e9, repr(v) + suffix where "%.6f" reads back as v (repr is that text
    without its trailing zeros), else (below 1e8) the 6-decimal text + suffix (repr has 7 or more fraction
    digits). Where repr has an exponent: repr(v) where "%.6e" reads back as v (at most 7 digits); else, in the old
    spelling, the 7 digits with the exponent of repr, which is the exponent of v but where the digits are 1.000000
    (repr may have 9.99999999... and the power below; those rows, few, are left to the per-value spelling)."""
    scaled, sure = _six_decimals(v)
    with np.errstate(invalid="ignore"):
        exact = sure & (np.copysign(scaled / 1e6, v) == v)
        rounded = sure & ~exact & (np.abs(v) < 1e8)
    parts = [(exact, _joined(v[exact], suffix, quote)),
             (rounded, _joined(np.copysign((scaled[rounded] * 10 + 1) / 1e7, v[rounded]), suffix, quote, True))]
    digits, exponent, exact, sure = _seven_digits(v)
    parts += _by_exponent(sure & exact, digits, exponent, v, suffix, quote, padded=False)
    if old:
        parts += _by_exponent(sure & ~exact & (digits > 1e6), digits, exponent, v, suffix, quote, padded=True)
    return parts


def _by_exponent(rows: np.ndarray, digits: np.ndarray, exponent: np.ndarray, v: np.ndarray, suffix: str,
                 quote: str, padded: bool) -> list:
    """[(rows, texts)] of the rows of _seven_digits, one part per exponent: the mantissa with 6 decimals (padded) or
    as repr writes it (without trailing zeros, no point when whole), then e, the sign and two or more digits."""
    parts = []
    signed = np.copysign(digits, v)
    for power in np.unique(exponent[rows]).tolist():
        tail = "e%+03d%s" % (power, suffix)
        group = rows & (exponent == power)
        if padded:          # the 6 decimals followed by a 1, cut off by _joined
            parts.append((group, _joined((signed[group] * 10 + np.sign(signed[group])) / 1e7, tail, quote, True)))
            continue
        whole = group & (digits % 1e6 == 0)
        fraction = group & ~whole
        parts.append((whole, _joined((signed[whole] // 1e6).astype(np.int64), tail, quote)))
        parts.append((fraction, _joined(signed[fraction] / 1e6, tail, quote)))
    return parts


def _joined(numbers: np.ndarray, tail: str, quote: str, cut_one: bool = False) -> list:
    """quote + text + tail + quote of numbers as orjson writes them (floats between 1e-4 and 1e9 as repr does),
    each text without its last character, a 1, when cut_one; [] if orjson wrote something else (never seen: the
    rows are spelled one by one then). A float nearest to a decimal of at most 15 digits has that decimal as its
    shortest text: the decimal of 6 decimals and a 1 is written with all its zeros, and the 1 is cut off."""
    count = len(numbers)
    if not count:
        return []
    body = orjson.dumps(numbers, option=orjson.OPT_SERIALIZE_NUMPY).decode()[1:-1]
    comma = "1," if cut_one else ","
    if "e" in body or body.count(",") != count - 1 or body.count(comma) != count - 1 \
            or (cut_one and body[-1] != "1"):
        return []
    if cut_one:
        body = body[:-1]
    return (quote + body.replace(comma, tail + quote + "\x00" + quote) + tail + quote).split("\x00")


def _quoted(texts: list, quote: str) -> list:
    return [quote + text + quote for text in texts] if quote else texts


def _float_texts_old_each(values: list) -> list:
    out = []
    append = out.append
    for value in values:
        size = -value if value < 0 else value
        if 1e-4 <= size < 1e9:
            text = ("%.6f" % value).rstrip("0")
            append(text + "0" if text[-1] == "." else text)
        elif 0 < size < 1e-4 or 1e16 <= size < _INF:       # repr has an exponent
            append(f"{value:.6e}")
        else:
            append(repr(round(value, 6)))
    return out


def _float_texts_new_each(values: list) -> list:
    return [str(v) for v in values]


def _cell_texts_old_each(values: list, suffix: str) -> list:
    """Between 1e-4 and 1e9 repr has 7 or more fraction digits exactly when the 6-decimal text does not read back
    as the value; otherwise repr is that text without trailing zeros."""
    out = []
    append = out.append
    for value in values:
        size = -value if value < 0 else value
        if 1e-4 <= size < 1e9:
            text = "%.6f" % value
            if float(text) == value:
                text = text.rstrip("0")
                if text[-1] == ".":
                    text += "0"
            append(text + suffix)
            continue
        text = repr(value)
        dot = text.find(".")
        if dot >= 0:
            end = text.find("e", dot)
            if end < 0:
                if len(text) - dot > 7:
                    text = "%.6f" % value
            elif end - dot > 7:
                text = "%.6f" % float(text[:end]) + text[end:]
        append(text + suffix)
    return out


def _cell_texts_new_each(values: list, suffix: str) -> list:
    out = []
    for value in values:
        text = repr(value)
        dot = text.find(".")
        if dot >= 0 and "e" not in text and len(text) - dot > 7:
            text = f"{value:.6f}"
        out.append(text + suffix)
    return out


_INF = float("inf")
_quote = encode_basestring
_QUOTED_NULL = _quote("null")
_DROP_OLD = frozenset(("requires_grad", "full_op_name", "state"))
_DROP_NEW = frozenset(("full_op_name", "state"))
