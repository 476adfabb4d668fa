"""Judging one MindSpore output against its benchmark (spec acc_check.md §4.4, DECISIONS 16). numpy only.

Cosine = (1e-8 + b·t) / (1e-8 + ‖b‖·‖t‖) on the flattened float64 arrays, pass when > 0.99; MaxAbsErr = max|b − t|,
pass when below the threshold (`--max-abs-err`, default 0.0001 as documented); MaxRelativeErr = max(|b − t| / d),
d = |b| except 1e-8 where b == 0, computed only. The output passes when both Cosine and MaxAbsErr pass; a metric
that cannot be computed (not numbers, or shapes differ) is SKIP and the output is an error. Identical NaN/inf
elements count as equal.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from msprobe.acc_check.common import ERROR, PASS, OutputResult

COSINE_THRESHOLD = 0.99
EPSILON = 1e-8
MAX_ABS_ERR = 1e-4   # DECISIONS 16: the documented threshold (the reference's code uses 0.001)


def cosine_error_text() -> str:
    return f"cosine similarity is less than threshold: {COSINE_THRESHOLD} "


def max_abs_error_text(threshold: float) -> str:
    return f"max absolute difference is greater than threshold: {threshold} "


SKIP_TEXTS = {"Cosine": "two inputs are not valid for computing cosine similarity, skip comparing ",
              "MaxAbsErr": "two inputs are not valid for computing max absolute difference, skip comparing "}


@dataclass
class Value:
    """One output, framework-free: its float64 array (None when it is not numeric), dtype text and the raw value
    (for non-numeric outputs)."""

    array: np.ndarray | None
    dtype: str
    raw: object = None

    @property
    def shape(self):
        return None if self.array is None else tuple(self.array.shape)


def compare_values(bench: Value, tested: Value, max_abs_err: float = MAX_ABS_ERR) -> OutputResult:
    shape = str(bench.shape) if bench.shape is not None else ""
    row = OutputResult(bench.dtype, tested.dtype, shape, PASS, "",
                       {"Cosine": None, "MaxAbsErr": None, "MaxRelativeErr": None})
    if bench.array is None and tested.array is None:
        # two non-numeric outputs (a dtype, a string): equal or not
        same = bench.raw == tested.raw
        row.status = PASS if same else ERROR
        row.message = "" if same else f"bench output {bench.raw!r} differs from tested output {tested.raw!r} "
        return row
    if bench.array is None or tested.array is None or bench.shape != tested.shape:
        row.status = ERROR
        row.message = SKIP_TEXTS["Cosine"] + SKIP_TEXTS["MaxAbsErr"]
        return row
    b = bench.array.reshape(-1)
    t = tested.array.reshape(-1)
    with np.errstate(all="ignore"):
        same = (b == t) | (np.isnan(b) & np.isnan(t))
        special = same & ~np.isfinite(b)
        if special.any():
            b = np.where(special, 0.0, b)
            t = np.where(special, 0.0, t)
        diff = np.abs(b - t)
        cosine = float((EPSILON + np.dot(b, t)) / (EPSILON + np.linalg.norm(b) * np.linalg.norm(t)))
        max_abs = float(np.max(diff)) if diff.size else 0.0
        denominator = np.abs(b) + (b == 0) * EPSILON
        max_rel = float(np.max(diff / denominator)) if diff.size else 0.0
    row.metrics.update({"Cosine": cosine, "MaxAbsErr": max_abs, "MaxRelativeErr": max_rel})
    cosine_ok = cosine > COSINE_THRESHOLD
    max_abs_ok = max_abs < max_abs_err
    row.status = PASS if cosine_ok and max_abs_ok else ERROR
    row.message = ("" if cosine_ok else cosine_error_text()) + ("" if max_abs_ok else max_abs_error_text(max_abs_err))
    return row
