"""Error_Origin: where does a matched output's error come from - this op, its inputs, or the dtypes (issue 21).

Every matched tensor row gets a relative error e (tensor mode: EucDist / Bench l2norm; statistics mode: the
largest of |dMax|, |dMin|, |dMean| over the golden's largest magnitude and |dNorm| / Bench l2norm). For each
entry, e_in is the largest e of its tensor inputs and parameters (a backward entry adds the inputs and outputs
of its forward entry, whose saved tensors it also reads). An output row is then

* ``""`` (empty)  - e <= k * eps of the pair's higher precision: no error worth a word;
* ``introduced``  - a non-tensor argument (scalar, string) of the call differs, or e exceeds what the inputs
  and the dtypes explain: e > A * e_in + k * eps;
* ``dtype``       - the pair's dtypes differ (bfloat16/float16 against float32) and e <= A * e_in + k * eps of
  the lower precision; a module (a composite whose internal casts are not dumped) is allowed the bfloat16
  floor even when its own rows show no lower precision;
* ``inherited``   - e <= A * e_in + k * eps of the row's own precision: passed through from the inputs.

A is the amplification an op of this kind plausibly applies to its inputs' relative error and k the units of
rounding it may add (docs/compare.md lists both per kind of op, with their calibration on the bug zoo).
"""

from __future__ import annotations

import math
import re

import numpy as np

from msprobe.compare import columns as col
from msprobe.frameworks.dtypes import canonical
from msprobe.report.cells import number_or_none

INTRODUCED, INHERITED, DTYPE, NONE = "introduced", "inherited", "dtype", ""
LABELS = (INTRODUCED, INHERITED, DTYPE)

# machine epsilon (spacing of the numbers at 1) per floating dtype
EPS = {"bfloat16": 2.0 ** -7, "float16": 2.0 ** -10, "float32": 2.0 ** -23, "float64": 2.0 ** -52}
MODULE_FLOOR_DTYPE = "bfloat16"
# Statistics see a tensor's error through four numbers: random errors largely cancel in the norm and the mean,
# so an input's error is underestimated more than an output's; the amplification is widened by this factor.
STAT_SLACK = 8.0

# kinds of op: (amplification A, rounding units k)
ELEMENTWISE, LINEAR, ADDITIVE, REDUCTION, NORM, EXPONENTIAL, MODULE, OTHER, DIVISION = range(9)
KIND_PARAMS = {ELEMENTWISE: (2.0, 2.0), LINEAR: (2.0, 4.0), ADDITIVE: (2.0, 2.0), REDUCTION: (2.0, 8.0),
               NORM: (4.0, 8.0), EXPONENTIAL: (2.0, 8.0), MODULE: (4.0, 8.0), OTHER: (2.0, 4.0),
               DIVISION: (2.0, 4.0)}
_KINDS = {
    LINEAR: "linear matmul mm bmm addmm baddbmm addbmm einsum conv1d conv2d conv3d conv_transpose1d "
            "conv_transpose2d conv_transpose3d bilinear scaled_dot_product_attention npu_fusion_attention "
            "__matmul__ __rmatmul__ tensordot inner outer dot vdot mv chain_matmul lstm gru rnn_tanh rnn_relu",
    ADDITIVE: "add sub rsub __add__ __radd__ __iadd__ __sub__ __rsub__ __isub__ add_ sub_ addcmul addcdiv lerp "
              "where masked_fill embedding",
    REDUCTION: "sum mean nansum nanmean cumsum var std var_mean std_mean norm vector_norm matrix_norm "
               "_foreach_norm prod avg_pool1d avg_pool2d avg_pool3d adaptive_avg_pool1d adaptive_avg_pool2d "
               "adaptive_avg_pool3d all_reduce reduce reduce_scatter reduce_scatter_tensor "
               "_reduce_scatter_base",
    NORM: "layer_norm batch_norm group_norm instance_norm rms_norm normalize local_response_norm "
          "npu_rms_norm fused_layer_norm",
    EXPONENTIAL: "softmax log_softmax exp exp2 expm1 cross_entropy nll_loss logsumexp softmin gumbel_softmax "
                 "binary_cross_entropy_with_logits kl_div pow __pow__ __rpow__ float_power",
    # the last tensor input divides (or is the argument of sqrt/log): small magnitudes amplify its error
    DIVISION: "div true_divide divide __truediv__ __itruediv__ __rtruediv__ __div__ __idiv__ __rdiv__ addcdiv "
              "reciprocal rsqrt sqrt log log2 log10 log1p",
}
KIND_OF = {name: kind for kind, names in _KINDS.items() for name in names.split()}
_API = re.compile(r"^(?:[A-Za-z]+)\.(.+)\.(\d+)\.(forward|backward)$")


