"""One verdict per row, computed once (issue 27): Result, Err_message and Error_Origin, and the culprit that the
advisor, the console summary, -da, the HTML report and msprobe graph all name.

The reference's rules (rules.py) and Error_Origin (error_origin.py) are the judgement; this module decides which
rows they may read and finishes their output:

* **No data**: a row with no golden partner, or whose tensor one run records as null (the gradient of an input
  that does not require it), has nothing to compare: no group rule flags it, it gets no Error_Origin, and a note
  in Err_message says why; an output (a gradient) null in one run only gets no dtype or shape error either (a
  MindSpore backward returns a gradient for every input, PyTorch's None for one that needs none).
* **Noise**: an output whose norm, in both runs, lies within NOISE_UNITS units of rounding of its inputs' norm (a
  bias gradient summed to ~0 before a BatchNorm: ~1e-9 against inputs of ~1e-2) is the rounding floor of its
  inputs: its differences are rounding; no metric rule reads it, no Error_Origin; a note names the input. Only
  where a small result can only come from cancellation: gradients (backward entries, parameter gradients, whose
  inputs are the incoming gradients) and forward sums and differences (add, sub, sum, mean, ...); a softmax or a
  normalisation maps large inputs to small outputs by design.
* **Framework conventions** (a MindSpore target against a PyTorch golden, or any mapping option): integer tensors
  of different width with equal values (int32 against int64 labels) and shapes that differ only by a reshape
  (equal element counts; statistics do not depend on the layout, real tensors are compared flat) are judged by
  their values, with a note instead of rule 6/7's error; and a backward output that one framework's gradient
  passes on unchanged to a later backward op and the other's does not is a recording convention (PyTorch records
  the gradient at an API's last autograd node: for a 4-D matmul the view's gradient, for cross_entropy that of
  log_softmax's output), noted and not judged.
* **Ignored APIs** (rules.ALL_IGNORE: empty, to, __setitem__, ...), which no rule judges, get no Error_Origin
  either.
* **Enters here**: at a level that records no parameters (L1), one framework, the first differing row of the
  table, when it is a tensor input of a forward API and every row before it is matched: no dumped op made its
  difference (a weight, the data, a constant), a warning made here (MSG_ENTERS), under the bounds of a parameter
  below.
* **Made here**: a module parameter (mix, L0) whose two runs differ beyond PARAMETER_UNITS units of rounding and
  PARAMETER_FLOOR of its magnitude enters the step with its difference (no op of the step makes it: another
  initialisation, checkpoint or earlier updates): a warning made here (WARNING_HERE: an op where the precision
  drops outranks it, as at a step after that op changed the updates); an output that Error_Origin calls
  `introduced` is at least a warning; a module output whose inputs are identical and whose error only the
  rounding of a lower precision explains (a cast inside the module) is a warning too.

`row_levels` reads a judged row back as one level, from its cells alone (a table read back from a file gives the
same levels); only outputs, parameter gradients, parameters and debug.json saves can be made here, an input
row carries:

* MADE_HERE: Error_Origin `introduced`, or an error its inputs do not explain (shape, NaN/Inf, an argument,
  requires_grad, a large norm error with quiet inputs);
* PRECISION_HERE: the precision drops here: a dtype error (bfloat16 against float32) not inherited, or a module's
  hidden cast (the warning above);
* WARNING_HERE: a warning its inputs do not explain;
* CARRIED_ISSUE: a warning or error carried from the inputs (Error_Origin inherited/dtype), or on an input row;
* CARRIED: pass, but Error_Origin names a difference (inherited or dtype);
* NOTHING: pass with no difference worth a word, or not judged.

The culprit is the first row of the highest level, when that is at least WARNING_HERE.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import repeat
from operator import eq, is_

import numpy as np

from msprobe.compare import rules
from msprobe.compare.error_origin import (
    ADDITIVE,
    DTYPE,
    EPS,
    INHERITED,
    INTRODUCED,
    OUT_STATES,
    REDUCTION,
    cell_floats,
    forward_twin,
    judge_origin,
    numel,
    op_kind,
    row_errors,
    stat_floats,
)
from msprobe.compare.mapping import unmatched_reasons
from msprobe.compare.stats import statistics_rounding
from msprobe.frameworks.dtypes import canonical, family
from msprobe.table import columns as col

NOISE_UNITS = 16.0        # an output within this many units of rounding of its inputs' norm is their rounding floor
PARAMETER_UNITS = 16.0    # a parameter differing by more units of rounding than this differs before the step
PARAMETER_FLOOR = 1e-3    # ... and by more than this share of its magnitude (updates spread gradients' rounding)
STAT_FLOOR_UNITS = 8.0    # a statistic within this many units of rounding of its tensor's magnitude is ~0

MSG_INTRODUCED = ("warning: The output error exceeds what its inputs and the dtypes' rounding explain "
                  "(Error_Origin introduced).")
MSG_HIDDEN_CAST = ("warning: The inputs are identical but the output differs, within the rounding of a lower "
                   "precision: the module computes in a lower precision inside (a cast, autocast).")
MSG_PARAMETER = ("warning: The parameter differs between the runs beyond rounding: the difference enters before "
                 "this step (another initialisation or checkpoint, or earlier updates).")
MSG_ENTERS = ("warning: This input differs while every item dumped before it is identical: the difference enters "
              "here, made by no dumped op (a weight or a buffer at level L1, the data, a constant).")
MSG_EXTRA_OP = ("warning: No golden op matches this one and its output is the first tensor the runs differ on (an "
                "input of the next op): an op the golden run does not call.")
MSG_FIRST_CAST = ("warning: This cast is not judged by the rules, and its output, in another dtype than the golden's, "
                  "is the first tensor the runs differ on (an input of the next op): the dtype change is the cause.")
MSG_PARTED = ("warning: The two runs' tensors differ in shape from here on (the first shape difference of the "
              "table, every row before it has equal shapes): here the runs call different ops, or one run makes an "
              "extra or misses a call that shifts the call counts of every later call of its API (-fm pairs calls "
              "by their order under each module instead).")
MSG_EXTRA_CHANGE = ("warning: No golden op matches this one, and it changes the tensor it passes on beyond its "
                    "dtype's rounding where the golden run passes the same tensor on unchanged (the next op's golden "
                    "input is this op's golden input): an op the golden run does not call.")
NOTE_UNMATCHED = "note: not compared: no golden item matches this one."
NOTE_NULL = "note: not compared: {who} here (null)."
_TENSOR_FAMILIES = frozenset({"int", "float", "bool", "complex"})
NOTE_NOISE = ("note: below the noise floor of {neighbour}: norm {norm:.2g} within {units:g} units of rounding of "
              "{reference:.2g} in both runs; its differences are rounding and are not judged.")
NOTE_INT_WIDTH = "note: {target} vs {golden}, values equal (a framework convention)."
NOTE_RESHAPE = ("note: shape {target} vs {golden}: a reshape (equal element counts), compared element-wise as flat "
                "tensors.")
NOTE_RECORDING = ("note: the two frameworks record different tensors here: the {passes} gradient reaches {consumer} "
                  "unchanged, the {other} reaches no later backward op (a recording convention); not judged.")

# levels of a judged row (row_levels), lowest first
NOTHING, CARRIED, CARRIED_ISSUE, WARNING_HERE, PRECISION_HERE, MADE_HERE = range(6)
# the key under which compare/pipeline keeps Verdict.levels in a result table's cells (no column: not written), for
# the views that read the table in the same run (msprobe graph)
LEVELS = "verdict levels"
_OWN_STATES = frozenset({"output", "parameters_grad", "parameters", "debug"})   # a debug.json save has no op around it
_OWN_ERRORS = (rules.MSG_STAT_NAN, rules.MSG_THOUSANDTH, rules.MSG_NORM_OUTPUT, rules.MSG_REQUIRES_GRAD,
               rules.MSG_SCALAR, rules.MSG_SHAPE, rules.MSG_MD5_DIFF, rules.MSG_NAN_POSITION)


@dataclass
class Verdict:
    results: list                 # Result per row
    messages: list                # Err_message per row (JSON array texts)
    origins: list | None          # Error_Origin per row (None in md5 mode)
    culprit: int | None           # the culprit row (0-based), None when no row is made here
    levels: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int8))
    unjudged: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))   # RowFacts.unjudged


@dataclass
class RowFacts:
    """What the rules may read, per row (see the module docstring)."""

    unjudged: np.ndarray          # no data, noise or a recording convention
    same_dtype: np.ndarray        # cross-framework integer widths, values equal
    same_shape: np.ndarray        # cross-framework reshape
    identical_inputs: np.ndarray  # every tensor input of the row's entry matched with equal statistics (>= 1 input)
    notes: dict                   # row -> [note texts]
    enters: int | None = None     # the first differing row, when it is a forward entry's input (see _entering)
    dtype_inherited: np.ndarray | None = None   # per row: an input of its entry differs in dtype, made by an
    # earlier dumped op (an earlier output with the same target dtype, shape and statistics differs in dtype)
    first_difference: int | None = None   # the first row unmatched, differing or not judged by statistics alone
    extra_op: tuple | None = None   # (row, message): the output of an op no rule judges that makes the first difference
    shape_differs: np.ndarray | None = None   # one framework: matched tensors of different shapes (not comparable)
    parted: list = field(default_factory=list)   # one framework: the rows where the shapes first differ
    extra_changes: list = field(default_factory=list)   # one framework: (row, message) of extra ops that change values


def judge_rows(data: rules.JudgeInput, cells: dict, states: list, is_tensor: list, cross: bool,
               sides: tuple | None = None, entry_ops: list | None = None) -> Verdict:
    """The verdict of every row of a measured table. sides = (target Items, golden Items, Pairs) for the
    cross-framework recording check (None: not checked)."""
    stats = stat_floats(cells) if data.mode != col.MD5 else None
    data.cross = cross
    facts = row_facts(data, cells, states, is_tensor, cross, sides, stats, entry_ops)
    if cross and stats is not None:     # two collectors: an input equal up to their statistics rounding carries none
        stats = statistics_rounding(stats, data.dtypes, data.shapes)
    data.unjudged, data.same_dtype, data.same_shape = facts.unjudged, facts.same_dtype, facts.same_shape
    level, messages = rules.judge_levels(data)
    origins = None
    if data.mode != col.MD5:
        origins = judge_origin(data.mode, cells, data.entry, data.entry_names, states, is_tensor, data.matched,
                               data.dtypes, data.shapes, entry_ops=entry_ops, stats=stats,
                               skip=facts.unjudged if facts.shape_differs is None else facts.unjudged | facts.shape_differs)
        t_dtype, g_dtype = data.dtypes
        for row, origin in enumerate(origins):
            if origin == INTRODUCED:
                messages[row].append(MSG_INTRODUCED)
                level[row] = max(level[row], rules.WARNING)
            elif (origin == DTYPE and facts.identical_inputs[row]
                  and canonical(t_dtype[row]) == canonical(g_dtype[row])):
                messages[row].append(MSG_HIDDEN_CAST)
                level[row] = max(level[row], rules.WARNING)
        for row in _differing_parameters(data, cells, states, is_tensor, facts.unjudged, stats):
            messages[row].append(MSG_PARAMETER)
            level[row] = max(level[row], rules.WARNING)
        extras = facts.extra_changes + ([facts.extra_op] if facts.extra_op is not None else [])
        for row, text in dict(extras).items():      # the first-difference message wins on a row named twice
            messages[row].append(text)
            level[row] = max(level[row], rules.WARNING)
        for row in facts.parted:
            messages[row].append(MSG_PARTED)
            level[row] = max(level[row], rules.WARNING)
        if facts.enters is not None and _beyond_rounding(data, cells, [facts.enters], stats):
            messages[facts.enters].append(MSG_ENTERS)
            level[facts.enters] = max(level[facts.enters], rules.WARNING)
    flagged_input = None if data.mode == col.MD5 else _flagged_first(level, states, facts.first_difference,
                                                                      data.matched)
    for row, notes in facts.notes.items():
        messages[row].extend(notes)
    results = [rules.RESULT_TEXT[x] for x in level]
    texts = rules.message_texts(messages)
    levels = row_levels(states, results, texts, origins)
    if facts.dtype_inherited is not None:
        # the precision drops where a dtype change is made, not where an input already lower is read
        levels[(levels == PRECISION_HERE) & facts.dtype_inherited] = CARRIED_ISSUE
    if flagged_input is not None and levels[flagged_input] == CARRIED_ISSUE:
        # no earlier row differs: the input is where the difference enters, not carried (its Err_message is the
        # rules'; a table read back without its statistics cannot tell, docs/compare.md §6.2): a warning made
        # here, so that an output its op makes (an argument's introduced output, a dtype's drop) outranks it
        levels[flagged_input] = WARNING_HERE
    return Verdict(results, texts, origins, culprit_of(levels), levels, facts.unjudged)


def _flagged_first(level: list, states: list, first: int | None, matched) -> int | None:
    """The first row that differs (or is flagged) in a table whose rows before it are all matched and identical,
    when it is a flagged input: no earlier row carries a difference into it, it enters there (a requires_grad, a
    dtype or values that no dumped op made), whatever the dump level or frameworks."""
    flagged = np.flatnonzero(np.asarray(level) >= rules.WARNING)
    if not len(flagged) or (first is not None and first < flagged[0]):
        return None
    row = int(flagged[0])
    return None if states[row] in _OWN_STATES or not matched[row] else row


def _differing_parameters(data, cells: dict, states: list, is_tensor: list, unjudged: np.ndarray,
                          stats: tuple) -> list:
    """The module parameter rows (mix, L0) whose two runs differ beyond PARAMETER_UNITS units of rounding: no op of
    the step makes a parameter, so its difference enters the step there (made here, see the module docstring)."""
    rows = [r for r, state in enumerate(states) if state == "parameters" and is_tensor[r] and data.matched[r]
            and not unjudged[r]]
    return _beyond_rounding(data, cells, rows, stats)


def _beyond_rounding(data, cells: dict, rows: list, stats: tuple) -> list:
    """Those of rows whose two runs differ by more than PARAMETER_UNITS units of rounding of their dtype and by
    more than PARAMETER_FLOOR of their magnitude: an update whose gradients differ by rounding moves a weight by
    more than the weight's own rounding (one SGD step of two twin runs: 6e-5 of a bias's magnitude), so the
    dtype's rounding alone would call every weight of a twin run at a later step a difference. Integer tensors (token
    ids, labels) have no rounding: any difference is one."""
    if not rows:
        return []
    picked = np.asarray(rows)
    sub_stats = tuple([values[picked] for values in side] for side in stats)
    sub_cells = {"EucDist": [cells["EucDist"][r] for r in rows]} if "EucDist" in cells else {}
    errors = row_errors(data.mode, sub_cells, sub_stats)[0]
    eps = np.fmax(_eps_of([data.dtypes[0][r] for r in rows]), _eps_of([data.dtypes[1][r] for r in rows]))
    integer = np.array([family(data.dtypes[0][r]) == "int" and family(data.dtypes[1][r]) == "int" for r in rows],
                       dtype=bool)
    with np.errstate(invalid="ignore"):
        beyond = ((eps > 0) & (errors > np.fmax(PARAMETER_UNITS * eps, PARAMETER_FLOOR))) | (integer & (errors > 0))
    return picked[beyond].tolist()


# ----------------------------------------------------------------------------------------------- row facts
def row_facts(data: rules.JudgeInput, cells: dict, states: list, is_tensor: list, cross: bool,
              sides: tuple | None = None, stats: tuple | None = None, entry_ops: list | None = None) -> RowFacts:
    rows = len(data.entry)
    notes: dict = {}
    none = np.zeros(rows, dtype=bool)
    if data.mode == col.MD5 or not rows:
        return RowFacts(none, none, none.copy(), none.copy(), notes)
    matched = np.asarray(data.matched, dtype=bool)
    tensor = np.asarray(is_tensor, dtype=bool)
    t_dtype, g_dtype = data.dtypes
    t_null = np.fromiter(map(is_, t_dtype, repeat(None)), dtype=bool, count=rows)
    g_null = np.fromiter(map(is_, g_dtype, repeat(None)), dtype=bool, count=rows)
    out = np.fromiter(map(OUT_STATES.__contains__, states), dtype=bool, count=rows)
    reason = unmatched_reasons(sides[1]) if cross and sides is not None else None
    for row in np.flatnonzero(~matched).tolist():
        notes[row] = [reason(data.entry_names[data.entry[row]]) if reason else NOTE_UNMATCHED]
    # a null on one side, or an output (a gradient) neither run records; a None argument on both sides is a value
    for row in np.flatnonzero(matched & ((t_null ^ g_null) | (t_null & g_null & out))).tolist():
        who = "neither run records a tensor" if t_null[row] and g_null[row] else \
            "the NPU records no tensor" if t_null[row] else "the Bench records no tensor"
        notes[row] = [NOTE_NULL.format(who=who)]
    no_data = ~matched | t_null | g_null
    stats_t, stats_g = stats if stats is not None else stat_floats(cells)
    equal = matched.copy()
    for t, g in zip(stats_t, stats_g):
        equal &= (t == g) | (np.isnan(t) & np.isnan(g))
    starts = np.concatenate(([0], np.flatnonzero(np.diff(data.entry)) + 1))
    lengths = np.diff(np.append(starts, rows))
    inputs = tensor & ~out
    noise, neighbour, floors = _noise(stats_t[3], stats_g[3], data, cells[col.NPU_NAME], tensor, matched, out,
                                      inputs, equal, starts, lengths, entry_ops)
    for row in np.flatnonzero(noise).tolist():
        notes.setdefault(row, []).append(NOTE_NOISE.format(
            neighbour=neighbour(row), norm=stats_g[3][row], units=NOISE_UNITS, reference=floors[row]))
    in_entry_ok = np.logical_and.reduceat(~inputs | equal, starts)
    has_input = np.add.reduceat(inputs.astype(np.int64), starts) > 0
    twins = _forward_twins(data, starts)
    identical_inputs = np.repeat(_with_saved_tensors(twins, in_entry_ok & has_input), lengths)
    same_dtype, same_shape, recorded = none, none.copy(), none.copy()
    if cross:
        same_dtype, same_shape = _conventions(data, stats_t, stats_g, matched & tensor & ~no_data, notes)
        if sides is not None:
            recorded = _recording_differences(data, sides, out & tensor & ~no_data & ~noise & ~equal, notes)
    # an output (a gradient) that one run records and the other does not has no dtype or shape to disagree on
    one_sided = matched & out & (t_null ^ g_null)
    if cross:
        # nor a non-tensor argument that one framework records and the other does not (MindSpore records a
        # collective's group name, PyTorch null); a tensor against null is a real difference (a dropped bias)
        other = [g if t is None else t for t, g in zip(t_dtype, g_dtype)]
        one_sided |= matched & ~out & (t_null ^ g_null) & np.fromiter(
            (family(d) not in _TENSOR_FAMILIES for d in other), dtype=bool, count=rows)
    # a recording convention (the two frameworks record different tensors) has no shape or dtype to disagree on
    same_dtype, same_shape = same_dtype | one_sided | recorded, same_shape | one_sided | recorded
    ignored = _ignored(data, starts, lengths, entry_ops)
    unjudged = no_data | noise | recorded | ignored
    enters = None if cross else _entering(data, states, matched, matched & tensor & ~unjudged & ~equal)
    same_dtypes = _same_texts(data.dtypes)
    inherited = np.repeat(_backward_reads_forward(twins, np.logical_or.reduceat(
        _dtype_from_earlier_op(data, stats_t, same_dtypes, tensor, out), starts), np.logical_or.reduceat(
        ~same_dtypes & inputs, starts)), lengths)
    # the rows before it are matched and identical (equal statistics, dtypes and shapes)
    same = equal & matched & ~(t_null ^ g_null) & same_dtypes & _same_texts(data.shapes)
    first_difference = int(np.argmin(same)) if not same.all() else None
    extra = None if cross else _unjudged_maker(data, states, stats_t, matched, ignored,
                                                tensor & ~unjudged & ~equal)
    shape_differs = None if cross else matched & tensor & ~no_data & ~_same_texts(data.shapes)
    parted = [] if shape_differs is None else _parting(data, states, shape_differs, starts, lengths)
    changes = [] if cross else _extra_changes(data, states, stats_t, stats_g, matched & tensor & ~no_data, tensor,
                                               starts, lengths)
    return RowFacts(unjudged, same_dtype, same_shape, identical_inputs, notes, enters,
                    first_difference=first_difference, dtype_inherited=inherited, extra_op=extra,
                    shape_differs=shape_differs, parted=parted, extra_changes=changes)


def _extra_changes(data, states: list, stats_t: list, stats_g: list, usable: np.ndarray, tensor: np.ndarray,
                   starts: np.ndarray, lengths: np.ndarray) -> list:
    """One framework: (output row, MSG_EXTRA_CHANGE) of every forward API entry with no golden partner that sits
    between two matched rows holding, in the golden run, one and the same tensor (same dtype and four statistics:
    the golden does nothing there), while in the target the matched row before it holds its input and the one
    after it its output (same dtype and statistics; views and reshapes keep statistics, so shapes are not
    compared) and the two differ by more than one unit of the coarsest dtype's rounding: the op changes values the
    golden passes on unchanged (an added scale: `q * 1.01`). A rounding of a tensor moves each statistic by at most
    half a unit; the error model cannot judge such an op, having no golden partner for it, and its effect
    downstream looks carried (-fm pairs the rest of the calls by order, leaving it unmatched)."""
    t_dtype, g_dtype = data.dtypes
    entries = np.flatnonzero(~np.logical_or.reduceat(np.asarray(data.matched, dtype=bool), starts))
    if not len(entries):
        return []

    def key(values, dtypes, row):
        return (dtypes[row], *(float(v[row]) for v in values))

    seen: dict = {}
    for row in np.flatnonzero(usable).tolist():
        seen.setdefault(key(stats_t, t_dtype, row), []).append(row)
    found = []
    for entry in entries.tolist():
        start, stop = int(starts[entry]), int(starts[entry] + lengths[entry])
        name = data.entry_names[data.entry[start]]
        if not name.endswith(".forward") or name.startswith(("Module.", "Cell.")):
            continue
        inputs = [r for r in range(start, stop) if tensor[r] and states[r] not in OUT_STATES]
        outputs = [r for r in range(start, stop) if tensor[r] and states[r] in OUT_STATES]
        if not inputs or not outputs or not isinstance(t_dtype[outputs[0]], str):
            continue
        before = [r for r in seen.get(key(stats_t, t_dtype, inputs[0]), ()) if r < start]
        after = [r for r in seen.get(key(stats_t, t_dtype, outputs[0]), ()) if r >= stop and states[r] == "input"]
        if not before or not after:
            continue
        q, r = before[-1], after[0]
        golden = key(stats_g, g_dtype, q)
        if golden != key(stats_g, g_dtype, r) or any(math.isnan(v) for v in golden[1:]):
            continue
        magnitude = max(abs(float(stats_t[0][q])), abs(float(stats_t[1][q])))
        norm = float(stats_t[3][q])
        if not (magnitude > 0 and norm > 0):
            continue
        change = max(max(abs(float(stats_t[i][r]) - float(stats_t[i][q])) for i in range(3)) / magnitude,
                     abs(float(stats_t[3][r]) - norm) / norm)
        # the coarsest dtype of the three tensors: a statistic is written rounded to its tensor's dtype
        unit = max(EPS.get(canonical(t_dtype[row]), 0.0) if isinstance(t_dtype[row], str) else 0.0
                   for row in (q, outputs[0], r))
        if change > unit > 0:
            found.append((outputs[0], MSG_EXTRA_CHANGE))
    return found


def _parting(data, states: list, shape_differs: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> list:
    """One framework: the rows where the two runs' matched tensors first differ in shape, when that is in a forward
    entry (the outputs of differing shape of that entry, else the first such row): from there on the pairs hold
    tensors of other ops (an extra or missing call shifts the call counts of its API), which no statistic can
    judge; where the runs part is the finding."""
    rows = np.flatnonzero(shape_differs)
    if not len(rows):
        return []
    first = int(rows[0])
    entry = int(np.searchsorted(starts, first, side="right")) - 1
    if ".forward" not in data.entry_names[data.entry[first]]:
        return []
    span = range(int(starts[entry]), int(starts[entry] + lengths[entry]))
    outputs = [r for r in span if shape_differs[r] and states[r] in OUT_STATES]
    return outputs or [first]


def _unjudged_maker(data, states: list, stats_t: list, matched: np.ndarray, ignored: np.ndarray,
                    differing: np.ndarray) -> tuple | None:
    """(row, message) of the op no rule judges that makes the first difference: the first matched row that differs
    is a forward entry's input, and its target tensor is the output of an earlier forward API entry (the same dtype,
    shape and four statistics in the one dump: that op's result feeds it) which either has no golden partner (an
    op the golden run does not call: an extra scale or activation, MSG_EXTRA_OP) or is a cast no rule judges
    (rules.ALL_IGNORE: `Tensor.to`) whose output dtype differs from its partner's (MSG_FIRST_CAST). The compare
    could otherwise only name what such an op changes downstream. One framework only: across frameworks one run
    records many ops the other does not."""
    rows = np.flatnonzero(differing)
    if not len(rows):
        return None
    first = int(rows[0])
    if states[first] != "input" or ".forward" not in data.entry_names[data.entry[first]]:
        return None
    t_dtype, g_dtype = data.dtypes
    t_shape = data.shapes[0]
    key = (t_dtype[first], t_shape[first], *(float(values[first]) for values in stats_t))
    if any(math.isnan(value) for value in key[2:]):
        return None
    for row in range(first - 1, -1, -1):
        if states[row] != "output" or not data.entry_names[data.entry[row]].endswith(".forward"):
            continue
        if (t_dtype[row], t_shape[row], *(float(values[row]) for values in stats_t)) != key:
            continue
        if not matched[row]:
            return row, MSG_EXTRA_OP
        if ignored[row] and isinstance(g_dtype[row], str) and isinstance(t_dtype[row], str) \
                and canonical(t_dtype[row]) != canonical(g_dtype[row]):
            return row, MSG_FIRST_CAST
        return None
    return None


def _dtype_from_earlier_op(data, stats_t, same_dtypes: np.ndarray, tensor: np.ndarray,
                           out: np.ndarray) -> np.ndarray:
    """Per row: a tensor input whose two dtypes differ and whose lower precision an earlier output of the table
    already shows: either that output holds its target tensor (same dtype, shape and statistics, its dtypes
    differing too: that op's result feeds it), or an earlier output differs by the same pair of dtypes (a bfloat16
    autocast run against float32: every op after the first reads bfloat16, often through views, slices and summed
    gradients that no dump entry holds). The op reading it inherits the dtype change, it does not make it. A new
    pair of dtypes (a float16 cast in a bfloat16 run) is still made where it is first read."""
    t_dtype, g_dtype = data.dtypes
    t_shape = data.shapes[0]
    found = np.zeros(len(tensor), dtype=bool)
    differ = ~same_dtypes & tensor
    if not differ.any():
        return found
    produced: set = set()
    lowered: set = set()
    picked = np.flatnonzero(differ)
    columns = [values[picked].tolist() for values in stats_t]
    for k, row in enumerate(picked.tolist()):
        if not (isinstance(t_dtype[row], str) and isinstance(g_dtype[row], str)):
            continue
        key = (t_dtype[row], t_shape[row], columns[0][k], columns[1][k], columns[2][k], columns[3][k])
        change = (canonical(t_dtype[row]), canonical(g_dtype[row]))
        if out[row]:
            produced.add(key)
            lowered.add(change)
        elif key in produced or change in lowered:
            found[row] = True
    return found


def _same_texts(pair: tuple) -> np.ndarray:
    """Per row: the two sides' cells equal (dtypes compared by their canonical names)."""
    a, b = pair
    same = np.fromiter(map(eq, a, b), dtype=bool, count=len(a))
    for row in np.flatnonzero(~same).tolist():
        x, y = a[row], b[row]
        same[row] = isinstance(x, str) and isinstance(y, str) and canonical(x) == canonical(y)
    return same


