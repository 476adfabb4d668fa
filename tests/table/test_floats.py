"""table/floats.py: the texts of many floats at once are repr's texts, on every exponent and every edge."""

from __future__ import annotations

import math

import numpy as np

from msprobe.table.cells import cell_text, column_texts
from msprobe.table.csv_writer import csv_text
from msprobe.table.floats import reprs


def _edges() -> list:
    values = [0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 1.0, 2.0 ** 53,
              2.0 ** 53 + 2, 0.1, 1 / 3, 123456789.0, 1e16 - 2, 9999999999999998.0]
    for power in range(-324, 309):
        ten = float(f"1e{power}")
        values += [ten, float(np.nextafter(ten, 0)), float(np.nextafter(ten, math.inf)), 1.5 * ten, 9.99 * ten]
    return values + [-v for v in values]


def test_reprs_equal_repr_on_every_exponent_and_edge():
    rng = np.random.default_rng(7)
    for exponent in range(-1074, 1024, 3):
        values = np.ldexp(rng.uniform(1, 2, 40), exponent) * rng.choice([-1.0, 1.0], 40)
        assert reprs(values) == [repr(v) for v in values.tolist()], exponent
    edges = _edges()
    assert reprs(edges) == [repr(v) for v in edges]
    assert reprs(edges, "%") == [repr(v) + "%" for v in edges]


def test_reprs_of_random_bit_patterns_and_non_finite_values():
    bits = np.random.default_rng(3).integers(0, 2 ** 64, 100_000, dtype=np.uint64).view(np.float64)
    assert reprs(bits) == [repr(v) for v in bits.tolist()]      # NaNs and infinities among them
    assert reprs([math.nan, math.inf, -math.inf, 1e-7], "%") == ["nan%", "inf%", "-inf%", "1e-07%"]
    assert reprs([]) == []
    assert reprs([1.5e-5, 2e-9, 1e-10, 1e16, 1e-4]) == ["1.5e-05", "2e-09", "1e-10", "1e+16", "0.0001"]


def test_column_texts_spell_every_kind_as_cell_text_does():
    values = [1.5, "N/A", None, True, False, 3, 2 ** 70, math.nan, math.inf, -math.inf, -0.0, 1e-7, 2.5e-5,
              np.float32(0.5), "text", 0.1] * 50
    assert column_texts(values) == [cell_text(v) for v in values]
    assert column_texts(values, csv_text) == [csv_text(v) for v in values]
    assert column_texts([True, False, True]) == ["True", "False", "True"]
    assert column_texts(["a", "b"]) == ["a", "b"]
    assert column_texts([]) == []