def op_kind(entry_name: str) -> int:
    if entry_name.startswith(("Module.", "Cell.")):
        return MODULE
    match = _API.match(entry_name)
    if not match:
        return OTHER
    api = match.group(1)
    if api.endswith("_") and not api.endswith("__"):      # in-place variant: add_ is add
        api = api[:-1]
    return KIND_OF.get(api, OTHER)


def forward_twin(entry_name: str) -> str | None:
    """The forward entry whose saved tensors a backward entry reads (API `x.3.backward`, module
    `Module.a.B.backward.0`)."""
    if entry_name.endswith(".backward"):
        return entry_name[:-len(".backward")] + ".forward"
    if ".backward." in entry_name:
        return entry_name.replace(".backward.", ".forward.")
    return None


def _floats(values: list) -> np.ndarray:
    """Cells as float64 (NaN where not a number); numpy converts plain numbers and None at C speed."""
    try:
        array = np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        array = np.array([_number(v) for v in values], dtype=np.float64)
    return array


def _number(value) -> float:
    if value is True or value is False:
        return float(value)
    number = number_or_none(value)
    return math.nan if number is None else number


def _numel(shape) -> float:
    if not isinstance(shape, str) or not shape.startswith("["):
        return math.nan
    count = 1
    for part in shape.strip("[]").split(","):
        part = part.strip()
        if part:
            if not part.isdigit():
                return math.nan
            count *= int(part)
    return float(count)


def row_errors(mode: str, cells: dict) -> tuple:
    """Per row: the relative error e (NaN = not measurable), the golden's L2 norm, largest finite magnitude,
    max and min."""
    t = [_floats(cells[f"NPU {s}"]) for s in ("max", "min", "mean", "l2norm")]
    g = [_floats(cells[f"Bench {s}"]) for s in ("max", "min", "mean", "l2norm")]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        finite = [np.where(np.isfinite(v), np.abs(v), np.nan) for v in g[:3]]
        g_mag = np.fmax(np.fmax(finite[0], finite[1]), finite[2])     # largest finite magnitude, NaN if none
        parts = []
        for i in range(3):
            diff = np.abs(t[i] - g[i])
            same = t[i] == g[i]                       # equal infinities count as equal
            rel = np.where(same, 0.0, diff / g_mag)
            rel = np.where(same | (g_mag > 0), rel, np.where(np.isnan(diff), np.nan, np.inf))
            parts.append(rel)
        norm_same = t[3] == g[3]
        norm_rel = np.where(norm_same, 0.0, np.abs(t[3] - g[3]) / g[3])
        parts.append(np.where(norm_same | (g[3] > 0), norm_rel, np.where(np.isnan(t[3] - g[3]), np.nan, np.inf)))
        stacked = np.vstack(parts)
        errors = np.nanmax(np.where(np.isnan(stacked), -np.inf, stacked), axis=0)
        errors[errors == -np.inf] = np.nan
        # a non-finite value on one side only is an infinite error
        for i in range(4):
            one_sided = np.isfinite(g[i]) & ~np.isfinite(t[i]) & ~np.isnan(g[i])
            errors[one_sided] = np.inf
        if mode == col.TENSOR and "EucDist" in cells:
            dist = _floats(cells["EucDist"])
            tensor_rel = np.where(dist == 0, 0.0, dist / g[3])
            usable = np.isfinite(tensor_rel) & (np.isfinite(g[3]) & (g[3] > 0) | (dist == 0))
            errors = np.where(usable, tensor_rel, errors)
    return errors, g[3], g_mag, g[0], g[1]