def _forward_twins(data, starts: np.ndarray) -> list:
    """Per entry: the position of its forward entry when it is a backward entry whose forward the table holds,
    else None."""
    names = [data.entry_names[e] for e in data.entry[starts].tolist()]
    position = {name: k for k, name in enumerate(names)}
    return [position.get(forward_twin(name)) if ".backward" in name else None for name in names]


def _with_saved_tensors(twins: list, identical: np.ndarray) -> np.ndarray:
    """Per entry: its inputs are identical and, for a backward entry, those of its forward entry too (the saved
    tensors the backward reads: an attention's backward with identical incoming gradients but differing saved
    activations has differing inputs)."""
    out = identical.copy()
    for k, twin in enumerate(twins):
        if out[k] and twin is not None:
            out[k] = identical[twin]
    return out


def _backward_reads_forward(twins: list, inherited: np.ndarray, lower_input: np.ndarray) -> np.ndarray:
    """Per entry: its dtype change is inherited, and a backward entry's also when its forward entry reads an input
    of another dtype (autograd returns each input's gradient in that input's dtype: a bfloat16 input gets a
    bfloat16 gradient from float32 incoming gradients; the backward does not lower the precision, the forward's
    input did)."""
    out = inherited.copy()
    for k, twin in enumerate(twins):
        if not out[k] and twin is not None:
            out[k] = bool(lower_input[twin])
    return out


