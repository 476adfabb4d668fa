"""graph.params.Formatter (the column-by-column, cached spelling of parameter dicts as JSON text) checked against
a straightforward per-value reference built from _text_old/_text_new and the per-item rules; the batch helpers
_cell_texts_*/_float_texts_* against the per-value functions; compare.stats.stat_diff(numbers=True) against its
text form."""

from __future__ import annotations

import json
import math
import random
import struct

import numpy as np
import pytest

from msprobe.compare.stats import stat_diff
from msprobe.graph import floats as F
from msprobe.graph import texts as T
from msprobe.graph.texts import STAT_CELLS, Formatter

PG = "torch.ProcessGroup"
MODES = [(old, keep_md5, spaced) for old in (True, False) for keep_md5 in (True, False) for spaced in (True, False)]
MODE_IDS = [f"{'old' if o else 'new'}-{'md5' if k else 'nomd5'}-{'spaced' if s else 'compact'}" for o, k, s in MODES]
# four of the eight, each of old/keep_md5/spaced both ways (for the tests that are parametrized over more)
SOME = [(True, True, False), (True, False, True), (False, True, True), (False, False, False)]
SOME_IDS = [MODE_IDS[MODES.index(mode)] for mode in SOME]


# ---------------------------------------------------------------------------------------------- reference


def _reference_item(item: dict, old: bool, keep_md5: bool):
    text = T.text_json if old else T.text_db
    drop = set(T._DROP["json"] if old else T._DROP["db"])
    if not keep_md5:
        drop.add("md5")
    kind = item.get("type")
    if kind is None and item.get("Max") is None:
        return {"value": "null"}
    if kind == PG:
        item = {k: item[k] for k in ("type", "group_ranks", "group_id", "data_name") if k in item}
    formatted = {}
    for field, value in item.items():
        if field in drop:
            continue
        if type(value) is float and field in STAT_CELLS:
            formatted[field] = text(repr(value) + STAT_CELLS[field])
        else:
            formatted[field] = text(value)
    if formatted.get("Max") == "null" and kind != PG:
        return {"value": "null"}
    return formatted


def reference(params: dict, old: bool, keep_md5: bool, spaced: bool) -> str:
    out = {key: _reference_item(item, old, keep_md5) for key, item in params.items()}
    separators = (", ", ": ") if spaced else (",", ":")
    return json.dumps(out, ensure_ascii=False, separators=separators)


def check(dicts: list, old: bool, keep_md5: bool, spaced: bool, formatter: Formatter | None = None) -> Formatter:
    formatter = formatter or Formatter("json" if old else "db", keep_md5, spaced)
    got = formatter.many(dicts)
    assert len(got) == len(dicts)
    for params, text in zip(dicts, got):
        assert text == reference(params, old, keep_md5, spaced), params
    return formatter


def check_everywhere(dicts: list, old: bool, keep_md5: bool, spaced: bool) -> None:
    """One call; the same dicts again on the warm Formatter; several calls of varying size; params() one by one;
    and the dicts in reverse order (other values first in the caches)."""
    formatter = check(dicts, old, keep_md5, spaced)
    check(dicts, old, keep_md5, spaced, formatter)
    formatter = Formatter("json" if old else "db", keep_md5, spaced)
    start, size = 0, 1
    while start < len(dicts):
        check(dicts[start:start + size], old, keep_md5, spaced, formatter)
        start, size = start + size, size * 2 + 1
    formatter = Formatter("json" if old else "db", keep_md5, spaced)
    for params in dicts:
        assert formatter.params(params) == reference(params, old, keep_md5, spaced)
    check(dicts[::-1], old, keep_md5, spaced)


# --------------------------------------------------------------------------------------------- generators


def _random_float(rng: random.Random) -> float:
    pick = rng.random()
    if pick < 0.35:
        return rng.uniform(-1, 1) * 10.0 ** rng.randint(-40, 40)
    if pick < 0.55:
        return round(rng.uniform(-100, 100), rng.randint(0, 8))           # short decimals: 0.5, 12.25, 3.0
    if pick < 0.65:
        return float(rng.randint(-10 ** 6, 10 ** 6)) / 2 ** rng.randint(0, 12)
    if pick < 0.85:
        bits = rng.getrandbits(64)
        value = struct.unpack("<d", struct.pack("<Q", bits))[0]
        return value if math.isfinite(value) else rng.random()
    return rng.choice([0.0, -0.0, 1.0, -1.0, 0.5, 1e-05, 1e16, 1.5e16, 123456.7890123, math.inf, -math.inf,
                       9.9999999e-05, 0.1234567, 2.5, 1e-07, 5e-324, 1.7976931348623157e308])