def judge_origin(mode: str, cells: dict, entry: np.ndarray, entry_names: list, states: list, is_tensor: list,
                 matched: np.ndarray, dtypes: tuple, shapes: tuple) -> list:
    """The Error_Origin cell of every row (statistics and tensor modes)."""
    rows = len(entry)
    origin = [NONE] * rows
    if not rows:
        return origin
    errors, g_norm, g_mag, g_high, g_low = row_errors(mode, cells)
    g_max, g_min = g_high.tolist(), g_low.tolist()
    t_dtypes = [canonical(d) for d in dtypes[0]]
    g_dtypes = [canonical(d) for d in dtypes[1]]
    matched_list = matched.tolist()
    err = errors.tolist()
    norms = g_norm.tolist()
    mags = g_mag.tolist()
    entry_list = entry.tolist()
    first_row = {}
    bounds = []
    cuts = np.flatnonzero(np.diff(entry)) + 1
    starts = [0] + cuts.tolist()
    stops = cuts.tolist() + [rows]
    for start, stop in zip(starts, stops):
        first_row.setdefault(entry_names[entry_list[start]], (start, stop))
        bounds.append((start, stop))
    npu_max, bench_max = cells["NPU max"], cells["Bench max"]
    for start, stop in bounds:
        name = entry_names[entry_list[start]]
        inputs, outputs = [], []
        for r in range(start, stop):
            state = states[r]
            (outputs if state in ("output", "parameters_grad", "debug") else inputs).append(r)
        if not outputs:
            continue
        twin = forward_twin(name)
        twin_rows = first_row.get(twin) if twin else None
        extra = range(*twin_rows) if twin_rows else ()
        e_in = 0.0
        args_differ = False
        in_low = 0.0
        in_norm_sum = 0.0
        in_mag = 0.0
        spread = 1.0      # the last tensor input's largest over smallest magnitude (DIVISION)
        for r in (*inputs, *extra):
            if not is_tensor[r]:
                if r in extra:
                    continue
                if matched_list[r] and npu_max[r] != bench_max[r] and not _same_value(npu_max[r], bench_max[r]):
                    args_differ = True
                continue
            if not matched_list[r]:
                e_in = math.inf
                continue
            e = err[r]
            if e == e:
                e_in = max(e_in, e)
            low = _low_eps(t_dtypes[r], g_dtypes[r])
            in_low = max(in_low, low)
            if r not in extra:
                if norms[r] == norms[r] and math.isfinite(norms[r]):
                    in_norm_sum += norms[r] * _broadcast(shapes[1][r], shapes[1][outputs[0]])
                if math.isfinite(mags[r]):
                    in_mag = max(in_mag, mags[r])
                spread = _spread(g_max[r], g_min[r])
        kind = op_kind(name)
        amp, units = KIND_PARAMS[kind]
        slack = STAT_SLACK if mode == col.STATISTICS else 1.0
        for r in outputs:
            if not matched_list[r] or not is_tensor[r]:
                continue
            e = err[r]
            if e != e or e == 0:
                continue
            own = _eps(t_dtypes[r])
            if not own:                     # integers, booleans: any difference is carried or made here
                origin[r] = INHERITED if e_in > 0 else INTRODUCED
                continue
            if e <= units * min(own, _eps(g_dtypes[r]) or own):
                continue
            if states[r] == "parameters_grad":
                origin[r] = _passive(e, t_dtypes[r], g_dtypes[r], units)
                continue
            if args_differ:
                origin[r] = INTRODUCED
                continue
            a = amp
            if kind == ADDITIVE and norms[r] and math.isfinite(norms[r]):
                a = max(a, 1.5 * in_norm_sum / norms[r])
            elif kind == EXPONENTIAL:
                a = max(a, 2.0 * in_mag)
            elif kind == DIVISION:
                a = max(a, spread)
            elif kind == REDUCTION and norms[r] and math.isfinite(norms[r]):
                a = max(a, in_norm_sum / norms[r])
            carried = slack * a * e_in
            low = _low_eps(t_dtypes[r], g_dtypes[r])
            if low and e <= carried + units * low:
                origin[r] = DTYPE
            elif e <= carried + units * max(own, in_low):
                origin[r] = INHERITED
            elif kind == MODULE and e <= carried + units * EPS[MODULE_FLOOR_DTYPE]:
                origin[r] = DTYPE
            else:
                origin[r] = INTRODUCED
    return origin


def _spread(high: float, low: float) -> float:
    """max |x| / min |x| of a tensor whose values keep one sign (from its max and min); infinite when they
    change sign or touch zero."""
    if not (math.isfinite(high) and math.isfinite(low)):
        return math.inf
    if low > 0 or high < 0:
        return max(abs(high), abs(low)) / min(abs(high), abs(low))
    return math.inf


def _passive(e: float, t_dtype, g_dtype, units: float) -> str:
    """Parameter gradients are accumulated from backward entries judged on their own: never introduced."""
    low = _low_eps(t_dtype, g_dtype)
    return DTYPE if low and e <= units * low else INHERITED


def _same_value(a, b) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and a != a and b != b)


def _eps(dtype) -> float:
    return EPS.get(dtype, 0.0) if dtype else 0.0


def _low_eps(t_dtype, g_dtype) -> float:
    """eps of the lower precision when the pair's float dtypes differ, else 0."""
    if t_dtype == g_dtype:
        return 0.0
    a, b = EPS.get(t_dtype), EPS.get(g_dtype)
    if a is None or b is None:
        return 0.0
    return max(a, b)


def _broadcast(in_shape, out_shape) -> float:
    """sqrt(numel(out) / numel(in)): how much a broadcast input's norm grows in the output."""
    n_in, n_out = _numel(in_shape), _numel(out_shape)
    if not (n_in > 0 and n_out > 0) or n_out <= n_in:
        return 1.0
    return math.sqrt(n_out / n_in)