def _entering(data, states: list, matched: np.ndarray, differing: np.ndarray) -> int | None:
    """The first differing row of the table, when it is a tensor input of a forward entry and every item before it
    is matched (and identical): its difference is made by no dumped op (a weight at level L1, the data, a
    constant). Not where the dump records parameters (mix, L0: the parameter rows name a weight), nor across
    frameworks (their ops differ in granularity: an input may come from an op the other run does not have)."""
    rows = np.flatnonzero(differing)
    if not len(rows) or "parameters" in states:
        return None
    first = int(rows[0])
    if not matched[:first].all() or states[first] != "input":
        return None
    return first if ".forward" in data.entry_names[data.entry[first]] else None


def _ignored(data, starts, lengths, entry_ops) -> np.ndarray:
    """The rows of the APIs no rule applies to (empty, to, __setitem__, ...: rules.ALL_IGNORE): no Error_Origin
    either."""
    names = entry_ops if entry_ops is not None else data.entry_names
    return np.repeat(np.fromiter((_all_ignored(names[e], data.cross) for e in data.entry[starts].tolist()), dtype=bool,
                                 count=len(starts)), lengths)


@lru_cache(maxsize=8192)
def _all_ignored(name: str, cross: bool = False) -> bool:
    return rules.ignore_class(name, cross) == "all"