def _stat(rng: random.Random):
    pick = rng.random()
    if pick < 0.6:
        return _random_float(rng)
    return rng.choice([0, 1, -3, 7, 10 ** 20, True, False, None, " ", "None", "N/A", "inf", "-inf", "nan",
                       "1.23456789", "0.5", "1.2345678e-05%", "'quoted'", "a 1.23456789 b", "1.0", "12.5%",
                       math.nan])


def _shape(rng: random.Random):
    return rng.choice([[], [1], [1, 2], [2, 8, 96], [rng.randint(1, 4096), rng.randint(1, 64)], [1, True],
                       [True, 2], [1.0, 2], [2.0], [[1, 2], [3]], [[]], "[2, 8]"])


def _tensor(rng: random.Random, name: str) -> dict:
    item = {"type": rng.choice(["torch.Tensor", "mindspore.Tensor", "numpy.ndarray"]),
            "dtype": rng.choice(["torch.float32", "torch.bfloat16", "torch.int64"]),
            "shape": _shape(rng), "Max": _stat(rng), "Min": _stat(rng), "Mean": _stat(rng), "Norm": _stat(rng),
            "requires_grad": rng.choice([True, False, None, "True"]),
            "data_name": rng.choice(["-1", f"{name}.pt", "a'b.npy"]),
            "md5": f"{rng.getrandbits(32):08x}"}
    if rng.random() < 0.5:              # compare columns
        for column, suffix in STAT_CELLS.items():
            item[column] = _random_float(rng) if rng.random() < 0.7 else rng.choice(
                ["0", "N/A", "inf", "-inf", "Nan", "Diff", f"{_random_float(rng)!r}{suffix}", 3, None])
        item["Result"] = rng.choice(["pass", "Warning", "error"])
        item["Accuracy Reached or Not"] = rng.choice(["Yes", "No", None])
        item["full_op_name"] = name
        item["state"] = rng.choice(["input", "output"])
    if rng.random() < 0.2:              # the same keys in another order
        keys = list(item)
        rng.shuffle(keys)
        item = {k: item[k] for k in keys}
    return item


def _scalar(rng: random.Random) -> dict:
    value = rng.choice([1, 1.0, True, 0, 0.0, -0.0, False, 2, 2.0, None, "x", 0.5, -3, 1e-05, "1.23456789"])
    kind = type(value).__name__
    return {"type": kind, "value": value, "dtype": f"<class '{kind}'>", "shape": "[]", "Max": value, "Min": value,
            "Mean": value, "Norm": value, "requires_grad": None, "data_name": "-1", "md5": "1a2b3c4d"}


def _group(rng: random.Random) -> dict:
    item = {"type": PG, "group_ranks": rng.choice([[0, 1], [0, 1, 2, 3], []]), "group_id": rng.choice([0, 1, 7]),
            "data_name": "-1", "Max": None, "md5": "00000000", "dtype": "x"}
    if rng.random() < 0.3:
        del item["group_id"]
    return item


def _item(rng: random.Random, name: str) -> dict:
    pick = rng.random()
    if pick < 0.55:
        return _tensor(rng, name)
    if pick < 0.75:
        return _scalar(rng)
    if pick < 0.85:
        return rng.choice([{"type": None, "Max": None}, {"type": None, "Max": None, "md5": "00000000"},
                           {"type": "torch.Tensor", "Max": None, "Min": 1.0}, {"type": "int", "Max": " "},
                           {"type": "str", "Max": "None"}, {"type": None, "Max": 1.5}, {"Max": 2}])
    if pick < 0.92:
        return _group(rng)
    return {"type": "torch.Tensor", "Max": _stat(rng), "Max diff": _random_float(rng),
            "MaxRelativeErr": _random_float(rng)}


def _dicts(seed: int, count: int) -> list:
    rng = random.Random(seed)
    out = []
    for n in range(count):
        name = f"Functional.op{n}.forward"
        out.append({f"{name}.{rng.choice(['input', 'output'])}.{i}": _item(rng, f"{name}.{i}")
                    for i in range(rng.randint(0, 6))})
    return out


# -------------------------------------------------------------------------------------- 1. realistic mixes


@pytest.mark.parametrize("old,keep_md5,spaced", MODES, ids=MODE_IDS)
def test_mixed_items(old, keep_md5, spaced):
    check_everywhere(_dicts(seed=100 + old * 4 + keep_md5 * 2 + spaced, count=80),
                     old, keep_md5, spaced)


@pytest.mark.parametrize("old,keep_md5,spaced", MODES, ids=MODE_IDS)
def test_edge_documents(old, keep_md5, spaced):
    check_everywhere([{}, {"a": {"type": None, "Max": None}}, {}, {"b": {"type": PG}}, {"c": {"type": "t"}}],
                     old, keep_md5, spaced)
    assert Formatter("json" if old else "db", keep_md5, spaced).many([]) == []


