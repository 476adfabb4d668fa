"""Real-data metrics of one tensor pair (spec §4.5), streamed in chunks so memory stays bounded."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import numpy as np

from msprobe.dump.tensors import TensorData, bfloat16_to_float32
from msprobe.table.cells import NA

CHUNK = 1 << 15  # elements per chunk: the work arrays of a chunk (about 1 MB) stay in the CPU caches
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


def _values(tensor) -> tuple[np.ndarray, bool]:
    """(array, is bfloat16 bit patterns) of a numpy array or a TensorData."""
    if isinstance(tensor, TensorData):
        return tensor.array, tensor.bfloat16
    return tensor, False


def compare_arrays(target, golden, squeeze: bool = True, flat: bool = False) -> TensorResult:
    """Metrics of a target/golden pair of arrays (numpy arrays, or TensorData: bfloat16 is compared as the float32
    of the same values); both are squeezed first (not for kernel dumps). flat: shapes that differ only by a reshape
    (equal element counts) are compared element by element as flat tensors (a framework convention across
    frameworks, compare/verdict.py)."""
    (target, t_bf16), (golden, g_bf16) = _values(target), _values(golden)
    if target.size == 0:
        return fill(UNSUPPORTED, [MSG_EMPTY])
    if squeeze:
        target = np.squeeze(target)
        golden = np.squeeze(golden)
    if flat and target.shape != golden.shape and target.size == golden.size:
        target, golden = target.reshape(-1), golden.reshape(-1)
    if target.shape != golden.shape:
        return fill(SHAPE_UNMATCHED, [MSG_SHAPE], "shape")
    if target.dtype.kind == "c" or golden.dtype.kind == "c":     # (bfloat16 bit patterns are never complex)
        target, golden = np.abs(target), np.abs(golden)
    t_dtype = np.dtype(np.float32) if t_bf16 else target.dtype
    g_dtype = np.dtype(np.float32) if g_bf16 else golden.dtype
    rel_dtype = _relative_dtype(t_dtype, g_dtype)
    if target.ndim == 0:
        return _compare_scalar(bfloat16_to_float32(target) if t_bf16 else target,
                               bfloat16_to_float32(golden) if g_bf16 else golden, rel_dtype)
    notes = []
    if t_dtype != g_dtype:
        notes.append(MSG_DTYPE)
    try:
        flat_t = target.reshape(-1)
        flat_g = golden.reshape(-1)
        acc = _Accumulator(rel_dtype, (t_bf16, g_bf16))
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


_SCRATCH = threading.local()


def _scratch(name: str, dtype, size: int) -> np.ndarray:
    """A work array of `size` elements, kept per thread and reused by every pair the thread compares (fresh
    arrays of a chunk's size would cost a page fault per 4 KB at every pair)."""
    key = (name, np.dtype(dtype))
    buffers = getattr(_SCRATCH, "buffers", None)
    if buffers is None:
        buffers = _SCRATCH.buffers = {}
    buffer = buffers.get(key)
    if buffer is None or buffer.size < size:
        buffer = buffers[key] = np.empty(max(size, CHUNK), key[1])
    return buffer[:size]


class _Accumulator:
    """Running sums of one pair, chunk by chunk. Each chunk is widened once into float64 work arrays (the sums,
    the difference and its extremes) and once into the relative-error dtype (unless it is that dtype already);
    every pass runs in reused per-thread arrays of one chunk, which stay in the CPU caches."""

    def __init__(self, rel_dtype: np.dtype, bfloat16: tuple = (False, False)):
        self.rel_dtype = rel_dtype
        self.eps = rel_dtype.type(np.finfo(rel_dtype).eps)
        self.bfloat16 = bfloat16
        self.dot = self.norm_t = self.norm_g = self.sq_diff = 0.0
        self.max_abs = 0.0
        self.max_rel = 0.0
        self.below_1 = self.below_5 = 0

    def _side(self, side: int, chunk: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(values, float64 values, values in the relative-error dtype) of one side's chunk; bfloat16 bit patterns
        become float32 first."""
        n = chunk.size
        if self.bfloat16[side]:
            chunk = bfloat16_to_float32(chunk, out=_scratch(f"bf16_{side}", np.float32, n))
        wide = _scratch(f"wide_{side}", np.float64, n)
        np.copyto(wide, chunk, casting="unsafe")
        if chunk.dtype == self.rel_dtype:
            rel = chunk
        elif self.rel_dtype == np.float64:
            rel = wide
        else:
            rel = _scratch(f"rel_{side}", self.rel_dtype, n)
            np.copyto(rel, chunk, casting="unsafe")
        return chunk, wide, rel

    def add(self, chunk_t: np.ndarray, chunk_g: np.ndarray) -> bool:
        """Fold one chunk in; False when NaN/Inf positions differ between the sides."""
        _, t64, t_rel = self._side(0, chunk_t)
        _, g64, g_rel = self._side(1, chunk_g)
        norm_t = float(np.dot(t64, t64))
        norm_g = float(np.dot(g64, g64))
        if not (math.isfinite(norm_t) and math.isfinite(norm_g)):
            # some value is NaN or Inf (a sum of squares of finite float32/float64 data cannot overflow here)
            finite_t, finite_g = np.isfinite(t64), np.isfinite(g64)
            if not (np.array_equal(np.isnan(t64), np.isnan(g64)) and np.array_equal(np.isinf(t64), np.isinf(g64))):
                return False
            # new arrays where the work arrays alias the relative-error values
            t_rel = np.where(finite_t, t_rel, 0)
            g_rel = np.where(finite_g, g_rel, 0)
            t64[~finite_t] = 0.0
            g64[~finite_g] = 0.0
            norm_t = float(np.dot(t64, t64))
            norm_g = float(np.dot(g64, g64))
        self.norm_t += norm_t
        self.norm_g += norm_g
        self.dot += float(np.dot(t64, g64))
        self._relative(t_rel, g_rel)      # before t64 becomes the difference: t_rel may be t64
        diff = np.subtract(t64, g64, out=t64)
        self.sq_diff += float(np.dot(diff, diff))
        self.max_abs = max(self.max_abs, float(diff.max()), -float(diff.min()))
        return True

    def _relative(self, t_rel: np.ndarray, g_rel: np.ndarray) -> None:
        """|t - g| / |g| in the relative-error dtype, with epsilon on both sides where the golden value is 0: its
        maximum and the counts below 0.001 and 0.005."""
        relative = _scratch("relative", self.rel_dtype, t_rel.size)
        with np.errstate(all="ignore"):
            np.subtract(t_rel, g_rel, out=relative)
            np.divide(relative, g_rel, out=relative)
            np.abs(relative, out=relative)
            top = float(relative.max())
            if not math.isfinite(top):       # a golden 0 divides by 0 (else: an overflow, which stays)
                zero = g_rel == 0
                if zero.any():   # new arrays: the inputs stay untouched
                    t_eps = np.where(zero, t_rel + self.eps, t_rel)
                    g_eps = np.where(zero, g_rel + self.eps, g_rel)
                    np.subtract(t_eps, g_eps, out=relative)
                    np.divide(relative, g_eps, out=relative)
                    np.abs(relative, out=relative)
                    top = float(relative.max())
        self.max_rel = max(self.max_rel, top)
        below = _scratch("below", np.bool_, t_rel.size)
        self.below_1 += int(np.count_nonzero(np.less(relative, 0.001, out=below)))
        self.below_5 += int(np.count_nonzero(np.less(relative, 0.005, out=below)))

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
