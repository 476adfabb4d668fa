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
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import repeat
from operator import is_

import numpy as np

from msprobe.compare.name_rules import golden_op
from msprobe.frameworks.dtypes import canonical
from msprobe.names import counter
from msprobe.table import columns as col
from msprobe.table.cells import number_or_none

INTRODUCED, INHERITED, DTYPE, NONE = "introduced", "inherited", "dtype", ""
LABELS = (INTRODUCED, INHERITED, DTYPE)

# machine epsilon (spacing of the numbers at 1) per floating dtype
EPS = {"bfloat16": 2.0 ** -7, "float16": 2.0 ** -10, "float32": 2.0 ** -23, "float64": 2.0 ** -52}
MODULE_FLOOR_DTYPE = "bfloat16"
# Statistics see a tensor's error through four numbers: random errors largely cancel in the norm and the mean,
# so an input's error is underestimated more than an output's; the amplification is widened by this factor.
STAT_SLACK = 8.0
BACKWARD_AMPLIFICATION = 2.0
# a module's own rounding may grow with sums its dump does not show: up to this many times an op's (its output
# differing by a few dozen float32 units with identical inputs is another summation order, not a cast)
MODULE_SUMS = 32.0
# ... and in a lower precision than float32 (its sums accumulate in float32: MODULE_SUMS is the accumulator's), the
# roundings to its own dtype that the ops it chains make: up to this many units (a bfloat16 block's output is a few
# units off an identical float32 one; a residual dropped inside it is dozens)
MODULE_CHAIN = 8.0
# an output within this many units of rounding of the pair's higher precision is rounding, never introduced (the
# rounding floor that parameters and entering inputs have in compare/verdict.py: a sum whose length no shape shows)
ROUNDING_FLOOR_UNITS = 4.0
MEAN_FLOOR = 1e-5       # statistics: a mean below this share of the largest magnitude is ~0 (not read relatively)
# The Mean of n elements that each carry an independent rounding error of at most eps x |x_i| moves by about
# eps x rms / sqrt(n) = eps x Norm / n (the errors average out), plus a systematic eps x |Mean| (a rounding that all
# elements share: a scalar, a weight's rounding read by every row, the statistic's own rounding to its dtype).
# MEAN_UNITS of this "rounding of the mean" is the most rounding moves a Mean (the bug zoo's clean bfloat16 pairs,
# seeds 1-7: at most 0.88 of it at an op with identical inputs; a qkv linear that drops its bias, 0.02 a component: 5.0).
MEAN_UNITS = 2.0

# kinds of op: (amplification A, rounding units k)
ELEMENTWISE, LINEAR, ADDITIVE, REDUCTION, NORM, EXPONENTIAL, MODULE, OTHER, DIVISION = range(9)
KIND_PARAMS = {ELEMENTWISE: (1.5, 1.0), LINEAR: (1.0, 1.0), ADDITIVE: (1.0, 1.0), REDUCTION: (1.5, 2.0),
               NORM: (1.5, 2.0), EXPONENTIAL: (1.5, 2.0), MODULE: (2.0, 2.0), OTHER: (2.0, 2.0),
               DIVISION: (2.0, 2.0)}
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
# ops with kinks or masks: their backward passes a gradient or not by the sign (or rank) of a forward value, so
# the smallest input difference can move a whole element of it
KINKED = frozenset("relu relu_ relu6 leaky_relu hardtanh threshold abs max_pool1d max_pool2d max_pool3d "
                   "adaptive_max_pool1d adaptive_max_pool2d max min amax amin clamp clip dropout where masked_fill "
                   "hardswish hardsigmoid sort topk maximum minimum".split())
KIND_OF = {name: kind for kind, names in _KINDS.items() for name in names.split()}
# forward ops that cannot amplify their input's relative error (a relu's Max is at most its input's, a max-pool
# picks elements, a dropout at eval passes them, a cast up is exact): no statistics slack beyond NON_AMPLIFYING_SLACK
# hides a jump at them (conv2d 30 % off, the relu after it 99 % off: the relu makes the jump)
NON_AMPLIFYING = frozenset("relu relu6 hardtanh threshold max_pool1d max_pool2d max_pool3d adaptive_max_pool1d "
                           "adaptive_max_pool2d adaptive_max_pool3d dropout dropout1d dropout2d dropout3d "
                           "alpha_dropout feature_alpha_dropout float double".split())
