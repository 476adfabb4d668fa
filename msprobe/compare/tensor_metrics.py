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
        acc = _Accumulator((flat_t.dtype, flat_g.dtype), rel_dtype, (t_bf16, g_bf16), flat_t.size)
        with np.errstate(all="ignore"):
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


_dot = np.dot
_maximum = np.maximum.reduce
_minimum = np.minimum.reduce


class _Accumulator:
    """Running sums of one pair, chunk by chunk. Each chunk is widened once into float64 work arrays (the sums,
    the difference and its extremes) and, unless it has that dtype already, once into the relative-error dtype;
    every pass runs in per-thread work arrays of one chunk, which stay in the CPU caches. Runs under
    np.errstate(all="ignore")."""

    def __init__(self, dtypes: tuple, rel_dtype: np.dtype, bfloat16: tuple, size: int):
        n = min(size, CHUNK)
        self.rel_dtype = rel_dtype
        self.eps = rel_dtype.type(np.finfo(rel_dtype).eps)
        self.t64 = _scratch("wide_t", np.float64, n)
        self.g64 = _scratch("wide_g", np.float64, n)
        self.relative = _scratch("relative", rel_dtype, n)
        self.below = _scratch("below", np.bool_, n)
        self.plans = [self._plan(side, dtype, bf16, n) for side, dtype, bf16 in zip("tg", dtypes, bfloat16)]
        # while every chunk so far holds the same bytes on both sides (tensors the two runs share: weights, ids,
        # everything before the runs part), a chunk is compared as its own bit patterns first
        self.same_bits = (np.dtype(f"u{dtypes[0].itemsize}") if dtypes[0] == dtypes[1] and bfloat16[0] == bfloat16[1]
                          and dtypes[0].itemsize in (1, 2, 4, 8) else None)
        self.dot = self.norm_t = self.norm_g = self.sq_diff = 0.0
        self.max_abs = 0.0
        self.max_rel = 0.0
        self.below_1 = self.below_5 = 0

    def _plan(self, side: str, dtype: np.dtype, bfloat16: bool, n: int) -> tuple:
        """(work array of bfloat16's float32 bits or None, work array in the relative-error dtype or None, whether
        the float64 values are the relative-error values) of one side."""
        bits = _scratch(f"bits_{side}", np.uint32, n) if bfloat16 else None
        values = np.dtype(np.float32) if bfloat16 else dtype
        if values == self.rel_dtype:
            return bits, None, False
        if self.rel_dtype == np.float64:
            return bits, None, True
        return bits, _scratch(f"rel_{side}", self.rel_dtype, n), False

    def _side(self, plan: tuple, chunk: np.ndarray, wide: np.ndarray, n: int) -> np.ndarray:
        """Widen one side's chunk into `wide` (float64); return its values in the relative-error dtype."""
        bits, rel, rel_is_wide = plan
        if bits is not None:          # bfloat16 is the upper half of the float32 of the same value
            bits = bits[:n]
            np.copyto(bits, chunk, casting="unsafe")
            np.left_shift(bits, np.uint32(16), out=bits)
            chunk = bits.view(np.float32)
        np.copyto(wide, chunk, casting="unsafe")
        if rel_is_wide:
            return wide
        if rel is None:
            return chunk
        rel = rel[:n]
        np.copyto(rel, chunk, casting="unsafe")
        return rel

    def add(self, chunk_t: np.ndarray, chunk_g: np.ndarray) -> bool:
        """Fold one chunk in; False when NaN/Inf positions differ between the sides."""
        n = chunk_t.size
        t64, g64 = self.t64[:n], self.g64[:n]
        if self.same_bits is not None and self._same(chunk_t, chunk_g, t64, n):
            return True
        t_rel = self._side(self.plans[0], chunk_t, t64, n)
        g_rel = self._side(self.plans[1], chunk_g, g64, n)
        norm_t = float(_dot(t64, t64))
        norm_g = float(_dot(g64, g64))
        if not (math.isfinite(norm_t) and math.isfinite(norm_g)):
            # some value is NaN or Inf (a sum of squares of finite float32/float64 data cannot overflow here)
            finite_t, finite_g = np.isfinite(t64), np.isfinite(g64)
            if not (np.array_equal(np.isnan(t64), np.isnan(g64)) and np.array_equal(np.isinf(t64), np.isinf(g64))):
                return False
            t_rel = np.where(finite_t, t_rel, 0)      # new arrays: t_rel may be the input or t64
            g_rel = np.where(finite_g, g_rel, 0)
            t64[~finite_t] = 0.0
            g64[~finite_g] = 0.0
            norm_t = float(_dot(t64, t64))
            norm_g = float(_dot(g64, g64))
        self.norm_t += norm_t
        self.norm_g += norm_g
        self.dot += float(_dot(t64, g64))
        self._relative(t_rel, g_rel, n)       # before t64 becomes the difference: t_rel may be t64
        diff = np.subtract(t64, g64, out=t64)
        self.sq_diff += float(_dot(diff, diff))
        self.max_abs = max(self.max_abs, float(_maximum(diff)), -float(_minimum(diff)))
        return True

    def _same(self, chunk_t: np.ndarray, chunk_g: np.ndarray, t64: np.ndarray, n: int) -> bool:
        """Fold in a chunk whose two sides are bit-identical and finite: every difference is 0 (a golden 0 gets
        epsilon on both sides), so only the sum of squares is computed. False (nothing folded in) otherwise."""
        if not np.array_equal(chunk_t.view(self.same_bits), chunk_g.view(self.same_bits)):
            self.same_bits = None
            return False
        self._side(self.plans[0], chunk_t, t64, n)
        norm = float(_dot(t64, t64))
        if not math.isfinite(norm):
            return False
        self.norm_t += norm
        self.norm_g += norm
        self.dot += norm
        self.below_1 += n
        self.below_5 += n
        return True

    def _relative(self, t_rel: np.ndarray, g_rel: np.ndarray, n: int) -> None:
        """|t - g| / |g| in the relative-error dtype, with epsilon on both sides where the golden value is 0: its
        maximum and the counts below 0.001 and 0.005."""
        relative = self.relative[:n]
        np.subtract(t_rel, g_rel, out=relative)
        np.divide(relative, g_rel, out=relative)
        np.absolute(relative, out=relative)
        top = float(_maximum(relative))
        if not math.isfinite(top):       # a golden 0 divides by 0 (else: an overflow, which stays)
            zero = g_rel == 0
            if zero.any():   # new arrays: the inputs stay untouched
                t_eps = np.where(zero, t_rel + self.eps, t_rel)
                g_eps = np.where(zero, g_rel + self.eps, g_rel)
                np.subtract(t_eps, g_eps, out=relative)
                np.divide(relative, g_eps, out=relative)
                np.absolute(relative, out=relative)
                top = float(_maximum(relative))
        self.max_rel = max(self.max_rel, top)
        below = self.below[:n]
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