def _noise(t_norm, g_norm, data, names, tensor, matched, out, inputs, equal, starts, lengths, entry_ops):
    """(mask of outputs at the rounding floor of their entry's inputs in both runs, name of that input per row,
    the golden reference magnitude per row)."""
    kinds = [_cancels(data.entry_names[e], entry_ops[e] if entry_ops is not None else None)
             for e in data.entry[starts].tolist()]
    cancelling = np.repeat(np.asarray(kinds, dtype=bool), lengths)
    t_eps = _eps_of(data.dtypes[0])
    g_eps = _eps_of(data.dtypes[1])
    has_input = np.add.reduceat(inputs.astype(np.int64), starts) > 0
    finite_t = np.where(np.isfinite(t_norm), np.abs(t_norm), 0.0)
    finite_g = np.where(np.isfinite(g_norm), np.abs(g_norm), 0.0)

    def per_entry(values, mask):
        return np.repeat(np.maximum.reduceat(np.where(mask, values, 0.0), starts), lengths)

    # an entry without inputs (parameter gradients): its other tensors are the neighbours
    scope = np.repeat(has_input, lengths)
    reference_t = np.where(scope, per_entry(finite_t, inputs), per_entry(finite_t, tensor))
    reference_g = np.where(scope, per_entry(finite_g, inputs & matched), per_entry(finite_g, tensor & matched))
    eps_t = per_entry(t_eps, tensor)
    eps_g = per_entry(g_eps, tensor & matched)
    with np.errstate(invalid="ignore"):
        noise = (cancelling & out & tensor & matched & ~equal & (t_eps > 0) & np.isfinite(t_norm) & np.isfinite(g_norm)
                 & (reference_t > 0) & (reference_g > 0)
                 & (np.abs(g_norm) <= NOISE_UNITS * eps_g * reference_g)
                 & (np.abs(t_norm) <= NOISE_UNITS * eps_t * reference_t))

    def neighbour(row: int) -> str:
        k = int(np.searchsorted(starts, row, "right")) - 1
        start, stop = int(starts[k]), int(starts[k] + lengths[k])
        pool = [r for r in range(start, stop) if inputs[r] and matched[r]] if scope[row] else \
            [r for r in range(start, stop) if r != row and tensor[r] and matched[r]]
        best = max(pool, key=lambda r: finite_g[r], default=row)
        return str(names[best])
    return noise, neighbour, reference_g