def test_limit_clears_caches():
    formatter = Formatter("json", True)
    formatter._LIMIT = 3
    dicts = _dicts(seed=5, count=40)
    for params in dicts:
        check([params], True, True, False, formatter)
    assert sum(map(len, (formatter.strings, formatter.others, formatter.shapes))) < 200


def test_realistic_tensor_hand_spelled():
    item = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2, 8, 96], "Max": 1.6641521453857422,
            "Min": -2.0886893272399902, "Mean": -0.019612, "Norm": 22.99660873413086, "requires_grad": True,
            "data_name": "-1", "md5": "00000000"}
    old = Formatter("json", True).params({"k": item})
    assert old == ('{"k":{"type":"torch.Tensor","dtype":"torch.float32","shape":"[2, 8, 96]","Max":"1.664152",'
                   '"Min":"-2.088689","Mean":"-0.019612","Norm":"22.996609","data_name":"-1","md5":"00000000"}}')
    new = Formatter("db", False, spaced=True).params({"k": item})
    assert new == ('{"k": {"type": "torch.Tensor", "dtype": "torch.float32", "shape": "[2, 8, 96]", '
                   '"Max": "1.6641521453857422", "Min": "-2.0886893272399902", "Mean": "-0.019612", '
                   '"Norm": "22.99660873413086", "requires_grad": "True", "data_name": "-1"}}')
    group = {"type": PG, "group_ranks": [0, 1], "group_id": 3, "data_name": "-1", "Max": None, "md5": "0"}
    assert Formatter("json", True).params({"g": group, "n": {"type": None, "Max": None}}) == (
        '{"g":{"type":"torch.ProcessGroup","group_ranks":"[0, 1]","group_id":"3","data_name":"-1"},'
        '"n":{"value":"null"}}')


# --------------------------------------------------------------------------------------- 2. no merging


COLLIDING = [1, 1.0, True, 0, 0.0, -0.0, False, 2, 2.0, -2, -2.0, math.nan, math.inf, -math.inf, 1e16, 10 ** 16,
             "1", "1.0", "True", "0", "-0.0"]
SHAPES = [[1, 2], [1.0, 2], [True, 2], [1, True], [1.0, 2.0], [[1, 2]], [[1.0, 2]], [[True, 2]], [], [[]], [0],
          [-0.0], [0.0], [False], [(1, 2)], [1, [2]], (1, 2)]


def _column_items(field: str, values: list) -> list:
    """One document per value (and one holding them all): items with the same keys in the same order."""
    def item(value):
        return {"type": "torch.Tensor", "shape": [1], "Max": 1.5, "Min": 0.5, field: value, "md5": "0"}
    together = {f"k{i}": item(v) for i, v in enumerate(values)}
    return [together] + [{"k": item(v)} for v in values] + [together]


@pytest.mark.parametrize("old,keep_md5,spaced", SOME, ids=SOME_IDS)
@pytest.mark.parametrize("field", ["Max", "Mean", "value", "shape", "requires_grad", "Max diff", "MinRelativeErr",
                                   "group_id"])
def test_equal_values_are_not_merged(field, old, keep_md5, spaced):
    values = COLLIDING + SHAPES + [[1, 2], -0.0, 0.0, 0.0, -0.0, 1, 1.0, True]
    check_everywhere(_column_items(field, values), old, keep_md5, spaced)
    check_everywhere(_column_items(field, values[::-1]), old, keep_md5, spaced)
    # every value alone in its own call on one warm Formatter, twice
    formatter = Formatter("json" if old else "db", keep_md5, spaced)
    for _ in range(2):
        for value in values:
            check(_column_items(field, [value])[1:2], old, keep_md5, spaced, formatter)


@pytest.mark.parametrize("old", [True, False])
def test_signed_zeros_hand_spelled(old):
    item = {"type": "t", "Max": 0.0, "Max diff": 0.0}
    negative = {"type": "t", "Max": -0.0, "Max diff": -0.0}
    formatter = Formatter("json" if old else "db", True)
    first = formatter.many([{"a": item, "b": negative}])
    second = formatter.many([{"b": negative}, {"a": item}])
    assert first == ['{"a":{"type":"t","Max":"0.0","Max diff":"0.0"},"b":{"type":"t","Max":"-0.0","Max diff":"-0.0"}}']
    assert second == ['{"b":{"type":"t","Max":"-0.0","Max diff":"-0.0"}}', '{"a":{"type":"t","Max":"0.0","Max diff":"0.0"}}']
    mixed = formatter.many([{"a": {"type": "t", "Max": v}} for v in (1, 1.0, True, 0, False, 2, 2.0)])
    maxima = [json.loads(text)["a"]["Max"] for text in mixed]
    assert maxima == ["1", "1.0", "True", "0", "False", "2", "2.0"]
    shapes = formatter.many([{"a": {"type": "t", "Max": 1, "shape": s}} for s in ([1, 2], [1, True], [1.0, 2])])
    assert [json.loads(text)["a"]["shape"] for text in shapes] == ["[1, 2]", "[1, True]", "[1.0, 2]"]


