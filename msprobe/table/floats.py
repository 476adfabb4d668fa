"""repr() of many floats at once: the texts of the result tables' float cells, made in C.

orjson writes a float as its shortest round-trip decimal, the digits repr writes too; only the layout differs, in
two ranges: an exponent of one digit (1e-9 <= |v| < 1e-5: orjson `1e-7`, repr `1e-07`), mended on the joined text
of those values, and the decade from 1e-5 to 1e-4, which orjson writes without an exponent (`0.000015`, repr
`1.5e-05`): those values, and NaN and the infinities (orjson writes null), are spelled by repr one by one. Whether
repr gives a value an exponent of one digit is exact from the value: a decimal below 1e-9 reads back as a float at
most float(1e-9). tests/table/test_floats.py checks every text against repr on values of every exponent and
the edges of each decade.
"""

from __future__ import annotations

from itertools import repeat
from operator import is_

import numpy as np
import orjson


def reprs(values, suffix: str = "") -> list:
    """[repr(float(v)) + suffix for v in values] of a float64 array (or a list of floats)."""
    array = np.asarray(values, dtype=np.float64)
    if not len(array):
        return []
    size = np.abs(array)
    with np.errstate(invalid="ignore"):
        padded = (size >= 1e-9) & (size < 1e-5)       # orjson: e-7, repr: e-07
        slow = ~np.isfinite(size) | ((size >= 1e-5) & (size < 1e-4))
    if not padded.any() and not slow.any():
        return _joined(array, suffix)
    out = np.empty(len(array), dtype=object)
    plain = ~(padded | slow)
    if plain.any():
        out[plain] = _joined(array[plain], suffix)
    if padded.any():
        out[padded] = _joined(array[padded], suffix, "e-0")
    rest = np.flatnonzero(slow)
    out[rest] = [repr(value) + suffix for value in array[rest].tolist()]
    return out.tolist()


def _joined(array: np.ndarray, suffix: str, exponent: str = "") -> list:
    """repr + suffix of finite floats from orjson's text of them all; `exponent`: every value has a negative exponent
    of one digit, written so (e-0)."""
    body = orjson.dumps(array, option=orjson.OPT_SERIALIZE_NUMPY).decode()[1:-1]
    if exponent:
        body = body.replace("e-", exponent)
    if suffix:
        return (body.replace(",", suffix + ",") + suffix).split(",")
    return body.split(",")


def column_texts(values: list, spell) -> list:
    """Texts of a column holding floats (cells.column_texts): strings as they are, finite floats by repr, everything
    else (NaN, infinities, ints, None, bools) by spell."""
    count = len(values)
    objects = np.fromiter(values, dtype=object, count=count)
    kinds = list(map(type, values))
    is_float = np.fromiter(map(is_, kinds, repeat(float)), dtype=bool, count=count)
    numbers = objects[is_float].astype(np.float64)
    finite = np.isfinite(numbers)
    where = np.flatnonzero(is_float)
    objects[where[finite]] = reprs(numbers[finite])
    others = np.flatnonzero(~(np.fromiter(map(is_, kinds, repeat(str)), dtype=bool, count=count) | is_float))
    if not finite.all():
        others = np.concatenate((others, where[~finite]))
    if len(others):
        objects[others] = [spell(value) for value in objects[others].tolist()]
    return objects.tolist()