NON_AMPLIFYING_SLACK = 2.0


# collectives: an output carries the other ranks' inputs, which this rank's entry does not show
COLLECTIVE = frozenset("all_reduce reduce all_gather all_gather_into_tensor _all_gather_base broadcast recv irecv "
                       "scatter reduce_scatter reduce_scatter_tensor _reduce_scatter_base all_to_all "
                       "all_to_all_single gather batch_isend_irecv".split())


def api_of(entry_name: str) -> str:
    """The API of an entry name (`Functional.relu.3.backward` -> relu; in-place add_ -> add; a MindSpore primitive
    by the PyTorch function it stands for, `Primitive.bn_train.BatchNorm.0.forward` -> batch_norm); "" for others."""
    head, _, direction = entry_name.rpartition(".")
    if direction not in ("forward", "backward"):
        return ""
    head, _, index = head.rpartition(".")
    if head.startswith("Primitive.") and head.count(".") == 2 and counter(index) is not None:
        return golden_op(head, head.rpartition(".")[2])
    prefix, _, api = head.partition(".")
    if not (counter(index) is not None and api and prefix.isascii() and prefix.isalpha()):
        return ""
    api = api[len("comm_func."):] if api.startswith("comm_func.") else api     # MindSpore communication
    return api[:-1] if api.endswith("_") and not api.endswith("__") else api


def op_kind(entry_name: str) -> int:
    if entry_name.startswith(("Module.", "Cell.")):
        return MODULE
    return KIND_OF.get(api_of(entry_name), OTHER)


def forward_twin(entry_name: str) -> str | None:
    """The forward entry whose saved tensors a backward entry reads (API `x.3.backward`, module
    `Module.a.B.backward.0`)."""
    if entry_name.endswith(".backward"):
        return entry_name[:-len(".backward")] + ".forward"
    if ".backward." in entry_name:
        return entry_name.replace(".backward.", ".forward.")
    return None


def cell_floats(values: list, odd: list | None = None) -> np.ndarray:
    """Cells as float64 (NaN where not a number): floats as they are, the others (ints, texts, None, bools) through
    _number; odd, when given, receives the rows whose cell is not a float (which other readings of a cell, e.g.
    stats.stat_diff's, may read otherwise)."""
    rows = np.flatnonzero(~np.fromiter(map(is_, map(type, values), repeat(float)), dtype=bool,
                                       count=len(values))).tolist()
    if odd is not None:
        odd.extend(rows)
    if rows:
        values = list(values)
        for row in rows:
            value = values[row]
            values[row] = math.nan if value is None else _number(value)
    return np.array(values, dtype=np.float64)


def _number(value) -> float:
    if value is True or value is False:
        return float(value)
    number = number_or_none(value)
    return math.nan if number is None else number


@lru_cache(maxsize=4096)
def numel(shape) -> float:
    """The element count of a shape cell (`[2, 3]` -> 6.0); NaN when the text is no shape of ASCII counts."""
    if not isinstance(shape, str) or not shape.startswith("["):
        return math.nan
    count = 1
    for part in shape.strip("[]").split(","):
        part = part.strip()
        if part:
            number = counter(part)
            if number is None:
                return math.nan
            count *= number
    return float(count)


STAT_COLUMNS = (tuple(f"NPU {s}" for s in ("max", "min", "mean", "l2norm")),
                tuple(f"Bench {s}" for s in ("max", "min", "mean", "l2norm")))


def stat_floats(cells: dict, odd: dict | None = None) -> tuple:
    """(target, golden): each the Max, Min, Mean and Norm cells as float64 arrays (cell_floats); odd, when given,
    receives per column name the rows whose cell is not a float."""
    return tuple([cell_floats(cells[name], None if odd is None else odd.setdefault(name, [])) for name in side]
                 for side in STAT_COLUMNS)