def test_nan_and_infinities_spelled():
    items = {f"k{i}": {"type": "t", "Max": v, "Max diff": v, "MaxRelativeErr": v}
             for i, v in enumerate([math.nan, math.inf, -math.inf, float("nan")])}
    old = json.loads(Formatter("json", True).params(items))
    assert [(d["Max"], d["Max diff"], d["MaxRelativeErr"]) for d in old.values()] == [
        ("nan", "nan", "nan%"), ("inf", "inf", "inf%"), ("-inf", "-inf", "-inf%"), ("nan", "nan", "nan%")]
    new = json.loads(Formatter("db", True).params(items))
    assert [(d["Max"], d["Max diff"], d["MaxRelativeErr"]) for d in new.values()] == [
        ("nan", "nan", "nan%"), ("inf", "inf", "inf%"), ("-inf", "-inf", "-inf%"), ("nan", "nan", "nan%")]


# Values that compare equal but are spelled differently (0.0 / -0.0 in a ProcessGroup item, in a tuple or as numpy
# floats, 1 / True in a tuple) keep their own texts.
@pytest.mark.parametrize("case", ["group_id", "tuple", "tuple_bool", "numpy"])
def test_equal_values_keep_their_texts(case):
    if case == "group_id":
        dicts = [{"a": {"type": PG, "group_id": 0.0}}, {"a": {"type": PG, "group_id": -0.0}}]
    elif case == "tuple":
        dicts = [{"a": {"type": "t", "Max": 1, "shape": (0.0,)}}, {"a": {"type": "t", "Max": 1, "shape": (-0.0,)}}]
    elif case == "tuple_bool":
        dicts = [{"a": {"type": "t", "Max": 1, "shape": (1,)}}, {"a": {"type": "t", "Max": 1, "shape": (True,)}}]
    else:
        dicts = [{"a": {"type": "t", "Max": np.float64(0.0)}}, {"a": {"type": "t", "Max": np.float64(-0.0)}}]
    check(dicts, True, True, False)


# -------------------------------------------------------------------------------------------- 3. escaping


WEIRD = ['q"uote', "back\\slash", "new\nline", "tab\tcr\r", "ctl\x00\x01\x1f\x7f", "非ASCII张量", "é", "\u2028\u2029",
         "emoji \U0001F600", "per%cent %s %d", "'single' None", "{}[],:", "a.b 1.23456789 c", "  ", " ", "",
         "\ud800 lone"]


@pytest.mark.parametrize("old,keep_md5,spaced", MODES, ids=MODE_IDS)
def test_escaping(old, keep_md5, spaced):
    dicts = []
    for i, weird in enumerate(WEIRD):
        item = {"type": weird or "t", "dtype": weird, "shape": [i], "Max": weird if weird.strip() else 1.0,
                "data_name": weird, weird + "field": weird, "md5": weird, "Max diff": weird}
        dicts.append({weird: item, f"key{i}{weird}": {"type": PG, "group_ranks": [i], "group_id": weird,
                                                     "data_name": weird}})
    dicts.append({w: {"type": "t", "Max": 1, w: w} for w in WEIRD})
    check_everywhere(dicts, old, keep_md5, spaced)
    for text in Formatter("json" if old else "db", keep_md5, spaced).many(dicts):
        if "\ud800" not in text:
            json.loads(text)


# -------------------------------------------------------------------------------------- 4. STAT_CELLS floats


def _random_floats(seed: int, count: int) -> list:
    rng = random.Random(seed)
    values = [_random_float(rng) for _ in range(count)]
    return values + [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-05, 0.5, 1e16, 1.5e16, 5e-324, 9.9999999e-05]


