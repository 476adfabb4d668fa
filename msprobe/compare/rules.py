"""The verdict: turn measured rows into Result (pass/warning/error) and Err_message (spec §4.7, DECISIONS 5, 9, 13)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from msprobe.compare.columns import MD5, TENSOR
from msprobe.frameworks.dtypes import canonical
from msprobe.report.cells import NA, cell_text

PASS, WARNING, ERROR = 0, 1, 2
RESULT_TEXT = ("pass", "warning", "error")

ALL_IGNORE = frozenset({"empty", "empty_like", "numpy", "to", "__setitem__", "empty_with_format",
                        "new_empty_strided", "new_empty", "empty_strided"})
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


def _nan_or_inf(value) -> bool:
    kind = type(value)
    if kind is float or kind is int:
        return not math.isfinite(value)
    if kind is str:
        return value.strip().lower() in ("nan", "inf", "-inf", "+inf")
    return False


def _entry_runs(entry: np.ndarray):
    """(start, stop) of each run of equal entry indices."""
    if len(entry) == 0:
        return []
    cuts = np.flatnonzero(np.diff(entry)) + 1
    starts = np.concatenate(([0], cuts))
    stops = np.concatenate((cuts, [len(entry)]))
    return list(zip(starts.tolist(), stops.tolist()))


def _ignore_class(entry_name: str) -> str:
    if entry_name.startswith(("Module.", "Cell.")):
        return ""
    parts = entry_name.split(".")
    api = parts[1] if len(parts) > 1 else ""
    if api in ALL_IGNORE:
        return "all"
    if api in INPUT_IGNORE:
        return "input"
    return ""


def _nanmin(values: np.ndarray, default: float) -> float:
    finite = values[~np.isnan(values)]
    return float(finite.min()) if finite.size else default


def _nanmax(values: np.ndarray, default: float) -> float:
    finite = values[~np.isnan(values)]
    return float(finite.max()) if finite.size else default


def judge(data: JudgeInput) -> tuple[list, list]:
    """Result and Err_message per row."""
    rows = len(data.entry)
    messages: list[list] = [[] for _ in range(rows)]
    level = [PASS] * rows

    def flag(row: int, severity: int, text: str) -> None:
        messages[row].append(text)
        if severity > level[row]:
            level[row] = severity

    runs = _entry_runs(data.entry)
    ignore = {start: _ignore_class(data.entry_names[data.entry[start]]) for start, _ in runs}
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
        return [RESULT_TEXT[x] for x in level], _message_texts(messages)

    # Rule 1: NaN/Inf in the NPU max/min while the bench has none.
    for row in np.flatnonzero(per_row_scope).tolist():
        if _nan_or_inf(data.bench_max[row]) or _nan_or_inf(data.bench_min[row]):
            continue
        if _nan_or_inf(data.npu_max[row]) or _nan_or_inf(data.npu_min[row]):
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
    return [RESULT_TEXT[x] for x in level], _message_texts(messages)


def _message_texts(messages: list) -> list:
    """JSON array text per row; most rows share a handful of texts, so each is encoded once."""
    cache: dict = {}
    out = []
    for message in messages:
        key = tuple(message)
        text = cache.get(key)
        if text is None:
            text = cache[key] = json.dumps(message)
        out.append(text)
    return out


def _split(data: JudgeInput, start: int, stop: int):
    out = data.is_output[start:stop]
    return np.arange(start, stop)[~out], np.arange(start, stop)[out]


def _rule_thousandth(data, runs, flag):
    for start, stop in runs:
        inputs, outputs = _split(data, start, stop)
        if not len(outputs):
            continue
        if _nanmin(data.thousandth[inputs], 1.0) > 0.9 and _nanmin(data.thousandth[outputs], 1.0) < 0.6:
            flag(int(outputs[0]), ERROR, MSG_THOUSANDTH)


def _rule_cosine(data, runs, flag):
    for start, stop in runs:
        inputs, outputs = _split(data, start, stop)
        if not len(outputs):
            continue
        cos_in = _nanmin(data.cosine[inputs], 1.0)
        if cos_in > 0.9 and cos_in - _nanmin(data.cosine[outputs], 1.0) > 0.1:
            flag(int(outputs[0]), WARNING, MSG_COSINE)


def _rule_norm_output(data, runs, flag):
    for start, stop in runs:
        inputs, outputs = _split(data, start, stop)
        if abs(_nanmax(data.norm_rel[inputs], 0.0)) < 0.1:
            for row in outputs.tolist():
                value = data.norm_rel[row]
                if not math.isnan(value) and abs(value) > 0.5:
                    flag(row, ERROR, MSG_NORM_OUTPUT)


def _rule_norm_ten_times(data, runs, flag):
    for start, stop in runs:
        inputs, outputs = _split(data, start, stop)
        if not len(outputs):
            continue
        a = abs(_nanmax(data.norm_rel[inputs], 0.0))
        c = abs(_nanmax(data.norm_rel[outputs], 0.0))
        if (a == 0 and c > 0.1) or (a != 0 and c / a > 10):
            flag(int(outputs[0]), WARNING, MSG_NORM_TEN_TIMES)


def _per_row_rules(data, scope, flag, ignore, runs):
    t_grad, g_grad = data.grads
    t_dtype, g_dtype = data.dtypes
    t_shape, g_shape = data.shapes
    scalar_scope = scope.copy()
    for start, stop in runs:
        if ignore[start]:
            scalar_scope[start:stop] = False
    rows = np.flatnonzero(scope & data.matched).tolist()
    # Rule 4: requires_grad recorded on both sides and different (absent on a side is no mismatch).
    for row in rows:
        a, b = t_grad[row], g_grad[row]
        if a is not None and b is not None and a != b:
            flag(row, ERROR, MSG_REQUIRES_GRAD)
    # Rule 5: scalar arguments of different value.
    for row in rows:
        if (scalar_scope[row] and not data.is_output[row] and t_dtype[row] and g_dtype[row]
                and "class" in t_dtype[row] and "class" in g_dtype[row] and t_shape[row] == "[]"
                and cell_text(data.npu_max[row]) != cell_text(data.bench_max[row])):
            flag(row, ERROR, MSG_SCALAR)
    # Rule 6: dtypes differ (after normalising framework spellings).
    for row in rows:
        name = data.bench_names[row]
        if "qkv" in name or "gate_up" in name:
            continue
        if canonical(t_dtype[row]) != canonical(g_dtype[row]):
            flag(row, ERROR, MSG_DTYPE)
    # Rule 7: shapes differ.
    for row in rows:
        if t_shape[row] != g_shape[row]:
            flag(row, ERROR, MSG_SHAPE)
