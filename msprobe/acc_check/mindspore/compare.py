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


# A cast (Tensor.to(float16), ops.cast, Tensor.half, ...) is exact to its target dtype's rounding: its output is
# judged by that rounding (every element within one unit of it of the benchmark's, or the dtype's smallest
# subnormal) instead of MaxAbsErr, which calls every float16 cast of values near 1 an error (issue 32).
CASTS = frozenset("to astype cast half float double bfloat16 type type_as".split())
# (spacing at 1, smallest subnormal) of the dtypes a cast rounds to
CAST_ROUNDING = {"float16": (2.0 ** -10, 2.0 ** -24), "bfloat16": (2.0 ** -7, 2.0 ** -133),
                 "float32": (2.0 ** -23, 2.0 ** -149)}


def cast_rounding_text(dtype: str) -> str:
    return f"a cast to {dtype}: judged by its rounding, the difference is greater than one unit of it "


def compare_values(bench: Value, tested: Value, max_abs_err: float = MAX_ABS_ERR,
                   cast_to: str | None = None) -> OutputResult:
    """cast_to: the canonical dtype of a cast's output (CAST_ROUNDING), judged by that dtype's rounding."""
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
    if cast_to in CAST_ROUNDING:
        unit, tiny = CAST_ROUNDING[cast_to]
        with np.errstate(all="ignore"):
            max_abs_ok = bool(np.all(diff <= unit * np.abs(b) + tiny))
        failed = cast_rounding_text(cast_to)
    else:
        max_abs_ok = max_abs < max_abs_err
        failed = max_abs_error_text(max_abs_err)
    row.status = PASS if cosine_ok and max_abs_ok else ERROR
    row.message = ("" if cosine_ok else cosine_error_text()) + ("" if max_abs_ok else failed)
    return row