@pytest.mark.parametrize("old,spaced", [(True, False), (False, True), (True, True), (False, False)])
def test_stat_cells_random_floats(old, spaced):
    text = T.text_json if old else T.text_db
    values = _random_floats(seed=11 + old, count=1000)
    fields = list(STAT_CELLS)
    others = [f for f in fields if f not in ("Max diff", "MaxRelativeErr")]
    dicts = [{f"k{i}": {"type": "torch.Tensor", "Max": v, "Max diff": v, others[i % 6]: -v, "MaxRelativeErr": v}}
             for i, v in enumerate(values)]
    formatter = Formatter("json" if old else "db", True, spaced)
    for attempt in range(2):           # cold, then warm caches
        got = formatter.many(dicts) if attempt == 0 else [formatter.params(d) for d in dicts]
        for i, (value, document) in enumerate(zip(values, got)):
            cells = json.loads(document)[f"k{i}"]
            assert cells["Max"] == text(value)
            assert cells["Max diff"] == text(repr(value))
            assert cells["MaxRelativeErr"] == text(repr(value) + "%")
            assert cells[others[i % 6]] == text(repr(-value) + STAT_CELLS[others[i % 6]])
            assert document == reference(dicts[i], old, True, spaced)


def test_stat_cells_hand_spelled():
    item = {"type": "torch.Tensor", "Max": 0.0013717176734644454, "Max diff": -0.0013717176734644454,
            "MaxRelativeErr": 4.560037062668932e-05, "Min diff": 2.5, "MinRelativeErr": 0.5, "Mean": 1e-05,
            "Mean diff": 1e-05, "MeanRelativeErr": 1e-05, "Norm": 0.1234567, "L2norm diff": 0.1234567,
            "NormRelativeErr": 123456.7890123}
    old = json.loads(Formatter("json", True).params({"k": item}))["k"]
    assert old == {"type": "torch.Tensor", "Max": "0.001372", "Max diff": "-0.001372",
                   "MaxRelativeErr": "4.560037e-05%", "Min diff": "2.5", "MinRelativeErr": "0.5%",
                   "Mean": "1.000000e-05", "Mean diff": "1e-05", "MeanRelativeErr": "1e-05%", "Norm": "0.123457",
                   "L2norm diff": "0.123457", "NormRelativeErr": "123456.789012%"}
    new = json.loads(Formatter("db", True).params({"k": item}))["k"]
    assert new == {"type": "torch.Tensor", "Max": "0.0013717176734644454", "Max diff": "-0.001372",
                   "MaxRelativeErr": "4.560037062668932e-05%", "Min diff": "2.5", "MinRelativeErr": "0.5%",
                   "Mean": "1e-05", "Mean diff": "1e-05", "MeanRelativeErr": "1e-05%", "Norm": "0.1234567",
                   "L2norm diff": "0.123457", "NormRelativeErr": "123456.789012%"}


def test_same_float_in_cell_and_statistic_in_one_call():
    for value, max_text, cell_text, rel_text in [(1e-05, "1.000000e-05", "1e-05", "1e-05%"),
                                                 (1.5e-07, "1.500000e-07", "1.5e-07", "1.5e-07%"),
                                                 (2.5e+20, "2.500000e+20", "2.5e+20", "2.5e+20%")]:
        formatter = Formatter("json", True)
        documents = formatter.many([{"a": {"type": "t", "Max": value}}, {"a": {"type": "t", "Max": 1.0,
                                                                              "Max diff": value,
                                                                              "MaxRelativeErr": value}},
                                    {"a": {"type": "t", "Max diff": value, "Max": value}}])
        parsed = [json.loads(d)["a"] for d in documents]
        assert parsed[0]["Max"] == max_text and parsed[2]["Max"] == max_text
        assert parsed[1]["Max diff"] == cell_text and parsed[2]["Max diff"] == cell_text
        assert parsed[1]["MaxRelativeErr"] == rel_text