def row_errors(mode: str, cells: dict, stats: tuple | None = None, mean_noise: np.ndarray | None = None) -> tuple:
    """Per row: the relative error e (NaN = not measurable), the same read as an input's carried error, the
    golden's L2 norm, largest finite magnitude, max, min and mean. stats: stat_floats(cells), when parsed already;
    mean_noise: per row the rounding of its Mean (mean_rounding), which the carried reading of the Mean discounts."""
    t, g = stats if stats is not None else stat_floats(cells)
    # a Norm is read by its magnitude: a collector may record a 0-d tensor's Norm as its signed value (MindSpore's
    # statistics of a scalar gradient: Max = Min = Mean = Norm = -0.36)
    t_norm, g_norm = np.abs(t[3]), np.abs(g[3])
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
        norm_same = t_norm == g_norm
        norm_rel = np.where(norm_same, 0.0, np.abs(t_norm - g_norm) / g_norm)
        parts.append(np.where(norm_same | (g_norm > 0), norm_rel, np.where(np.isnan(t_norm - g_norm), np.nan, np.inf)))
        stacked = np.vstack(parts)
        errors = np.nanmax(np.where(np.isnan(stacked), -np.inf, stacked), axis=0)
        errors[errors == -np.inf] = np.nan
        # a non-finite value on one side only is an infinite error
        for i in range(4):
            one_sided = np.isfinite(g[i]) & ~np.isfinite(t[i]) & ~np.isnan(g[i])
            errors[one_sided] = np.inf
        carried = errors
        if mode == col.TENSOR and "EucDist" in cells:
            dist = cell_floats(cells["EucDist"])
            tensor_rel = np.where(dist == 0, 0.0, dist / g_norm)
            usable = np.isfinite(tensor_rel) & (np.isfinite(g_norm) & (g_norm > 0) | (dist == 0))
            errors = carried = np.where(usable, tensor_rel, errors)
        elif mode == col.STATISTICS:
            # As an input, a tensor counts with the larger reading that its mean moved relative to itself (where
            # the mean is not ~0): a small change spread over many elements (a weight after an optimizer step)
            # leaves the extremes alone but moves the mean, and the op's output with it.
            # (beyond MEAN_UNITS of the mean's own rounding: the mean of bfloat16 scores that moved by one such
            # unit, 2 % of a mean 0.006 of values of rms 1, carries no 2 % error into a softmax)
            shift = np.abs(t[2] - g[2])
            if mean_noise is not None:      # no discount where it is unknown (integers, no shape)
                shift = np.fmax(shift - MEAN_UNITS * np.where(np.isfinite(mean_noise), mean_noise, 0.0), 0.0)
            mean_rel = shift / np.abs(g[2])
            mean_rel = np.where(np.abs(g[2]) >= MEAN_FLOOR * g_mag, mean_rel, 0.0)
            carried = np.fmax(errors, np.where(np.isfinite(mean_rel), mean_rel, 0.0))
    return errors, carried, g_norm, g_mag, g[0], g[1], g[2]


def mean_rounding(mean: np.ndarray, norm: np.ndarray, shapes: list, eps: np.ndarray) -> np.ndarray:
    """Per row the rounding of a tensor's Mean at eps (see MEAN_UNITS): eps x (|Mean| + Norm / n), n its element
    count (NaN where a number is missing or eps is 0)."""
    counts = np.fromiter(map(numel, shapes), dtype=np.float64, count=len(shapes))
    with np.errstate(invalid="ignore", divide="ignore"):
        noise = eps * (np.abs(mean) + np.abs(norm) / counts)
    return np.where((eps > 0) & (counts > 0), noise, np.nan)


