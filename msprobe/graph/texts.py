"""The JSON texts of a node's parameter dicts as the plugin shows them (spec §11.3): every value a string, spelled
as the reference spells it in the .vis (text_json) or in the .vis.db (text_db). Formatter spells the parameter
dicts of a batch of nodes for one graph write."""

from __future__ import annotations

import re
from itertools import chain, compress, repeat
from json.encoder import encode_basestring
from operator import is_, itemgetter

from msprobe.graph import floats

# Statistics compare columns whose cells of two floats stay numbers until written (the compare core's
# stat_numbers; scoring.attach_and_score keeps them in Graph.cells): column -> what follows the number in the
# cell's text (the relative errors are in percent). A float in such a field is spelled as repr(value) + suffix.
STAT_CELLS = {"Max diff": "", "Min diff": "", "Mean diff": "", "L2norm diff": "", "MaxRelativeErr": "%",
              "MinRelativeErr": "%", "MeanRelativeErr": "%", "NormRelativeErr": "%"}
NODE_BATCH = 2048       # nodes a writer formats at once (their texts never exist for a whole graph)
# A number starts where a run of digits starts: (?<!\d) keeps the search linear on a long run of digits.
_LONG_DECIMAL = re.compile(r"-?(?<!\d)\d+\.\d{7,}%?")
_WHOLE_LONG_DECIMAL = re.compile(r"^-?\d+\.\d{7,}%?$")
_NUMBER = re.compile(r"(-?\d+\.(\d+))((?:e[-+]?\d+)?%?)")


def text_json(value) -> str:
    """The .vis text of one value: floats and long decimals with 6 decimals (or 7 digits with an exponent)."""
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


def text_db(value) -> str:
    """The .vis.db text of one value: floats as repr writes them, decimal texts of 7+ fraction digits with 6."""
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
    write. output_format: "json" for the .vis spelling, "db" for the .vis.db one; `spaced`: json.dumps' separators
    (else compact).

    Many dicts are spelled at once, column by column: the items that have the same keys in the same order (nearly
    all tensors) form a group, each of their fields is spelled as one column, and every item is filled into the
    group's template. Floats are spelled a column at a time (floats.py). Strings, shapes and the other values recur across the nodes of a graph (one op's output is the
    next op's input): they are looked up in caches of quoted texts, and the missing ones made once each; they are
    cached apart (1 == True, but their texts differ)."""

    _LIMIT = 1_000_000      # cached texts kept at most

    def __init__(self, output_format: str, keep_md5: bool, spaced: bool = False):
        vis = output_format == "json"
        self.text = text_json if vis else text_db
        self.float_texts = floats.float_texts_json if vis else floats.float_texts_db
        self.cell_texts = floats.cell_texts_json if vis else floats.cell_texts_db
        self.drop = _DROP[output_format] | (frozenset() if keep_md5 else {"md5"})
        self.verbatim: frozenset = frozenset()      # compare columns written as they are (Graph.final_cells)
        self.colon, self.comma = (": ", ", ") if spaced else (":", ",")
        self.null = "{" + _quote("value") + self.colon + _quote("null") + "}"
        self.strings: dict = {}
        self.others: dict = {}        # (class, value) of bools, ints, None -> quoted text
        self.shapes: dict = {}        # shape tuple -> quoted text
        self.templates: dict = {}     # key sequence -> (template, kept fields, position of Max among them or -1)

    def params(self, params: dict, rows: dict | None = None, cells: dict | None = None) -> str:
        """JSON text of one parameter dict (input_data or output_data of a node); see many."""
        return self.many([params], [rows], cells)[0]

    def nodes(self, nodes: list, cells: dict, final: frozenset = frozenset()) -> list:
        """(input_data text, output_data text) of each node, its compare rows (Node.rows) into cells filled in."""
        self.verbatim = final
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
            by_field = {field: list(map(itemgetter(field), items)) for field in own}   # not zip(*items): one
            # iterator per item
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
        if field in self.verbatim:
            return list(map(_quote, values))
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
            return self._cached(values, self.strings, lambda missing: [_quote(self.text(v)) for v in missing])
        if kind is float:
            suffix = STAT_CELLS.get(field)
            if suffix is not None:
                return self.cell_texts(values, suffix, '"')
            return self.float_texts(values, '"')
        if kind is list:
            keys = list(map(tuple, values))
            if set(map(type, chain.from_iterable(keys))) <= {int}:     # plain shapes
                return self._cached(keys, self.shapes, lambda missing: [_quote(self.text(list(v))) for v in missing])
        return [self._one(value) for value in values]

    @staticmethod
    def _cached(keys: list, cache: dict, make) -> list:
        """Texts of keys through cache; make(missing keys) gives the texts of those missing, each made once."""
        out = list(map(cache.get, keys))
        if None not in out:
            return out
        missing = list(dict.fromkeys(compress(keys, map(is_, out, repeat(None)))))
        cache.update(zip(missing, make(missing)))
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


_quote = encode_basestring
_QUOTED_NULL = _quote("null")
_DROP = {"json": frozenset(("requires_grad", "full_op_name", "state")), "db": frozenset(("full_op_name", "state"))}