def _cancels(entry_name: str, op: str | None) -> bool:
    """Whether a small output of this entry can only come from cancellation (see the module docstring); op: the
    entry's name without call count and direction, when known (read faster)."""
    if ".backward" in entry_name or ".parameters_grad" in entry_name:
        return True
    return _summing(op) if op is not None else op_kind(entry_name) in (ADDITIVE, REDUCTION)


@lru_cache(maxsize=4096)
def _summing(op: str) -> bool:
    return op_kind(op + ".0.forward") in (ADDITIVE, REDUCTION)


def _conventions(data, stats_t, stats_g, candidates, notes) -> tuple:
    """(same_dtype, same_shape) masks of the cross-framework conventions, with their notes."""
    rows = len(data.entry)
    t_dtype, g_dtype = data.dtypes
    t_shape, g_shape = data.shapes
    same_dtype = np.zeros(rows, dtype=bool)
    same_shape = np.zeros(rows, dtype=bool)
    for row in np.flatnonzero(candidates).tolist():
        a, b = canonical(t_dtype[row]), canonical(g_dtype[row])
        if a != b and family(a) == "int" and family(b) == "int" and _values_equal(stats_t, stats_g, row):
            same_dtype[row] = True
            notes.setdefault(row, []).append(NOTE_INT_WIDTH.format(target=a, golden=b))
        if t_shape[row] != g_shape[row]:
            n_t, n_g = _numel(t_shape[row]), _numel(g_shape[row])
            if n_t is not None and n_t == n_g:
                same_shape[row] = True
                notes.setdefault(row, []).append(NOTE_RESHAPE.format(target=t_shape[row], golden=g_shape[row]))
    return same_dtype, same_shape


