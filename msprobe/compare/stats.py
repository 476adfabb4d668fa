"""Statistics-mode diffs and relative errors of Max/Min/Mean/Norm (spec §4.4), over all rows at once."""

from __future__ import annotations

import math

import numpy as np

from msprobe.report.cells import NA, cell_text

NUM, NAN, INF, NEG_INF, DEVICE, NA_CODE, OTHER = range(7)
_DEVICE_WORDS = ("npu", "cpu", "cuda")

# Result of comparing two classes that are not both numbers and whose texts differ.
_PAIR_RESULT: dict[tuple[int, int], str] = {}
for _a in (NUM, NAN, INF, NEG_INF):
    _PAIR_RESULT[(NAN, _a)] = _PAIR_RESULT[(_a, NAN)] = "Nan"
_PAIR_RESULT.update({(INF, NUM): "inf", (INF, NEG_INF): "inf", (NEG_INF, NUM): "-inf", (NEG_INF, INF): "-inf",
                     (NUM, INF): "-inf", (NUM, NEG_INF): "inf", (DEVICE, DEVICE): NA})
for _a in (DEVICE, OTHER):
    for _b in (NUM, NAN, INF, NEG_INF, DEVICE, OTHER):
        _PAIR_RESULT.setdefault((_a, _b), "Diff")
        _PAIR_RESULT.setdefault((_b, _a), "Diff")


def classify(value) -> tuple[int, float]:
    """Class of one statistic value and its number (0.0 when not a number)."""
    kind = type(value)
    if kind is float:
        if value != value:
            return NAN, 0.0
        if value == math.inf:
            return INF, 0.0
        if value == -math.inf:
            return NEG_INF, 0.0
        return NUM, value
    if kind is int:
        return NUM, float(value)
    if kind is str:
        if value == NA:
            return NA_CODE, 0.0
        lowered = value.strip().lower()
        if lowered == "nan":
            return NAN, 0.0
        if lowered == "inf":
            return INF, 0.0
        if lowered == "-inf":
            return NEG_INF, 0.0
        if any(word in lowered for word in _DEVICE_WORDS):
            return DEVICE, 0.0
        try:
            number = float(value)
        except ValueError:
            return OTHER, 0.0
        return classify(number)
    return OTHER, 0.0


def _exact_int(value) -> bool:
    return type(value) is int


def stat_diff(target_values: list, golden_values: list) -> tuple[list, list, np.ndarray]:
    """Diff text, relative-error text and relative error as a fraction (NaN where not numeric) per row.

    golden_values holds None... for unmatched rows the caller passes the marker NA ("N/A").
    """
    rows = len(target_values)
    diffs: list = [None] * rows
    rels: list = [None] * rows
    fractions = np.full(rows, np.nan)
    num_rows_t, num_rows_g, num_index = [], [], []
    for row, (n, b) in enumerate(zip(target_values, golden_values)):
        kind_n, kind_b = type(n), type(b)
        # Fast path: two plain numbers.
        if (kind_n is float or kind_n is int) and (kind_b is float or kind_b is int) \
                and math.isfinite(n) and math.isfinite(b):
            if kind_n is kind_b and n == b and (kind_n is int or math.copysign(1, n) == math.copysign(1, b)):
                diffs[row] = rels[row] = "0"
                fractions[row] = 0.0
            elif kind_n is int and kind_b is int:
                diff = n - b
                diffs[row] = str(diff)
                if b == 0:
                    rels[row] = "inf"
                    fractions[row] = math.inf
                else:
                    rel = abs(diff / b * 100)
                    rels[row] = f"{rel!r}%"
                    fractions[row] = rel / 100
            else:
                num_rows_t.append(n)
                num_rows_g.append(b)
                num_index.append(row)
            continue
        if cell_text(n) == cell_text(b):
            diffs[row] = rels[row] = "0"
            fractions[row] = 0.0
            continue
        class_n, value_n = classify(n)
        class_b, value_b = classify(b)
        if class_n == NA_CODE or class_b == NA_CODE:
            diffs[row] = rels[row] = NA
        elif class_n == NUM and class_b == NUM:
            num_rows_t.append(value_n)
            num_rows_g.append(value_b)
            num_index.append(row)
        else:
            text = _PAIR_RESULT.get((class_n, class_b), NA)
            diffs[row] = rels[row] = text
            if text in ("inf", "-inf"):
                fractions[row] = float(text)
    if num_index:
        n_arr = np.asarray(num_rows_t, dtype=np.float64)
        b_arr = np.asarray(num_rows_g, dtype=np.float64)
        diff = n_arr - b_arr
        zero = b_arr == 0
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.abs(diff / np.where(zero, 1.0, b_arr) * 100)
        rel[zero] = np.inf
        for row, d, r, z in zip(num_index, diff.tolist(), rel.tolist(), zero.tolist()):
            diffs[row] = repr(d)
            if z:
                rels[row] = "inf"
                fractions[row] = math.inf
            else:
                rels[row] = f"{r!r}%"
                fractions[row] = r / 100
    return diffs, rels, fractions


def unmatched_diff(rows: int) -> tuple[list, list, np.ndarray]:
    return [NA] * rows, [NA] * rows, np.full(rows, np.nan)