def mean_moved(stats: tuple, noise: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Of rows (forward outputs whose tensor inputs are all matched and identical, in a lower precision on one
    side), those whose Mean moved by more than MEAN_UNITS of its rounding at the lower precision. The lower
    precision's allowance per element (k x eps of the largest magnitude) hides a shift that is systematic but
    smaller than one unit (a dropped bias of 0.02 in values of 4); with identical inputs every difference is the
    op's own rounding, which is random per element and averages out in the Mean, except for the share that
    scales with the Mean itself."""
    t, g = stats
    with np.errstate(invalid="ignore"):
        return rows & np.isfinite(noise) & (np.abs(t[2] - g[2]) > MEAN_UNITS * noise)


# debug.json saves (state "debug") have no op around them, nothing to explain them by: they are not judged
OUT_STATES = frozenset({"output", "parameters_grad"})
STATE_CODES = {"output": 1, "parameters_grad": 2}     # 0: an input (or a debug save)


def judge_origin(mode: str, cells: dict, entry: np.ndarray, entry_names: list, states: list, is_tensor: list,
                 matched: np.ndarray, dtypes: tuple, shapes: tuple, trace: list | None = None,
                 exact: bool = False, entry_ops: list | None = None, skip: np.ndarray | None = None,
                 stats: tuple | None = None) -> list:
    """The Error_Origin cell of every row (statistics and tensor modes); trace, when given, receives
    (row, e, e_in, A, k, low eps, own eps) of every row judged exactly (exact: every entry). entry_ops, when
    given, holds each entry's name without call count and direction (`Functional.linear`), from which the kind
    of op is read faster than from the full names. Rows set in skip (no data, below the noise floor, a recording
    convention: compare/verdict.py) are not judged: their cell stays empty. stats: stat_floats(cells), when parsed
    already.

    A vectorised first pass settles the rows that the smallest amplification of their kind and the inputs'
    own errors already explain (and the negligible ones); only the entries with another row go through the
    exact per-entry judgement."""
    rows = len(entry)
    origin = [NONE] * rows
    if not rows:
        return origin
    tensor = np.array(is_tensor, dtype=bool)
    t_eps = _eps_array(dtypes[0])
    g_eps = _eps_array(dtypes[1])
    stats = stats if stats is not None else stat_floats(cells)
    noise = mean_rounding(stats[1][2], stats[1][3], shapes[1], np.fmax(t_eps, g_eps))
    errors, carried_errors, g_norm, g_mag, g_high, g_low, g_mean = row_errors(mode, cells, stats, noise)
    slack = STAT_SLACK if mode == col.STATISTICS else 1.0
    cuts = np.flatnonzero(np.diff(entry)) + 1
    starts = np.concatenate(([0], cuts))
    stops = np.concatenate((cuts, [rows]))
    entry_list = entry.tolist()
    # per row: output flag, the base (A, k) of its entry's kind
    state_codes = np.fromiter(map(STATE_CODES.get, states, repeat(0)), dtype=np.int8, count=rows)
    is_out = state_codes > 0
    plain_out = state_codes == 1
    first_entries = entry[starts].tolist()
    if entry_ops is not None:
        kinds = list(map(_op_kind, map(entry_ops.__getitem__, first_entries)))
    else:
        kinds = list(map(_entry_kind, map(entry_names.__getitem__, first_entries)))
    # per kind of entry: k; slack x A, but at most NON_AMPLIFYING_SLACK for the ops that cannot amplify (both
    # directions here: a backward the first pass leaves open gets its own amplification in the exact judgement); A,
    # but 1 for those
    numbers = {key: (KIND_PARAMS[key[0]][1],
                     min(slack, NON_AMPLIFYING_SLACK) if key[2] else slack * KIND_PARAMS[key[0]][0],
                     1.0 if key[2] else KIND_PARAMS[key[0]][0]) for key in set(kinds)}
    per_entry = np.array(list(map(numbers.__getitem__, kinds)), dtype=np.float64).reshape(-1, 3)
    lengths = stops - starts
    units, amp, plain = (np.repeat(per_entry[:, k], lengths) for k in range(3))
    inputs = tensor & ~is_out
    carried = np.where(np.isnan(carried_errors), 0.0, carried_errors)
    carried = np.where(inputs & matched, carried, np.where(inputs & ~matched, np.inf, 0.0))
    e_in = np.repeat(np.maximum.reduceat(carried, starts), lengths)
    low = np.where((t_eps != g_eps) & (t_eps > 0) & (g_eps > 0), np.fmax(t_eps, g_eps), 0.0)
    high = np.where(g_eps > 0, np.fmin(t_eps, g_eps), t_eps)
    in_low = np.repeat(np.maximum.reduceat(np.where(inputs & matched, low, 0.0), starts), lengths)
    with np.errstate(invalid="ignore", over="ignore"):
        # inputs that differ by no more than their lower precision's rounding: no statistics slack (see _carried)
        quiet = (in_low > 0) & (e_in <= in_low)
        carried_out = np.where(quiet, plain * np.fmax(e_in, in_low / 2), np.where(e_in > 0, amp * e_in, 0.0))
        judged = is_out & tensor & matched & (errors > 0) & (t_eps > 0)
        if skip is not None:
            judged &= ~skip
        # a forward output whose inputs are identical and whose Mean moved beyond the rounding of a mean: no
        # per-element allowance of the lower precision settles it (mean_moved)
        forward = np.repeat(np.fromiter((forward_twin(entry_names[e]) is None for e in first_entries), dtype=bool,
                                        count=len(first_entries)), lengths)
        moved = mean_moved(stats, noise, plain_out & tensor & matched & (low > 0) & (e_in == 0) & forward)
        negligible = judged & (errors <= units * high) & ~moved
        simple = judged & plain_out & ~negligible & ~moved
        as_dtype = simple & (low > 0) & (errors <= np.hypot(carried_out, units * low))
        as_inherited = simple & (low == 0) & (errors <= np.hypot(carried_out, units * t_eps))
    special = {i for i, (kind, collective, _) in enumerate(kinds) if collective}
    special.update(_entries_with_differing_arguments(cells, entry, states, is_tensor, matched, inputs))
    settled = negligible | as_dtype | as_inherited
    open_rows = (is_out & tensor & matched & (errors > 0)) & ~settled
    if skip is not None:
        open_rows &= ~skip
    open_entries = set((np.searchsorted(starts, np.flatnonzero(open_rows), side="right") - 1).tolist())
    open_entries |= {i for i in special if (is_out[starts[i]:stops[i]] & tensor[starts[i]:stops[i]]).any()}
    if exact:
        open_entries = set(range(len(starts)))
    for row in np.flatnonzero(as_dtype).tolist():
        origin[row] = DTYPE
    for row in np.flatnonzero(as_inherited).tolist():
        origin[row] = INHERITED
    if not open_entries:
        return origin
    first_rows: dict = {}
    for a, b in zip(starts.tolist(), stops.tolist()):
        first_rows.setdefault(entry_names[entry_list[a]], (a, b))
    # few entries come here: the per-row numbers stay numpy arrays, read by index
    view = _View(err=errors, norms=g_norm, mags=g_mag, g_max=g_high, g_min=g_low, g_mean=g_mean, shapes=shapes[1])
    context = _Context(view, carried_errors, _canonical_all(dtypes[0]), _canonical_all(dtypes[1]),
                       matched.tolist(), states, is_tensor, cells["NPU max"],
                       cells["Bench max"], slack, first_rows, trace,
                       frozenset() if skip is None else frozenset(np.flatnonzero(skip).tolist()),
                       frozenset(np.flatnonzero(moved).tolist()))
    for index in sorted(open_entries):
        a, b = int(starts[index]), int(stops[index])
        _judge_entry(entry_names[entry_list[a]], a, b, context, origin)
    return origin


@dataclass
class _Context:
    view: "_View"
    carried_err: list
    t_dtypes: list
    g_dtypes: list
    matched: list
    states: list
    is_tensor: list
    npu_max: list
    bench_max: list
    slack: float
    first_rows: dict
    trace: list | None
    skip: frozenset = frozenset()
    moved: frozenset = frozenset()    # rows whose Mean moved beyond its rounding, inputs identical (mean_moved)


def _judge_entry(name: str, start: int, stop: int, ctx: _Context, origin: list) -> None:
    """The exact judgement of one entry's output rows (written into origin)."""
    view, err, carried_err = ctx.view, ctx.view.err, ctx.carried_err
    t_dtypes, g_dtypes, matched_list, states, is_tensor = (ctx.t_dtypes, ctx.g_dtypes, ctx.matched, ctx.states,
                                                          ctx.is_tensor)
    inputs, outputs = [], []
    for r in range(start, stop):
        (outputs if states[r] in OUT_STATES else inputs).append(r)
    if not outputs:
        return
    twin = forward_twin(name)
    twin_rows = ctx.first_rows.get(twin) if twin else None
    saved = [r for r in range(*twin_rows) if is_tensor[r]] if twin_rows else []
    tensors = [r for r in inputs if is_tensor[r]]
    args_differ = any(matched_list[r] and not _same_value(ctx.npu_max[r], ctx.bench_max[r])
                      for r in inputs if not is_tensor[r])
    e_in, in_low = 0.0, 0.0
    for r in tensors + saved:
        if not matched_list[r]:
            e_in = math.inf
            continue
        if carried_err[r] == carried_err[r]:
            e_in = max(e_in, carried_err[r])
        in_low = max(in_low, _low_eps(t_dtypes[r], g_dtypes[r]))
    kind = op_kind(name)
    api = api_of(name)
    amp, units = KIND_PARAMS[kind]
    if twin is not None and api in KINKED:
        amp = math.inf
    for r in outputs:
        origin[r] = NONE
        if not matched_list[r] or not is_tensor[r] or r in ctx.skip:
            continue
        e = err[r]
        if e != e or e == 0:
            continue
        own = _eps(t_dtypes[r])
        if not own:                     # integers, booleans: any difference is carried or made here
            origin[r] = INHERITED if e_in > 0 else INTRODUCED
            continue
        high = min(own, _eps(g_dtypes[r]) or own)
        if e <= units * high:
            continue
        if states[r] == "parameters_grad":
            origin[r] = _passive(e, t_dtypes[r], g_dtypes[r], units)
            continue
        if args_differ:
            origin[r] = INTRODUCED
            continue
        if _is_collective(name, api):
            origin[r] = INHERITED
            continue
        if r in ctx.moved:
            origin[r] = INTRODUCED
            continue
        # inputs that differ by no more than their lower precision's rounding (a bfloat16 cast of the same values)
        # carry at most half its unit, whatever their statistics show: the statistics slack would hide an output
        # error several times that rounding (a bfloat16 accumulator behind a bfloat16 input)
        # (forward only: a backward sums products of its incoming gradient and saved tensors over the batch)
        quiet = twin is None and 0 < in_low and e_in <= in_low
        slack = 1.0 if quiet else ctx.slack
        if twin is None and api in NON_AMPLIFYING:
            a = 1.0 if quiet else min(ctx.slack, NON_AMPLIFYING_SLACK)
        else:
            a = slack * _amplification(kind, api, amp, tensors, r, twin is not None, view)
        if twin is not None and ctx.slack > 1 and tensors:
            # statistics: a gradient summed over the batch (a parameter's) sums the per-element errors that
            # the four numbers of its input hardly show
            a *= math.sqrt(max(1.0, numel(view.shapes[tensors[0]]) / max(numel(view.shapes[r]), 1.0)))
        carried = a * (max(e_in, in_low / 2) if quiet else e_in) if e_in or quiet else 0.0
        low = _low_eps(t_dtypes[r], g_dtypes[r])
        summed = _summed(kind, api, tensors, r, twin is not None, view)
        final = max(own, in_low)
        # the K terms are summed in float32 (or float64) and rounded once to a lower precision: sqrt(K) grows the
        # accumulator's rounding, not bfloat16's (a bfloat16 matmul on CPU and NPU accumulates in float32)
        rounding = units * max(MODULE_CHAIN if kind == MODULE else 1.0, summed * min(final, EPS["float32"]) / final)
        if ctx.trace is not None:
            ctx.trace.append((r, e, e_in, a, rounding, low, final))
        if low and e <= math.hypot(carried, units * low):
            origin[r] = DTYPE
        elif e <= math.hypot(carried, rounding * final):
            origin[r] = INHERITED
        elif kind == MODULE and e <= math.hypot(carried, units * EPS[MODULE_FLOOR_DTYPE]):
            origin[r] = DTYPE
        elif e <= ROUNDING_FLOOR_UNITS * min(high, EPS["float32"]):     # sums in float32 (or float64)
            origin[r] = INHERITED
        else:
            origin[r] = INTRODUCED


def _is_collective(name: str, api: str) -> bool:
    return api in COLLECTIVE and name.startswith(("Distributed.", "MintDistributed.", "communication."))


@lru_cache(maxsize=4096)
def _entry_kind(name: str) -> tuple:
    """(kind, is a collective, cannot amplify) of an entry name. The first pass may settle backward entries too:
    the exact judgement only adds inputs (the forward entry's) and amplification to theirs."""
    if name.startswith(("Module.", "Cell.")):
        return MODULE, False, False
    api = api_of(name)
    return KIND_OF.get(api, OTHER), _is_collective(name, api), api in NON_AMPLIFYING


@lru_cache(maxsize=4096)
def _op_kind(op: str) -> tuple:
    """(kind, is a collective, cannot amplify) from an entry's name without call count and direction
    (`Tensor.add_`)."""
    if op.startswith(("Module.", "Cell.")):
        return MODULE, False, False
    if op.startswith("Primitive.") and op.count(".") == 2:
        api = golden_op(op, op.rpartition(".")[2])
        return KIND_OF.get(api, OTHER), False, api in NON_AMPLIFYING
    prefix, _, api = op.partition(".")
    api = api[len("comm_func."):] if api.startswith("comm_func.") else api
    if api.endswith("_") and not api.endswith("__"):
        api = api[:-1]
    collective = api in COLLECTIVE and prefix in ("Distributed", "MintDistributed", "communication")
    return KIND_OF.get(api, OTHER), collective, api in NON_AMPLIFYING


def _canonical_all(dtypes: list) -> list:
    """canonical of every dtype (each distinct one once)."""
    spelled = {d: canonical(d) for d in set(dtypes)}
    return list(map(spelled.__getitem__, dtypes))


def _eps_array(dtypes: list) -> np.ndarray:
    """eps of every row's dtype (0 for non-float dtypes and non-tensors)."""
    eps = {d: (_eps(canonical(d)) if isinstance(d, str) else 0.0) for d in set(dtypes)}
    return np.fromiter(map(eps.__getitem__, dtypes), dtype=np.float64, count=len(dtypes))


def _entries_with_differing_arguments(cells: dict, entry: np.ndarray, states: list, is_tensor: list,
                                      matched: np.ndarray, inputs: np.ndarray) -> set:
    """Positions (in the run order) of entries with a matched non-tensor input whose values differ."""
    npu_max, bench_max = cells["NPU max"], cells["Bench max"]
    rows = np.flatnonzero(~np.array(is_tensor, dtype=bool) & matched & ~np.fromiter(
        map(OUT_STATES.__contains__, states), dtype=bool, count=len(states))).tolist()
    pairs = zip(rows, map(npu_max.__getitem__, rows), map(bench_max.__getitem__, rows))
    differing = [r for r, a, b in pairs if a != b and not _same_value(a, b)]
    if not differing:
        return set()
    cuts = np.flatnonzero(np.diff(entry)) + 1
    starts = np.concatenate(([0], cuts))
    return set((np.searchsorted(starts, np.asarray(differing), side="right") - 1).tolist())


@dataclass
class _View:
    """Per-row numbers of the golden side that the amplifications read."""

    err: list
    norms: list
    mags: list
    g_max: list
    g_min: list
    g_mean: list
    shapes: list

    totals: dict = field(default_factory=dict)   # (first input row, output shape) -> summed input norms

    def finite_norm(self, row: int) -> float:
        norm = self.norms[row]
        return norm if norm == norm and math.isfinite(norm) else 0.0

    def input_total(self, tensors: list, out: int) -> float:
        """Sum of the inputs' norms, each grown by its broadcast into the output's shape (once per entry and
        output shape: an entry may have hundreds of inputs)."""
        key = (tensors[0] if tensors else -1, len(tensors), self.shapes[out])
        total = self.totals.get(key)
        if total is None:
            shape = self.shapes[out]
            total = self.totals[key] = sum(self.finite_norm(r) * _broadcast(self.shapes[r], shape) for r in tensors)
        return total


def _amplification(kind: int, api: str, base: float, tensors: list, out: int, backward: bool, view: _View) -> float:
    """How much this op may plausibly amplify its inputs' relative error into output row out."""
    a = base
    out_norm = view.finite_norm(out)
    if kind == LINEAR and len(tensors) >= 2 and out_norm:
        count = _contraction(api, view.shapes[tensors[0]], view.shapes[tensors[1]])
        if count:    # |x| |W| / (sqrt(K) |y|): about 1 for generic data, large where the sums cancel; short sums
            # (small K) scatter more around it
            ratio = view.finite_norm(tensors[0]) * view.finite_norm(tensors[1]) / (math.sqrt(count) * out_norm)
            a = max(a, ratio) * (1 + 2 / math.sqrt(count))
    elif kind in (ADDITIVE, REDUCTION) and out_norm:
        a = max(a, view.input_total(tensors, out) / out_norm)
    elif kind == EXPONENTIAL and tensors:
        first = tensors[0]
        a = max(a, 2.0 * _rms(view.norms[first], view.shapes[first], view.mags[first]))
    elif kind == NORM and tensors:
        first = tensors[0]
        a = max(a, a * _centring(view.norms[first], view.shapes[first], view.g_mean[first]))
    elif kind == DIVISION and tensors:
        a = max(a, _spread(view.g_max[tensors[-1]], view.g_min[tensors[-1]]))
    if backward:
        # a gradient combines the incoming gradient's error with the saved forward tensors' (e(dW) <= e(dy) + e(x))
        a = max(a, BACKWARD_AMPLIFICATION)
        if out_norm:     # and a gradient summed over a batch can cancel to ~0 (a bias before a norm)
            key = (tensors[0] if tensors else -1, len(tensors), None)
            plain = view.totals.get(key)
            if plain is None:
                plain = view.totals[key] = sum(view.finite_norm(r) for r in tensors)
            a = max(a, plain / out_norm)
    return a


def _summed(kind: int, api: str, tensors: list, out: int, backward: bool, view: _View) -> float:
    """How much the rounding an op adds grows with the length K of its sums: sqrt(K) (the rounding of K terms
    summed in another order - another thread count, vector width or blocking - adds up like a random walk).
    Any op whose output has fewer elements than its first tensor input sums K = their ratio of terms into each
    output element (a mean, a loss over a batch, a norm; backward: a weight or bias gradient summed over the batch
    and sequence, a LayerNorm's as much as a linear's); matmul-like ops: at least the contraction (forward) or the
    incoming gradient's elements per row of the output (backward); normalisations: at least the normalised length
    (their mean and variance, forward and backward); a module: MODULE_SUMS (its sums are not shown)."""
    if kind == MODULE:
        return MODULE_SUMS
    if not tensors:
        return 1.0
    first = view.shapes[tensors[0]]
    count = numel(first) / max(numel(view.shapes[out]), 1.0)
    count = count if count == count else 0.0
    if kind == LINEAR and not backward:
        count = max(count, _contraction(api, first, view.shapes[tensors[1]]) if len(tensors) >= 2 else 0)
    elif kind == LINEAR:
        dims = _dims(view.shapes[out])
        count = max(count, numel(first) / dims[0] if dims and dims[0] else 0)
    elif kind == NORM:
        dims = _dims(first)
        count = max(count, dims[-1] if dims else 0)
    return math.sqrt(count) if count > 1 else 1.0


@lru_cache(maxsize=4096)
def _dims(shape) -> tuple:
    if not isinstance(shape, str) or not shape.startswith("["):
        return ()
    try:
        return tuple(int(part) for part in shape.strip("[]").split(",") if part.strip())
    except ValueError:
        return ()


def _contraction(api: str, first, second) -> int:
    """The length of the sums of a matmul-like op (conv: the weight's elements per output channel)."""
    if api.startswith("conv"):
        dims = _dims(second)
        return int(np.prod(dims[1:])) if len(dims) > 1 else 0
    dims = _dims(first)
    return dims[-1] if dims else 0


def _rms(norm: float, shape, magnitude: float) -> float:
    """Root mean square of a tensor from its L2 norm and shape (its largest magnitude when the norm is not
    finite, e.g. logits masked with -inf)."""
    count = numel(shape)
    if math.isfinite(norm) and count > 0:
        return norm / math.sqrt(count)
    return magnitude if math.isfinite(magnitude) else 0.0


def _centring(norm: float, shape, mean: float) -> float:
    """rms / std of a tensor: how much subtracting its mean amplifies its relative error (a normalisation)."""
    count = numel(shape)
    if not (math.isfinite(norm) and count > 0 and math.isfinite(mean)):
        return 1.0
    square = norm * norm / count
    variance = square - mean * mean
    if variance <= square * 1e-6:
        return 1e3
    return math.sqrt(square / variance)


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
    """Equal values; NaN equals NaN, a dtype equals itself however a framework spells it (Float32, torch.float32)."""
    return (a == b or (isinstance(a, float) and isinstance(b, float) and a != a and b != b)
            or (isinstance(a, str) and isinstance(b, str) and canonical(a) == canonical(b)))


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
    n_in, n_out = numel(in_shape), numel(out_shape)
    if not (n_in > 0 and n_out > 0) or n_out <= n_in:
        return 1.0
    return math.sqrt(n_out / n_in)