def _values_equal(stats_t, stats_g, row: int) -> bool:
    """Max and Min recorded on both sides and equal; Mean and Norm equal where both sides record them."""
    for index, (t, g) in enumerate(zip(stats_t, stats_g)):
        a, b = t[row], g[row]
        if a != a or b != b:
            if index < 2:
                return False
            continue
        if abs(a - b) > 1e-6 * max(1.0, abs(a), abs(b)):
            return False
    return True


def _recording_differences(data, sides: tuple, candidates: np.ndarray, notes: dict) -> np.ndarray:
    """Backward outputs whose gradient one framework passes on unchanged to a later backward op (as that op's
    input) and the other does not: the two record different tensors (see the module docstring)."""
    rows = len(data.entry)
    found = np.zeros(rows, dtype=bool)
    t_items, g_items, pairs = sides
    backward = [".backward" in name for name in data.entry_names]
    rows_to_check = [r for r in np.flatnonzero(candidates).tolist() if backward[data.entry[r]]]
    if not rows_to_check:
        return found
    t_index, g_index = _gradient_index(t_items), _gradient_index(g_items)
    for row in rows_to_check:
        t_item, g_item = int(pairs.target[row]), int(pairs.golden[row])
        t_consumer = _consumer(t_items, t_index, t_item)
        g_consumer = _consumer(g_items, g_index, g_item)
        if (t_consumer is None) != (g_consumer is None):
            found[row] = True
            passes, consumer, other = (("NPU", t_consumer, "Bench's") if t_consumer is not None
                                       else ("Bench", g_consumer, "NPU's"))
            notes.setdefault(row, []).append(NOTE_RECORDING.format(passes=passes, consumer=consumer, other=other))
    return found


