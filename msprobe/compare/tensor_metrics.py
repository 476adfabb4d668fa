"""Real-data metrics of one tensor pair (spec §4.5), streamed in chunks so memory stays bounded."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from msprobe.table.cells import NA

CHUNK = 1 << 18  # elements per chunk: each pass over a chunk stays in the CPU caches
FLOAT64_EPS = float(np.finfo(np.float64).eps)

UNSUPPORTED = "unsupported"
SHAPE_UNMATCHED = "shape unmatched"

NAN_TEXT = "Nan"

METRICS = ("Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio",
           "Five Thousandths Err Ratio")

MSG_EMPTY = "This is empty data, can not compare."
MSG_SHAPE = "Shape of NPU and bench tensor do not match. Skipped."
MSG_ZERO_D = ("This is type of 0-d tensor, can not calculate 'Cosine', 'EucDist', 'One Thousandth Err Ratio' "
              "and 'Five Thousandths Err Ratio'. ")
MSG_NAN_POSITION = "The position of inf or nan in NPU and bench Tensor do not match."
MSG_DTYPE = "Dtype of NPU and bench tensor do not match."
MSG_NPU_ZERO = "Cannot compare by Cosine Similarity, All the data is Zero in npu dump data."
MSG_BENCH_ZERO = "Cannot compare by Cosine Similarity, All the data is Zero in Bench dump data."
MSG_COSINE_NAN = "Cannot compare by Cosine Similarity, the dump data has NaN."
MSG_MAX_ABS_NAN = "Cannot compare by MaxAbsError, the data contains nan/inf/-inf in dump data."
MSG_MAX_REL_NAN = "Cannot compare by MaxRelativeError, the data contains nan/inf/-inf in dump data."
MSG_UNREADABLE = "Data is unreadable."
MSG_ONE_ELEMENT = "This is a 1-d tensor of length 1."


@dataclass
class TensorResult:
    """Six metric cells (float or text) and the notes explaining texts; `problem` marks a failed compare."""

    cells: tuple
    notes: list
    problem: str = ""  # "", "unreadable", "nan_position"


def fill(value: str, notes: list, problem: str = "") -> TensorResult:
    return TensorResult((value,) * 6, notes, problem)


def _fmt(value: float):
    if math.isnan(value):
        return NAN_TEXT
    return round(value, 12)


def _relative_dtype(a: np.dtype, b: np.dtype) -> np.dtype:
    kind = np.result_type(a, b, np.float32)
    return kind if kind.kind == "f" else np.dtype(np.float64)


def compare_arrays(target: np.ndarray, golden: np.ndarray, squeeze: bool = True,
                   flat: bool = False) -> TensorResult:
    """Metrics of a target/golden pair of arrays; both are squeezed first (not for kernel dumps). flat: shapes that
    differ only by a reshape (equal element counts) are compared element by element as flat tensors (a framework
    convention across frameworks, compare/verdict.py)."""
    if target.size == 0:
        return fill(UNSUPPORTED, [MSG_EMPTY])
    if squeeze:
        target = np.squeeze(target)
        golden = np.squeeze(golden)
    if flat and target.shape != golden.shape and target.size == golden.size:
        target, golden = target.reshape(-1), golden.reshape(-1)
    if target.shape != golden.shape:
        return fill(SHAPE_UNMATCHED, [MSG_SHAPE], "shape")
    if target.dtype.kind == "c" or golden.dtype.kind == "c":
        target, golden = np.abs(target), np.abs(golden)
    rel_dtype = _relative_dtype(target.dtype, golden.dtype)
    if target.ndim == 0:
        return _compare_scalar(target, golden, rel_dtype)
    notes = []
    if target.dtype != golden.dtype:
        notes.append(MSG_DTYPE)
    try:
        flat_t = target.reshape(-1)
        flat_g = golden.reshape(-1)
        acc = _Accumulator(rel_dtype)
        for start in range(0, flat_t.size, CHUNK):
            if not acc.add(flat_t[start:start + CHUNK], flat_g[start:start + CHUNK]):
                return fill(NA, notes + [MSG_NAN_POSITION], "nan_position")
    except (TypeError, ValueError, OSError) as exc:
        return fill(UNSUPPORTED, [f"{MSG_UNREADABLE} ({exc})"], "unreadable")
    return acc.result(flat_t.size, notes)


def _compare_scalar(target: np.ndarray, golden: np.ndarray, rel_dtype: np.dtype) -> TensorResult:
    n = float(target.astype(np.float64))
    b = float(golden.astype(np.float64))
    notes = [MSG_ZERO_D]
    with np.errstate(all="ignore"):
        abs_err = abs(n - b)
        nr, br = rel_dtype.type(n), rel_dtype.type(b)
        if br == 0:
            eps = np.finfo(rel_dtype).eps
            nr, br = nr + eps, br + eps
        rel_err = float(abs((nr - br) / br))
    if math.isnan(abs_err):
        notes.append(MSG_MAX_ABS_NAN)
    if math.isnan(rel_err):
        notes.append(MSG_MAX_REL_NAN)
    return TensorResult((UNSUPPORTED, UNSUPPORTED, _fmt(abs_err), _fmt(rel_err), UNSUPPORTED, UNSUPPORTED), notes)


class _Accumulator:
    """Running sums of one pair, chunk by chunk."""

    def __init__(self, rel_dtype: np.dtype):
        self.rel_dtype = rel_dtype
        self.eps = rel_dtype.type(np.finfo(rel_dtype).eps)
        self.dot = self.norm_t = self.norm_g = self.sq_diff = 0.0
        self.max_abs = 0.0
        self.max_rel = 0.0
        self.below_1 = self.below_5 = 0

    def add(self, chunk_t: np.ndarray, chunk_g: np.ndarray) -> bool:
        """Fold one chunk in; False when NaN/Inf positions differ between the sides."""
        t64 = chunk_t.astype(np.float64)
        g64 = chunk_g.astype(np.float64)
        norm_t = float(np.dot(t64, t64))
        norm_g = float(np.dot(g64, g64))
        if not (math.isfinite(norm_t) and math.isfinite(norm_g)):
            # some value is NaN or Inf (a sum of squares of finite float32/float64 data cannot overflow here)
            finite_t, finite_g = np.isfinite(t64), np.isfinite(g64)
            if not (np.array_equal(np.isnan(t64), np.isnan(g64)) and np.array_equal(np.isinf(t64), np.isinf(g64))):
                return False
            t64[~finite_t] = 0.0
            g64[~finite_g] = 0.0
            chunk_t = np.where(finite_t, chunk_t, 0)
            chunk_g = np.where(finite_g, chunk_g, 0)
            norm_t = float(np.dot(t64, t64))
            norm_g = float(np.dot(g64, g64))
        self.norm_t += norm_t
        self.norm_g += norm_g
        self.dot += float(np.dot(t64, g64))
        diff = np.subtract(t64, g64, out=t64)
        self.sq_diff += float(np.dot(diff, diff))
        self.max_abs = max(self.max_abs, float(diff.max()), -float(diff.min()))
        del t64, g64, diff
        if chunk_t.dtype == self.rel_dtype and chunk_g.dtype == self.rel_dtype:
            t_rel, g_rel = chunk_t, chunk_g
        else:
            t_rel, g_rel = chunk_t.astype(self.rel_dtype), chunk_g.astype(self.rel_dtype)
        zero = g_rel == 0
        if zero.any():   # epsilon on both sides where the golden value is 0 (new arrays: inputs stay untouched)
            t_rel = np.where(zero, t_rel + self.eps, t_rel)
            g_rel = np.where(zero, g_rel + self.eps, g_rel)
        with np.errstate(all="ignore"):
            relative = np.subtract(t_rel, g_rel)
            np.divide(relative, g_rel, out=relative)
            np.abs(relative, out=relative)
        self.max_rel = max(self.max_rel, float(relative.max()))
        self.below_1 += int(np.count_nonzero(relative < 0.001))
        self.below_5 += int(np.count_nonzero(relative < 0.005))
        return True

    def result(self, size: int, notes: list) -> TensorResult:
        norm_t = math.sqrt(self.norm_t)
        norm_g = math.sqrt(self.norm_g)
        if size <= 1:
            cosine = UNSUPPORTED
            notes.append(MSG_ONE_ELEMENT)
        elif norm_t <= FLOAT64_EPS and norm_g <= FLOAT64_EPS:
            cosine = 1.0
        elif norm_t <= FLOAT64_EPS:
            cosine = NAN_TEXT
            notes.append(MSG_NPU_ZERO)
        elif norm_g <= FLOAT64_EPS:
            cosine = NAN_TEXT
            notes.append(MSG_BENCH_ZERO)
        else:
            value = self.dot / (norm_t * norm_g)
            if math.isnan(value):
                cosine = NAN_TEXT
                notes.append(MSG_COSINE_NAN)
            else:
                cosine = round(value, 12)
                if cosine > 0.9999:
                    cosine = round(cosine, 6)
        return TensorResult((cosine, math.sqrt(self.sq_diff), _fmt(self.max_abs), _fmt(self.max_rel),
                             round(self.below_1 / size, 12), round(self.below_5 / size, 12)), notes)