def _many_floats(count: int) -> list:
    rng = random.Random(2024)
    values = []
    bits = np.random.default_rng(7).integers(0, 2 ** 63, size=count // 4, dtype=np.int64)
    values.extend(bits.view(np.float64).tolist())                 # any bit pattern (positive)
    values.extend((-np.abs(np.random.default_rng(8).standard_normal(count // 4))
                   * 10.0 ** np.random.default_rng(9).integers(-30, 30, count // 4)).tolist())
    values.extend(round(rng.uniform(-1000, 1000), rng.randint(0, 7)) for _ in range(count // 4))
    values.extend(_random_float(rng) for _ in range(count - len(values)))
    return values + [math.nan, math.inf, -math.inf, 0.0, -0.0]


def test_batch_helpers_equal_per_value_functions():
    values = _many_floats(100_000)
    assert F.float_texts_json(values) == [T.text_json(v) for v in values]
    assert F.float_texts_db(values) == [T.text_db(v) for v in values]
    texts = list(map(repr, values))
    assert F.cell_texts_json(values, "") == list(map(T.text_json, texts))
    assert F.cell_texts_db(values, "") == list(map(T.text_db, texts))
    some = values[::4] + values[-5:]         # the suffix is only appended: a quarter of the values
    texts = [repr(v) + "%" for v in some]
    assert F.cell_texts_json(some, "%") == list(map(T.text_json, texts))
    assert F.cell_texts_db(some, "%") == list(map(T.text_db, texts))


def _hard_floats(seed: int, count: int) -> list:
    """Floats where the column spelling (numpy rounding, orjson writing) could go wrong: values of 1 to 9
    significant digits over 50 decades (repr with and without exponent), exact ties of the 6-decimal and the
    7-digit rounding, neighbours of powers of ten, 9.99999... mantissas that round up to the next power."""
    rng = np.random.default_rng(seed)
    sizes = 10 ** rng.uniform(-20, 30, count) * rng.choice([-1, 1], count)
    digits = rng.integers(1, 10, count)
    short = [float("%.*e" % (d - 1, v)) for v, d in zip(sizes.tolist(), digits.tolist())]
    powers = 10.0 ** rng.integers(-17, 29, count)
    neighbours = np.concatenate([np.nextafter(powers, 0), powers, np.nextafter(powers, np.inf)]).tolist()
    ties = [float(f"{m}5e{e}") for m, e in zip(rng.integers(10 ** 6, 10 ** 7, count).tolist(),
                                                 rng.integers(-25, 25, count).tolist())]
    ties += ((rng.integers(1, 10 ** 9, count) * 2 + 1) / 128).tolist()           # exact ties of "%.6f"
    nines = [float(f"9.99999{d}e{e}") for d, e in zip(rng.integers(0, 10 ** 6, count).tolist(),
                                                       rng.integers(-20, 28, count).tolist())]
    values = sizes.tolist() + short + neighbours + ties + nines + [-v for v in nines] + _many_floats(count)
    random.Random(seed).shuffle(values)
    return values


@pytest.mark.parametrize("quote", ["", '"'])
@pytest.mark.filterwarnings("error")            # NaN, infinities, subnormals: no numpy warning either
def test_column_spelling_of_hard_floats(quote):
    values = _hard_floats(seed=3, count=4000) + [math.nan, math.inf, -math.inf, 5e-324, 1e-320, 1.7976931348623157e308]
    assert F.float_texts_json(values, quote) == [quote + T.text_json(v) + quote for v in values]
    assert F.float_texts_db(values, quote) == [quote + T.text_db(v) + quote for v in values]
    for suffix in ("", "%"):
        texts = [repr(v) + suffix for v in values]
        assert F.cell_texts_json(values, suffix, quote) == [quote + T.text_json(t) + quote for t in texts]
        assert F.cell_texts_db(values, suffix, quote) == [quote + T.text_db(t) + quote for t in texts]


def test_column_spelling_takes_numpy_for_most_floats(monkeypatch):
    """Nearly all floats of a column are spelled without the per-value functions (which are the slow path)."""
    counted = []
    each = F._cell_texts_json_each
    monkeypatch.setattr(F, "_cell_texts_json_each", lambda values, suffix: counted.extend(values) or each(values, suffix))
    monkeypatch.setattr(F, "_float_texts_json_each", lambda values: counted.extend(values) or [])
    values = (10 ** np.random.default_rng(1).uniform(-12, 7, 10_000)).tolist()
    F.cell_texts_json(values, "%", '"')
    assert len(counted) < 100
    rng = np.random.default_rng(2)        # (from 1e7 up to 1e16 more or all of them are spelled one by one)
    values = (10 ** np.concatenate([rng.uniform(-12, 7, 8_000), rng.uniform(16, 20, 2_000)])).tolist()
    counted.clear()
    monkeypatch.setattr(F, "_float_texts_json_each", lambda values: counted.extend(values) or ["x"] * len(values))
    F.float_texts_json(values, '"')
    assert len(counted) < 100


def test_column_spelling_falls_back_when_orjson_writes_otherwise(monkeypatch):
    """Were orjson ever to write a float otherwise (an exponent, fewer digits), the rows are spelled one by one."""
    import orjson

    def scientific(numbers, option=None):
        return ("[" + ",".join("%.17e" % n for n in numbers.tolist()) + "]").encode()

    monkeypatch.setattr(F, "orjson", type("O", (), {"dumps": staticmethod(scientific),
                                                    "OPT_SERIALIZE_NUMPY": orjson.OPT_SERIALIZE_NUMPY}))
    values = _hard_floats(seed=4, count=300)
    assert F.float_texts_json(values, '"') == ['"' + T.text_json(v) + '"' for v in values]
    assert F.cell_texts_json(values, "%") == [T.text_json(repr(v) + "%") for v in values]


# ---------------------------------------------------------------------------------------- 5. mixed columns


@pytest.mark.parametrize("old,keep_md5,spaced", SOME, ids=SOME_IDS)
@pytest.mark.parametrize("field", ["Max", "Norm", "Max diff", "NormRelativeErr", "dtype", "md5"])
def test_mixed_kind_column(field, old, keep_md5, spaced):
    rng = random.Random(field)
    pool = ["N/A", "1.23456789", " ", "None", "0.5%", 0.5, 1e-05, -0.0, 0.0, 3, 0, True, False, None, math.nan,
            math.inf, [1, 2], [1.0], 123456.7890123, "0.001372", 2, 2.0]
    values = pool + [rng.choice(pool) for _ in range(200)] + [_random_float(rng) for _ in range(50)]
    items = {f"k{i}": {"type": "torch.Tensor", "Max": 1.0, field: v} if field != "Max" else
             {"type": "torch.Tensor", "Max": v} for i, v in enumerate(values)}
    check_everywhere([items, dict(list(items.items())[::-1]), {"k": items["k0"]}], old, keep_md5, spaced)


# ---------------------------------------------------------------------------------- compare.stats.stat_diff


def _cell(value, percent: bool) -> str:
    """The text a number of stat_diff(numbers=True) stands for."""
    if type(value) is float:
        return repr(value) + ("%" if percent else "")
    return value


def _stat_rows() -> tuple[list, list]:
    rng = random.Random(99)
    target, golden = [], []
    for _ in range(2000):
        t = _random_float(rng)
        g = rng.choice([_random_float(rng), t, -t, t * (1 + 1e-9), 0.0, -0.0])
        if math.isfinite(t) and math.isfinite(g) and abs(t) < 1e300 and abs(g) < 1e300:
            target.append(t)
            golden.append(g)
    odd = [(1, 2), (2, 2), (3, 0), (0, 0), (10 ** 20, 3), (True, False), (True, True), (1, 2.5), (2.5, 1),
           (1.0, 1), (1, 1.0), ("N/A", 1.0), (1.0, "N/A"), ("nan", "nan"), (math.nan, 1.0), (1.0, math.nan),
           (math.inf, 1.0), (1.0, math.inf), (-math.inf, math.inf), (math.inf, math.inf), ("npu:0", "cpu"),
           ("abc", "abd"), ("abc", "abc"), (None, None), (None, 1.0), ("1.5", "2.5"), ("1.5", 2.5),
           (0.0, -0.0), (-0.0, 0.0), (0.0, 0.0), (5e-324, 0.0), ("inf", 1.0), (1.5, "Nan")]
    for t, g in odd:
        target.append(t)
        golden.append(g)
    return target, golden


def test_stat_diff_numbers():
    target, golden = _stat_rows()
    diffs, rels, fractions = stat_diff(target, golden, numbers=True)
    text_diffs, text_rels, text_fractions = stat_diff(target, golden)
    assert len(diffs) == len(rels) == len(target)
    np.testing.assert_array_equal(fractions, text_fractions)
    for t, g, d, r, td, tr in zip(target, golden, diffs, rels, text_diffs, text_rels):
        # repr-based texts of numbers=False are those of the numbers
        assert _cell(d, False) == td and _cell(r, True) == tr, (t, g)
        # finite floats and integers exact as floats are numbers (integers as floats: 5 - 6 is -1.0, issue 28)
        both_float = all((type(v) is float and math.isfinite(v)) or (type(v) is int and abs(v) < 2 ** 53)
                         for v in (t, g))
        if both_float:
            t, g = float(t), float(g)
        if both_float and (t != g or math.copysign(1, t) != math.copysign(1, g)):
            assert type(d) is float and d == t - g and math.copysign(1, d) == math.copysign(1, t - g), (t, g)
            if g == 0:
                assert r == "inf"
            else:
                assert type(r) is float and r == abs((t - g) / g * 100), (t, g)
        elif both_float:
            assert d == "0" and r == "0"
        elif type(t) is not float and type(g) is not float and not (type(t) is str and type(g) is str):
            assert d == td and r == tr and type(d) is str and type(r) is str
    # numeric texts and int/float pairs go the numeric way too: numbers there as well, of the same texts
    d, r, _ = stat_diff(["1.5", 1, 1.0], ["2.5", 2.5, 1], numbers=True)
    assert d == [-1.0, -1.5, "0"] and r == [40.0, 60.0, "0"]
    assert stat_diff(["1.5", 1, 1.0], ["2.5", 2.5, 1])[:2] == (["-1.0", "-1.5", "0"], ["40.0%", "60.0%", "0"])
    # a few by hand
    d, r, _ = stat_diff([1.5, 1.0, 2.0, 3.0, 4, "N/A"], [0.5, 0.0, 2.0, 4.0, 2, 1.0], numbers=True)
    assert d == [1.0, 1.0, "0", -1.0, 2.0, "N/A"]
    assert r == [200.0, "inf", "0", 25.0, 100.0, "N/A"]


def test_stat_diff_numbers_through_formatter():
    """Cells of numbers=True spelled by the Formatter equal the texts of numbers=False spelled per value."""
    target, golden = _stat_rows()
    numbers = dict(zip(("Max diff", "MaxRelativeErr"), stat_diff(target, golden, numbers=True)[:2]))
    texts = dict(zip(("Max diff", "MaxRelativeErr"), stat_diff(target, golden)[:2]))
    for old in (True, False):
        text = T.text_json if old else T.text_db
        formatter = Formatter("json" if old else "db", True)
        items = {f"k{i}": {"type": "t", "Max": 1.0, "Max diff": numbers["Max diff"][i],
                           "MaxRelativeErr": numbers["MaxRelativeErr"][i]} for i in range(len(target))}
        spelled = json.loads(formatter.params(items))
        for i in range(len(target)):
            assert spelled[f"k{i}"]["Max diff"] == text(texts["Max diff"][i])
            assert spelled[f"k{i}"]["MaxRelativeErr"] == text(texts["MaxRelativeErr"][i])


# ----------------------------------------------------------------- 6. compare cells given by row (Graph.cells)


def _merged(params: dict, rows: dict | None, cells: dict) -> dict:
    """The parameter dicts with their rows' cells assigned into them (a field of a column's name keeps its
    place and takes the cell), as a compared node's parameters read."""
    out = {}
    for key, item in params.items():
        item = dict(item)
        if rows and key in rows:
            for column, values in cells.items():
                item[column] = values[rows[key]]
        out[key] = item
    return out


@pytest.mark.parametrize("old,keep_md5,spaced", MODES, ids=MODE_IDS)
def test_cells_by_row_equal_cells_in_the_dicts(old, keep_md5, spaced):
    rng = random.Random(7)
    dicts = _dicts(11, 300)
    columns = list(STAT_CELLS) + ["Result", "Requires_grad Consistent"]
    count = 500
    cells = {column: [_random_float(rng) if column in STAT_CELLS and rng.random() < 0.7
                      else rng.choice(["0", "N/A", "inf", "pass", "error", "12.5%", "Diff"]) for _ in range(count)]
             for column in columns}
    rows = []
    for params in dicts:
        chosen = {key: rng.randrange(count) for key in params if rng.random() < 0.6}
        rows.append(chosen or None)
    # a parameter that has a field of a compare column's name takes the cell in that field's place
    dicts[0] = {"k": {"type": "torch.Tensor", "Max diff": "own", "Max": 1.5, "md5": "0"}}
    rows[0] = {"k": 3}
    merged = [_merged(params, found, cells) for params, found in zip(dicts, rows)]
    expected = Formatter("json" if old else "db", keep_md5, spaced).many(merged)
    formatter = Formatter("json" if old else "db", keep_md5, spaced)
    assert formatter.many(dicts, rows, cells) == expected
    assert formatter.many(dicts, rows, cells) == expected          # warm caches
    assert [formatter.params(d, r, cells) for d, r in zip(dicts, rows)] == expected
    assert json.loads(expected[0])["k"]["Max diff"] != "own"


def test_long_decimal_and_template_searches_agree_with_their_patterns_and_stay_linear():
    """Texts of a dump are searched in linear time (issue 28): the long-decimal search of the .vis texts and the
    `...Template(` line of a stack equal the patterns they replaced, and a 200k-character run of digits or
    capitals takes milliseconds (quadratic before)."""
    import random
    import re
    import time

    from msprobe.graph.texts import _LONG_DECIMAL
    from msprobe.graph.tree import _is_template_line

    old_decimal, old_template = re.compile(r"-?\d+\.\d{7,}%?"), re.compile(r"[A-Z]\w*Template\(")
    pieces = ["1", "23", ".", "-", "%", "1234567", "a", "A", "Template(", "_", " ", "é", "Z"]
    rng = random.Random(28)
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        assert _LONG_DECIMAL.findall(text) == old_decimal.findall(text), text
        assert _is_template_line(text) == bool(old_template.search(text)), text
    started = time.process_time()      # CPU time: a loaded machine must not fail it, a quadratic pattern would
    assert _LONG_DECIMAL.sub("", "1" * 200_000 + ".5") == "1" * 200_000 + ".5"
    assert not _is_template_line("A" * 200_000 + " Template(")
    assert time.process_time() - started < 3.0