def _gradient_index(items) -> dict:
    """(numel, Max, Min) -> [(entry, item)] of the tensor inputs of every backward entry of a dump."""
    index: dict = {}
    names = items.entry_names
    for item, (entry, state, tensor) in enumerate(zip(items.entry, items.state, items.is_tensor)):
        if tensor and state == "input" and ".backward" in names[entry]:
            key = (_numel(items.shape[item]), items.stat_max[item], items.stat_min[item])
            index.setdefault(key, []).append((entry, item))
    return index


def _consumer(items, index: dict, item: int) -> str | None:
    """The first later backward entry whose input holds the same values as this item (equal element count and
    statistics), or None."""
    key = (_numel(items.shape[item]), items.stat_max[item], items.stat_min[item])
    mean, norm = items.stat_mean[item], items.stat_norm[item]
    own = items.entry[item]
    for entry, other in index.get(key, ()):
        if entry > own and _close(mean, items.stat_mean[other]) and _close(norm, items.stat_norm[other]):
            return items.entry_names[entry]
    return None


def _close(a, b) -> bool:
    if a is None or b is None or isinstance(a, str) or isinstance(b, str):
        return a == b
    return abs(a - b) <= 1e-5 * max(abs(a), abs(b)) or a == b


def _numel(shape) -> int | None:
    """The element count of a shape cell (error_origin.numel), None when the text is no shape."""
    count = numel(shape)
    return None if math.isnan(count) else int(count)


