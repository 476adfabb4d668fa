"""The verdict: turn measured rows into Result (pass/warning/error) and Err_message (spec §4.7, DECISIONS 5, 9, 13)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import repeat

import numpy as np

from msprobe.compare.error_origin import EPS
from msprobe.frameworks.dtypes import canonical
from msprobe.table.cells import NA, cell_text, stat_number
from msprobe.table.columns import MD5, TENSOR

PASS, WARNING, ERROR = 0, 1, 2
RESULT_TEXT = ("pass", "warning", "error")

ALL_IGNORE = frozenset({"empty", "empty_like", "numpy", "to", "__setitem__", "empty_with_format",
                        "new_empty_strided", "new_empty", "empty_strided"})
# across frameworks a cast is judged: its dtype argument is the culprit when the two runs cast to different dtypes
# (a MindSpore Tensor.to(float16) where PyTorch has float32, issue 32)
CROSS_JUDGED = frozenset({"to"})
INPUT_IGNORE = frozenset({"_reduce_scatter_base", "_all_gather_base", "all_to_all_single", "batch_isend_irecv"})

MSG_STAT_NAN = "error: There is nan/inf/-inf in the maximum or minimum value of NPU."
MSG_THOUSANDTH = "error: The input/parameters of One Thousandth Err Ratio > 0.9 while the output < 0.6."
MSG_NORM_OUTPUT = "error: The NormRelativeErr of output is greater than 0.5."
MSG_REQUIRES_GRAD = "error: The Required_Grad of NPU and Bench are inconsistent"
MSG_SCALAR = "error: The scalar parameters of NPU and Bench are inconsistent."
MSG_DTYPE = "error: The dtype of NPU and Bench are inconsistent."
MSG_SHAPE = "error: The shape of NPU and Bench are inconsistent."
MSG_COSINE = "warning: The input/parameters of Cosine > 0.9, and input/parameters - output > 0.1"
MSG_NORM_TEN_TIMES = "warning: The norm relative error of output is 10 times that of input."
MSG_MD5_MISSING = "warning: The parameter of NPU does not match the bench."
MSG_MD5_DIFF = "error: The CRC-32 value of NPU differs from that of the bench."
# Beyond the reference: per-tensor problems of real-data mode must be visible in the row (issue 2).
MSG_TENSOR_UNREADABLE = "warning: The tensor data could not be compared: {}"
MSG_NAN_POSITION = "error: The position of inf or nan in NPU and bench Tensor do not match."
# Beyond the reference: a value the collector could not record (its dump_error) is named in the row (issue 25).
MSG_NOT_DUMPED = "warning: {} data not fully dumped: {}"


@dataclass
class JudgeInput:
    """What the rules read, one element per result row (unmatched rows have matched False)."""

    mode: str
    entry: np.ndarray           # target entry index of each row (rows of one entry are contiguous)
    entry_names: list           # target entry names
    is_output: np.ndarray       # bool
    matched: np.ndarray         # bool
    bench_names: list
    dtypes: tuple               # (target dtype texts, golden dtype texts) - None when absent
    shapes: tuple               # (target shape texts, golden shape texts)
    grads: tuple                # (target requires_grad texts, golden ones) - None when absent
    npu_max: list
    npu_min: list
    bench_max: list
    bench_min: list
    norm_rel: np.ndarray | None = None     # statistics: NormRelativeErr as a fraction (NaN = not numeric)
    cosine: np.ndarray | None = None       # tensor: Cosine (NaN = not numeric)
    thousandth: np.ndarray | None = None   # tensor: One Thousandth Err Ratio (NaN = not numeric)
    md5: tuple | None = None               # md5: (NPU MD5 texts, BENCH MD5 texts)
    tensor_problems: list | None = None    # tensor: (row, kind, reason) of pairs that could not be compared
    dump_notes: list | None = None         # (row, side, dump_error text) of values the collector did not record
    # compare/verdict.py (issue 27): rows with no data, below the noise floor or a recording convention (no metric
    # rule reads them, no group rule flags them), and cross-framework conventions that rules 6 and 7 accept
    unjudged: np.ndarray | None = None
    same_dtype: np.ndarray | None = None   # integer widths differ across frameworks, values equal
    same_shape: np.ndarray | None = None   # shapes differ by a reshape across frameworks (equal element counts)
    cross: bool = False                    # a MindSpore target against a PyTorch golden (or a mapping option)


def _nan_or_inf(values: list) -> np.ndarray:
    """Per value: a statistic that is NaN or infinite however it is spelled (cells.stat_number: `inf`,
    `Infinity`, `1e999`, an integer beyond the float range); other texts are not numbers."""
    numbers = [value if value.__class__ is float else (stat_number(value) or 0.0) for value in values]
    return ~np.isfinite(np.array(numbers, dtype=np.float64))


def _entry_runs(entry: np.ndarray):
    """(start, stop) of each run of equal entry indices."""
    if len(entry) == 0:
        return []
    cuts = np.flatnonzero(np.diff(entry)) + 1
    starts = np.concatenate(([0], cuts))
    stops = np.concatenate((cuts, [len(entry)]))
    return list(zip(starts.tolist(), stops.tolist()))


def ignore_class(entry_name: str, cross: bool = False) -> str:
    if entry_name.startswith(("Module.", "Cell.")):
        return ""
    parts = entry_name.split(".")
    api = parts[1] if len(parts) > 1 else ""
    if api in ALL_IGNORE and not (cross and api in CROSS_JUDGED):
        return "all"
    if api in INPUT_IGNORE:
        return "input"
    return ""


def judge(data: JudgeInput) -> tuple[list, list]:
    """Result and Err_message per row."""
    level, messages = judge_levels(data)
    return [RESULT_TEXT[x] for x in level], message_texts(messages)


def judge_levels(data: JudgeInput) -> tuple[list, list]:
    """Per row the level (PASS, WARNING, ERROR) and the list of messages, in rule order (compare/verdict.py adds
    its own before they become the Result and Err_message cells)."""
    rows = len(data.entry)
    messages: list[list] = [[] for _ in range(rows)]
    level = [PASS] * rows

    def flag(row: int, severity: int, text: str) -> None:
        messages[row].append(text)
        if severity > level[row]:
            level[row] = severity

    for row, side, text in data.dump_notes or ():
        flag(row, WARNING, MSG_NOT_DUMPED.format(side, text))
    runs = _entry_runs(data.entry)
    ignore = {start: ignore_class(data.entry_names[data.entry[start]], data.cross) for start, _ in runs}
    per_row_scope = np.ones(rows, dtype=bool)  # rows the per-row rules look at
    for start, stop in runs:
        if ignore[start] == "all":
            per_row_scope[start:stop] = False
        elif ignore[start] == "input":
            per_row_scope[start:stop] = data.is_output[start:stop]

    if data.mode == MD5:
        npu_md5, bench_md5 = data.md5
        for row in np.flatnonzero(per_row_scope).tolist():
            if npu_md5[row] != bench_md5[row]:
                if npu_md5[row] in (NA, "Nan", "", None) or bench_md5[row] in (NA, "Nan", "", None):
                    flag(row, WARNING, MSG_MD5_MISSING)
                else:
                    flag(row, ERROR, MSG_MD5_DIFF)
        return level, messages

    # Rule 1: NaN/Inf in the NPU max/min while the bench has none.
    bench_bad = _nan_or_inf(data.bench_max) | _nan_or_inf(data.bench_min)
    npu_bad = _nan_or_inf(data.npu_max) | _nan_or_inf(data.npu_min)
    for row in np.flatnonzero(per_row_scope & npu_bad & ~bench_bad).tolist():
        flag(row, ERROR, MSG_STAT_NAN)

    group_runs = [(start, stop) for start, stop in runs if not ignore[start]]
    if data.mode == TENSOR:
        _rule_thousandth(data, group_runs, flag)
    else:
        _rule_norm_output(data, group_runs, flag)
    _per_row_rules(data, per_row_scope, flag, ignore, runs)
    if data.mode == TENSOR:
        _rule_cosine(data, group_runs, flag)
        for row, kind, reason in data.tensor_problems or ():
            if not per_row_scope[row]:
                continue
            if kind == "nan_position":
                flag(row, ERROR, MSG_NAN_POSITION)
            else:
                flag(row, WARNING, MSG_TENSOR_UNREADABLE.format(reason))
    else:
        _rule_norm_ten_times(data, group_runs, flag)
    return level, messages


def message_texts(messages: list) -> list:
    """JSON array text per row; most rows share a handful of texts, so each is encoded once."""
    cache: dict = {}
    out = []
    for message in messages:
        if not message:
            out.append("[]")
            continue
        key = tuple(message)
        text = cache.get(key)
        if text is None:
            text = cache[key] = json.dumps(message)
        out.append(text)
    return out


def _group_reduce(values: np.ndarray, select: np.ndarray, runs: list, reduce, default: float):
    """Per run: reduce (np.fmin/np.fmax, NaN-ignoring) over the selected rows; default when none is numeric."""
    starts = np.asarray([start for start, _ in runs], dtype=np.int64)
    masked = np.where(select, values, np.nan)
    out = reduce.reduceat(masked, starts) if len(starts) else np.zeros(0)
    # reduceat over a run of only NaN gives NaN: that run had no numeric value
    return np.where(np.isnan(out), default, out)


def _judged(data, values: np.ndarray) -> np.ndarray:
    """values with NaN (not a number: no rule reads it) on the rows the verdict does not judge."""
    return values if data.unjudged is None else np.where(data.unjudged, np.nan, values)


def _first_outputs(data, runs) -> np.ndarray:
    """Index of the first output row of every run that a group rule may flag (matched and judged: a row with no
    data never carries a warning), -1 when the run has none."""
    eligible = data.is_output & data.matched
    if data.unjudged is not None:
        eligible = eligible & ~data.unjudged
    outputs = np.flatnonzero(eligible)
    starts = np.asarray([start for start, _ in runs], dtype=np.int64)
    stops = np.asarray([stop for _, stop in runs], dtype=np.int64)
    if not len(outputs):
        return np.full(len(runs), -1, dtype=np.int64)
    position = np.searchsorted(outputs, starts)
    candidate = outputs[np.minimum(position, len(outputs) - 1)]
    return np.where((position < len(outputs)) & (candidate < stops), candidate, -1)


def _run_rows(runs: list) -> np.ndarray:
    """The row indices of the runs, in order."""
    starts = np.asarray([start for start, _ in runs], dtype=np.int64)
    lengths = np.asarray([stop - start for start, stop in runs], dtype=np.int64)
    offsets = np.cumsum(lengths) - lengths          # where each run begins among the selected rows
    return np.arange(int(lengths.sum())) + np.repeat(starts - offsets, lengths)


def _group_stats(data, runs, values, reduce, default):
    """(input-rows value, output-rows value, first output row) per run."""
    if not runs:
        return np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64)
    # reduceat reduces from each start to the next start: restrict to the rows of the runs
    index = _run_rows(runs)
    lengths = np.asarray([stop - start for start, stop in runs])
    local_starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    local_runs = [(int(a), int(a + n)) for a, n in zip(local_starts, lengths)]
    sub_values = _judged(data, values)[index]
    sub_output = data.is_output[index]
    inputs = _group_reduce(sub_values, ~sub_output, local_runs, reduce, default)
    outputs = _group_reduce(sub_values, sub_output, local_runs, reduce, default)
    return inputs, outputs, _first_outputs(data, runs)


def _rule_thousandth(data, runs, flag):
    inputs, outputs, first = _group_stats(data, runs, data.thousandth, np.fmin, 1.0)
    for run in np.flatnonzero((first >= 0) & (inputs > 0.9) & (outputs < 0.6)).tolist():
        flag(int(first[run]), ERROR, MSG_THOUSANDTH)


def _rule_cosine(data, runs, flag):
    inputs, outputs, first = _group_stats(data, runs, data.cosine, np.fmin, 1.0)
    for run in np.flatnonzero((first >= 0) & (inputs > 0.9) & (inputs - outputs > 0.1)).tolist():
        flag(int(first[run]), WARNING, MSG_COSINE)


def _rule_norm_output(data, runs, flag):
    if not runs:
        return
    inputs, _, _ = _group_stats(data, runs, data.norm_rel, np.fmax, 0.0)
    big_output = data.is_output & (np.abs(np.nan_to_num(_judged(data, data.norm_rel), nan=0.0)) > 0.5)
    rows = _run_rows(runs)
    quiet_input = np.repeat(np.abs(inputs) < 0.1, [stop - start for start, stop in runs])
    for row in rows[quiet_input & big_output[rows]].tolist():
        flag(row, ERROR, MSG_NORM_OUTPUT)


# Rule 9 across frameworks: two frameworks' kernels of one op round differently (MindSpore's and PyTorch's tanh
# GELU gradient: an output 24 float32 units apart from inputs 1.7 units apart, in twin runs dumped by the reference's
# collectors), so there an input's error counts as at least CROSS_INPUT_UNITS units of rounding of the output's dtype
CROSS_INPUT_UNITS = 4.0


def _rule_norm_ten_times(data, runs, flag):
    inputs, outputs, first = _group_stats(data, runs, data.norm_rel, np.fmax, 0.0)
    a, c = np.abs(inputs), np.abs(outputs)
    if data.cross and len(first):
        t_dtype = data.dtypes[0]
        eps = np.array([EPS.get(canonical(t_dtype[row]), 0.0) if row >= 0 else 0.0 for row in first.tolist()])
        a = np.where(a != 0, np.fmax(a, CROSS_INPUT_UNITS * eps), a)    # never more sensitive than the rule
    with np.errstate(divide="ignore", invalid="ignore"):
        fires = ((a == 0) & (c > 0.1)) | ((a != 0) & (c / np.where(a == 0, 1, a) > 10))
    for run in np.flatnonzero((first >= 0) & fires).tolist():
        flag(int(first[run]), WARNING, MSG_NORM_TEN_TIMES)


def _per_row_rules(data, scope, flag, ignore, runs):
    """Rules 4-7 on the matched rows in scope, one rule after the other (so a row's messages keep rule order)."""
    t_grad, g_grad = data.grads
    t_dtype, g_dtype = data.dtypes
    t_shape, g_shape = data.shapes
    rows = len(t_grad)
    scalar_scope = scope.copy()
    for start, stop in runs:
        if ignore[start]:
            scalar_scope[start:stop] = False
    checked = scope & data.matched
    # Rule 4: requires_grad recorded on both sides and different (absent on a side is no mismatch).
    t_code = np.fromiter(map(_GRAD_CODES.get, t_grad, repeat(3)), dtype=np.int8, count=rows)
    g_code = np.fromiter(map(_GRAD_CODES.get, g_grad, repeat(3)), dtype=np.int8, count=rows)
    differ = (t_code != g_code) | ((t_code == 3) & _texts_differ(t_grad, g_grad))
    for row in np.flatnonzero(checked & (t_code != 0) & (g_code != 0) & differ).tolist():
        flag(row, ERROR, MSG_REQUIRES_GRAD)
    # Rule 5: scalar arguments of different value (a dtype argument by its dtype, however each framework spells
    # it: Float32 is torch.float32).
    is_class = {dtype: bool(dtype) and "class" in dtype for dtype in {*t_dtype, *g_dtype}}
    candidates = checked & scalar_scope & ~data.is_output
    candidates &= np.fromiter(map(is_class.__getitem__, t_dtype), dtype=bool, count=rows)
    candidates &= np.fromiter(map(is_class.__getitem__, g_dtype), dtype=bool, count=rows)
    for row in np.flatnonzero(candidates).tolist():
        if (t_shape[row] == "[]"
                and canonical(cell_text(data.npu_max[row])) != canonical(cell_text(data.bench_max[row]))):
            flag(row, ERROR, MSG_SCALAR)
    # Rule 6: dtypes differ (after normalising framework spellings).
    spelled = {dtype: canonical(dtype) for dtype in {*t_dtype, *g_dtype}}
    dtype_checked = checked if data.same_dtype is None else checked & ~data.same_dtype
    for row in np.flatnonzero(dtype_checked & _texts_differ(list(map(spelled.__getitem__, t_dtype)),
                                                            list(map(spelled.__getitem__, g_dtype)))).tolist():
        name = data.bench_names[row]
        if "qkv" not in name and "gate_up" not in name:
            flag(row, ERROR, MSG_DTYPE)
    # Rule 7: shapes differ.
    shape_checked = checked if data.same_shape is None else checked & ~data.same_shape
    for row in np.flatnonzero(shape_checked & _texts_differ(t_shape, g_shape)).tolist():
        flag(row, ERROR, MSG_SHAPE)


_GRAD_CODES = {None: 0, "True": 1, "False": 2}      # 3: anything else, compared as it is


def _texts_differ(a: list, b: list) -> np.ndarray:
    """a[i] != b[i] for every row (elementwise, as Python compares them)."""
    left = np.empty(len(a), dtype=object)
    right = np.empty(len(b), dtype=object)
    left[:] = a
    right[:] = b
    return np.asarray(left != right, dtype=bool)
