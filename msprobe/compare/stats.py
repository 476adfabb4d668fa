"""Statistics-mode diffs and relative errors of Max/Min/Mean/Norm (spec §4.4), over all rows at once."""

from __future__ import annotations

import math

import numpy as np

from msprobe.compare.error_origin import EPS, numel
from msprobe.frameworks.dtypes import canonical
from msprobe.table.cells import NA, cell_text, stat_number
from msprobe.table.floats import reprs

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
        return classify(stat_number(value))        # beyond the float range: an infinity
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
        number = stat_number(value)
        return (OTHER, 0.0) if number is None else classify(number)
    return OTHER, 0.0


def stat_diff(target_values: list, golden_values: list, numbers: bool = False) -> tuple[list, list, np.ndarray]:
    """Diff text, relative-error text and relative error as a fraction (NaN where not numeric) per row.

    Rows whose two values are finite numbers are computed with numpy at once, integers as floats (`5 - 6` is
    `-1.0`, and `5` equals `5.0`, as the reference writes them); every other row (NaN/Inf however spelled,
    booleans, text, N/A) goes through the case table of spec §4.4 one by one.
    numbers: the numeric rows that differ (two floats, or numbers as text) get the diff and the relative error in
    percent as floats, whose cell texts are repr(diff) and repr(error) + "%" (for a caller that spells them its own
    way); texts otherwise.
    """
    rows = len(target_values)
    t = np.array([v if type(v) is float else _int_or_nan(v) for v in target_values], dtype=np.float64)
    g = np.array([v if type(v) is float else _int_or_nan(v) for v in golden_values], dtype=np.float64)
    fast = np.isfinite(t) & np.isfinite(g)
    diffs = np.full(rows, None, dtype=object)
    rels = np.full(rows, None, dtype=object)
    fractions = np.full(rows, np.nan)
    # equal floats (same sign of zero) have equal texts: "0"
    same = fast & (t == g) & (np.signbit(t) == np.signbit(g))
    diffs[same] = "0"
    rels[same] = "0"
    fractions[same] = 0.0
    differing = np.flatnonzero(fast & ~same)
    if len(differing):
        _fill_numeric(differing, t[differing], g[differing], diffs, rels, fractions, numbers)
    slow_rows, slow_t, slow_g = [], [], []
    for row in np.flatnonzero(~fast).tolist():
        n, b = target_values[row], golden_values[row]
        if type(n) is int and type(b) is int and max(abs(n), abs(b)) < _FLOAT_RANGE:
            # integers above 2**53 (not exact as floats): exact arithmetic, written as the float it is
            diff = n - b
            if diff == 0:
                diffs[row] = rels[row] = "0"
                fractions[row] = 0.0
            else:
                diffs[row] = repr(float(diff))
                if b == 0:
                    rels[row], fractions[row] = "inf", math.inf
                else:
                    rel = abs(diff / b * 100)
                    rels[row], fractions[row] = f"{rel!r}%", rel / 100
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
            slow_rows.append(row)
            slow_t.append(value_n)
            slow_g.append(value_b)
        else:
            text = _PAIR_RESULT.get((class_n, class_b), NA)
            diffs[row] = rels[row] = text
            if text in ("inf", "-inf"):
                fractions[row] = float(text)
    if slow_rows:
        _fill_numeric(np.asarray(slow_rows), np.asarray(slow_t, dtype=np.float64),
                      np.asarray(slow_g, dtype=np.float64), diffs, rels, fractions, numbers)
    return diffs.tolist(), rels.tolist(), fractions


_EXACT = 2 ** 53             # integers below this are exact as floats
_FLOAT_RANGE = 2 ** 1023     # integers below this (and their differences) convert to floats


def _int_or_nan(value) -> float:
    """An int statistic that is exact as a float, as that float; NaN for everything else but floats."""
    return float(value) if type(value) is int and -_EXACT < value < _EXACT else math.nan


def _fill_numeric(rows: np.ndarray, n: np.ndarray, b: np.ndarray, diffs, rels, fractions, numbers: bool) -> None:
    """n - b as text, abs((n - b) / b * 100) as text with % ("inf" when b is 0), for numeric rows; with numbers,
    as floats (the error in percent) but for "inf"."""
    zero = b == 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        diff = n - b
        rel = np.abs(diff / np.where(zero, 1.0, b) * 100)
    if numbers:
        diffs[rows] = diff.tolist()
        rel_texts = np.array(rel.tolist(), dtype=object)
    else:
        diffs[rows] = reprs(diff)
        rel_texts = np.array(reprs(rel, "%"), dtype=object)
    rel_texts[zero] = "inf"
    rels[rows] = rel_texts
    fractions[rows] = np.where(zero, np.inf, rel / 100)


def unmatched_diff(rows: int) -> tuple[list, list, np.ndarray]:
    return [NA] * rows, [NA] * rows, np.full(rows, np.nan)


# Two collectors (two frameworks, or ours against the reference's, which reduces in the framework's float32) may
# write the Mean and Norm of one tensor a few units of rounding apart: the accumulation of a sum over n elements
# in float32 errs by up to ~log2(n) units (pairwise or blocked sums), and each writes its value rounded to the
# tensor's dtype (one unit of that dtype).
STATISTICS_ROUNDING_UNITS = 4.0
_F32_EPS = 2.0 ** -23


def statistics_rounding(stats: tuple, dtypes: tuple, shapes: tuple) -> tuple:
    """stats (error_origin.stat_floats: target and golden Max, Min, Mean, Norm as float64 arrays) with the target's
    Mean and Norm replaced by the golden's where they differ by no more than the statistics rounding of two
    collectors, and Max and Min are equal (those are exact in every collector), on rows of one floating dtype:
    such a row holds the same tensor on both sides. For dumps made by different collectors or frameworks."""
    (t_max, t_min, t_mean, t_norm), (g_max, g_min, g_mean, g_norm) = stats
    rows = len(g_norm)
    if not rows:
        return stats
    own = np.array([EPS.get(canonical(a), 0.0) if a is not None and canonical(a) == canonical(b) else 0.0
                    for a, b in zip(*dtypes)], dtype=np.float64)
    count = np.array([numel(s) for s in shapes[1]], dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        units = STATISTICS_ROUNDING_UNITS + np.log2(np.where(count > 1, count, 1.0))
        share = units * np.maximum(own, _F32_EPS) + own       # relative: accumulation, then the dtype's rounding
        magnitude = np.fmax(np.abs(g_max), np.abs(g_min))
        same_ends = (((t_max == g_max) | (np.isnan(t_max) & np.isnan(g_max)))
                     & ((t_min == g_min) | (np.isnan(t_min) & np.isnan(g_min))))
        close_mean = np.abs(t_mean - g_mean) <= share * magnitude
        close_norm = np.abs(t_norm - g_norm) <= share * np.abs(g_norm)
        snap = (own > 0) & np.isfinite(count) & same_ends & close_mean & close_norm & np.isfinite(g_norm)
    if not snap.any():
        return stats
    return ((t_max, t_min, np.where(snap, g_mean, t_mean), np.where(snap, g_norm, t_norm)),
            (g_max, g_min, g_mean, g_norm))