def _eps_of(dtypes: list) -> np.ndarray:
    eps = {d: EPS.get(canonical(d), 0.0) if isinstance(d, str) else 0.0 for d in set(dtypes)}
    return np.array([eps[d] for d in dtypes], dtype=np.float64)


# ----------------------------------------------------------------------------------------------- levels, culprit
def row_levels(states: list, results: list, messages: list, origins: list | None) -> np.ndarray:
    """The level of every judged row (NOTHING ... MADE_HERE, see the module docstring), from its state, Result,
    Err_message and Error_Origin cells."""
    keys = list(zip(map(_OWN_STATES.__contains__, states), results, messages,
                    origins if origins is not None else repeat("")))
    levels = {key: _level(*key) for key in set(keys)}     # a handful of distinct rows
    return np.fromiter(map(levels.__getitem__, keys), dtype=np.int8, count=len(keys))


def _level(own: bool, result: str, message: str, origin: str) -> int:
    if result not in ("warning", "error"):
        return CARRIED if origin in (INHERITED, DTYPE) else NOTHING
    if MSG_ENTERS in message:
        return WARNING_HERE
    if MSG_EXTRA_OP in message or MSG_FIRST_CAST in message or MSG_PARTED in message or MSG_EXTRA_CHANGE in message:
        return MADE_HERE
    if not own:
        return CARRIED_ISSUE
    if origin == INTRODUCED:
        return MADE_HERE
    if result == "error":
        if origin == INHERITED:
            return CARRIED_ISSUE
        if origin != DTYPE and any(text in message for text in _OWN_ERRORS):
            return MADE_HERE
        return PRECISION_HERE
    if MSG_HIDDEN_CAST in message:
        return PRECISION_HERE
    return CARRIED_ISSUE if origin in (INHERITED, DTYPE) else WARNING_HERE


def culprit_of(levels: np.ndarray) -> int | None:
    """The first row of the highest level, when that level is at least a warning made here."""
    if not len(levels):
        return None
    top = int(levels.max())
    return int(np.argmax(levels == top)) if top >= WARNING_HERE else None


def culprit_row(states: list, results: list, messages: list, origins: list | None) -> int | None:
    return culprit_of(row_levels(states, results, messages, origins))


# ----------------------------------------------------------------------------------------------- scale-aware errors
def scale_errors(mode: str, cells: dict) -> np.ndarray:
    """Per row the scale-aware relative error (NaN where there is nothing to compare).

    statistics: the largest over Max, Min, Mean and Norm of |NPU - Bench| / max(|Bench|, floor), the floor of a
    statistic being STAT_FLOOR_UNITS units of rounding of its tensor's magnitude (max(|Max|, |Min|); the Norm for
    the Norm): a statistic that is ~0 by cancellation (the Mean of a gradient after BatchNorm, ~1e-13) cannot give a
    large relative error, a statistic above its floor keeps its own relative error. The unit of rounding is that of
    the lower precision of the row's two dtypes. real data: EucDist / Bench l2norm, the norm-wise relative error,
    which no element near zero can inflate."""
    stats_t, stats_g = stat_floats(cells)
    eps = np.fmax(_eps_of(list(cells["NPU Dtype"])), _eps_of(list(cells["Bench Dtype"])))
    eps = np.where(eps > 0, eps, EPS["float32"])
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        if mode == col.TENSOR and "EucDist" in cells:
            dist = cell_floats(cells["EucDist"])
            norm = np.abs(stats_g[3])
            return np.where(dist == 0, 0.0, dist / norm)
        magnitude = np.fmax(np.abs(stats_g[0]), np.abs(stats_g[1]))
        worst = np.full(len(eps), np.nan)
        for index, (t, g) in enumerate(zip(stats_t, stats_g)):
            scale = np.abs(g) if index == 3 else magnitude
            floor = STAT_FLOOR_UNITS * eps * scale
            same = (t == g) | (np.isnan(t) & np.isnan(g))
            rel = np.where(same, 0.0, np.abs(t - g) / np.fmax(np.abs(g), floor))
            rel = np.where(~same & (np.fmax(np.abs(g), floor) == 0), np.inf, rel)
            worst = np.fmax(worst, rel)
        return worst


def describe_magnitude(value: float) -> str:
    """A relative error as its real magnitude: 4.2e-07, 0.0031, 0.75, inf."""
    if value != value:
        return "nan"
    if math.isinf(value):
        return "inf"
    return f"{value:.2g}" if value < 1e-3 or value >= 1e3 else f"{value:.3g}"


def messages_of(text) -> list:
    """An Err_message cell (a JSON array text) as its list of messages (a plain text as a one-item list)."""
    if not isinstance(text, str) or not text.startswith("["):
        return [text] if text else []
    try:
        value = json.loads(text)
    except ValueError:
        return [text]
    return value if isinstance(value, list) else [text]
