"""The live golden watch: each step's records of the target, as it trains, against the golden run's records of the
same step, rank, module and metric, read lazily from the golden's MONITOR_OUTPUT_DIR one step at a time.

Whether a difference is made at a module or carried into it is the compare core's judgement, not a second one:
the step's records become a statistics table of module entries, as a level-L0 dump of the step would give,
and `compare.verdict.judge_rows` judges it (Error_Origin: the output's error against what its inputs' errors and
the dtypes' rounding explain, dtype-aware, with the statistics' rounding allowance; the NaN and norm rules).

* a weights entry per parameter: its `param_updated` of the step before (input) and its `param_origin` of this
  step (output): a weight changed between the steps (by the script, a checkpoint) is made there; at the run's
  first step the weights have no input: they must agree;
* a forward entry per module call: inputs (`actv` `<module>.input*`), the weights the step starts with
  (`param_origin` of the module's parameters and those of its sub-modules: a weight that drifted in earlier steps
  carries its difference into the output) and outputs (`actv` `<module>.output*`);
* a backward entry per module call: the gradients of its outputs as inputs (`actv_grad` `<module>.output*`), the
  gradients of its inputs and, on its last call of the step, of its own weights as outputs (`actv_grad`
  `<module>.input*`, `grad_unreduced`), and, as for any backward, its forward entry's tensors.

A row the verdict finds made at its entry (level "made here": Error_Origin `introduced`, NaN/Inf in the target
only, a norm error its quiet inputs do not explain) is a divergence; the first of a step (in call order) is
reported as one Anomaly of kind `divergence` (rule GoldenDivergence), with the statistic that differs most as its
value and the golden's as the baseline. So is the first activation where the verdict finds the difference entering
made by no entry (MSG_ENTERS): the data, or code of a module's own forward between its monitored sub-modules (the
divergence names that parent module). A row that only the rounding of a lower precision explains (a bfloat16
target against a float32 golden) is never one.

Without `param_origin` in both runs the weights are taken as equal, and a target whose weights drifted from the
golden's (a lower precision's updates) would show every module as made here after the first steps: the watch says
so once (`missing_weights`)."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator

import numpy as np

from msprobe.compare.error_origin import EPS
from msprobe.compare.rules import JudgeInput
from msprobe.compare.verdict import MADE_HERE, MSG_ENTERS, NOISE_UNITS, judge_rows, scale_errors
from msprobe.frameworks.dtypes import canonical
from msprobe.monitor.anomaly import written_rounding
from msprobe.monitor.records import Anomaly, StepRecords
from msprobe.table import columns as col

RULE = "GoldenDivergence"
# a golden written rounded to decimals (ndigits): a statistic whose magnitude is below this many of its quanta has
# fewer than ~2 significant digits there, and is not compared
QUANTA = 100.0
STATS = ("max", "min", "mean", "norm")          # the statistics the verdict reads, in its order
CELL = {"max": "max", "min": "min", "mean": "mean", "norm": "l2norm"}
PARAMS = "param_origin"
# the history of a row's difference from the golden, where the runs differ in dtype (_jumps)
WARMUP = 5              # steps of history before a jump is judged
HISTORY = 16            # steps kept
JUMP = 4.0              # an output's difference beyond this many times its median over the steps before ...
JUMP_INPUTS = 2.0       # ... while its inputs' is within this many times theirs
# ... and beyond the verdict's noise floor (NOISE_UNITS units of rounding of the lower precision: a bfloat16 output's
# gradient through kinks and sums moves by a few percent from one step to the next in clean runs)
JUMP_UNITS = NOISE_UNITS
GRADIENTS = frozenset({"actv_grad", "grad_unreduced"})


def split_name(name: str) -> tuple:
    """`layers.0.fc1.input` -> ("layers.0.fc1", "input"); `lstm.output_1` -> ("lstm", "output"); `.output` ->
    ("", "output"); other names -> (name, "")."""
    module, _, slot = name.rpartition(".")
    kind = slot.split("_", 1)[0]
    return (module, kind) if kind in ("input", "output") else (name, "")


class _Table:
    """The rows of a statistics table being built: per row the flat row of each side (_Side; the golden's None
    when it has no such row), its state and entry."""

    def __init__(self) -> None:
        self.target: list = []
        self.golden: list = []
        self.state: list = []
        self.entry: list = []
        self.entry_names: list = []
        self.entry_module: list = []
        self._ids: dict = {}

    def add_entry(self, direction: str, vpp: int, module: str, number: int) -> int:
        # entry names never hold the model's names (names are data): the module is kept beside them
        key = self._ids.setdefault((vpp, module), len(self._ids))
        self.entry_names.append(f"Module.m{key}.Module.{direction}.{number}")
        self.entry_module.append(module)
        return len(self.entry_names) - 1

    def subset(self, mask: np.ndarray | None, golden: list) -> _Table:
        """A copy with the rows of mask (all when None) and these golden rows."""
        out = _Table()
        out.entry_names, out.entry_module = self.entry_names, self.entry_module
        for name in ("target", "state", "entry"):
            values = getattr(self, name)
            setattr(out, name, values if mask is None else [v for v, k in zip(values, mask) if k])
        out.golden = golden
        return out

    def add(self, entry: int, target: int, golden: int | None, state: str) -> None:
        self.target.append(target)
        self.golden.append(golden)
        self.state.append(state)
        self.entry.append(entry)


class _Side:
    """One run's records of a step (and of the step before, for the weights carried over) as flat arrays: rows of the
    step first, then those of the step before; indexed by (group, name, micro-step, model chunk)."""

    def __init__(self, records: StepRecords, previous: StepRecords | None = None) -> None:
        self.records = records
        # only the step just before holds the tensors this step starts from (with step_interval > 1 it is further)
        self.previous = previous if previous is not None and previous.step == records.step - 1 else None
        parts = [records] if self.previous is None else [records, self.previous]
        self.size = len(records)
        self.index = _index(records)
        self.before = {key: row + self.size for key, row in _index(self.previous).items()} \
            if self.previous is not None else {}
        self.values = np.concatenate([_stats(part) for part in parts])
        self.present = np.concatenate([_present(part) for part in parts])
        self.gradient = np.array([g in GRADIENTS for part in parts for g in part.group], dtype=bool)
        self.name = [n for part in parts for n in part.name]
        self.dtype = [d if p else None for part in parts for d, p in zip(part.dtype, _present(part))]
        self._shapes = [s if p else None for part in parts for s, p in zip(part.shape, _present(part))]

    def shape(self, row: int) -> str | None:
        shape = self._shapes[row]
        return None if shape is None else str(list(shape))

    def locate(self, row: int) -> tuple:
        """(records, row) of a flat row."""
        return (self.records, row) if row < self.size else (self.previous, row - self.size)

    def now(self, group: str, name: str, micro: int = 0, vpp: int = 0) -> int | None:
        return self.index.get((group, name, micro, vpp))

    def then(self, group: str, name: str, vpp: int = 0) -> int | None:
        return self.before.get((group, name, 0, vpp))


def _stats(records: StepRecords) -> np.ndarray:
    """[rows, 4]: Max, Min, Mean, Norm (NaN where not recorded or absent)."""
    out = np.full((len(records), len(STATS)), np.nan)
    for column, op in enumerate(STATS):
        if op in records.ops:
            out[:, column] = records.values[:, records.ops.index(op)]
    out[~_present(records)] = np.nan
    return out


def _present(records: StepRecords) -> np.ndarray:
    return records.present if len(records.present) == len(records) else np.ones(len(records), dtype=bool)


def _index(records: StepRecords) -> dict:
    return {key: row for row, key in enumerate(zip(records.group, records.name, records.micro_step,
                                                   records.vpp_stage))}


WEIGHT_GRADIENT = "grad_unreduced"                            # made by the backward of the parameter's module


def build_table(target: _Side, golden: _Side) -> _Table:
    """The step's entries in call order, each entry's rows inputs first:

    * between steps, per parameter: its `param_updated` of the step before (input) and its `param_origin` (output):
      a weight changed outside any module (by the script) differs here and not at the step before;
    * forward and backward module calls (module docstring).

    The optimizer's update is not judged: Adam divides a gradient by its own root mean square, so where a gradient
    is ~0 by symmetry (the bias of attention keys, whose gradient softmax cancels) its rounding decides the sign of
    the update, and a bfloat16 target's updates differ from a float32 golden's beyond anything the statistics of
    the gradients explain. An update that differs is carried by the weights into the next steps; the anomaly rules see
    an update out of line with its history (update_ratio)."""
    rec = target.records
    params: dict = {}
    for row, (group, module, vpp) in enumerate(zip(rec.group, rec.module, rec.vpp_stage)):
        if group == PARAMS:
            params.setdefault(vpp, []).append((module, row))
    # [call, direction, vpp, module, micro, rows {slot: [row]}, the module's own name]: `module` tells the calls of
    # a module apart (`shared[1]` is the second call of `shared` in a micro-step), the own name owns the weights
    entries = []
    calls: dict = {}
    for row, (group, name, micro, vpp, call) in enumerate(zip(rec.group, rec.name, rec.micro_step, rec.vpp_stage,
                                                               rec.call)):
        if group not in ("actv", "actv_grad"):
            continue
        module, slot = split_name(name)
        if not slot:
            continue
        direction = "forward" if group == "actv" else "backward"
        key = (direction, vpp, micro, module)
        entry = calls.get(key)
        if entry is None:
            entry = calls[key] = [math.inf, direction, vpp, module, micro, {"input": [], "output": []}, rec.module[row]]
            entries.append(entry)
        entry[5][slot].append(row)
        # a forward call ends with its outputs, a backward one with the gradients of its inputs
        if (slot == "output") == (direction == "forward"):
            entry[0] = min(entry[0], call)
    for vpp, owned in params.items():
        for _, row in owned:
            entries.append([rec.call[row] - 0.5, "weights", vpp, rec.name[row], 0, {"input": [], "output": [row]},
                            rec.module[row]])
    entries.sort(key=lambda e: e[0])
    gradients: dict = {}
    for row, (group, module, vpp) in enumerate(zip(rec.group, rec.module, rec.vpp_stage)):
        if group == WEIGHT_GRADIENT:
            gradients.setdefault((vpp, module), []).append(row)
    last_backward: dict = {}         # (vpp, module) -> (micro, number) of its last backward call
    seen: dict = {}
    for _, direction, vpp, module, micro, rows, own in entries:
        if direction == "backward" and rows["output"]:
            seen[(vpp, module)] = seen.get((vpp, module), -1) + 1
            last_backward[(vpp, own)] = (vpp, module, micro, seen[(vpp, module)])
    table = _Table()
    counts: dict = {}
    for _, direction, vpp, module, micro, rows, own in entries:
        if not rows["output"]:
            continue
        kind = "forward" if direction != "backward" else "backward"
        tag = (direction, vpp, module)
        counts[tag] = counts.get(tag, -1) + 1
        entry = table.add_entry(kind, vpp, module if direction in ("forward", "backward") else f"{direction}:{module}",
                                counts[tag])
        table.entry_module[entry] = own
        if direction == "weights":
            name = module
            before = target.then("param_updated", name, vpp)
            if before is not None:
                table.add(entry, before, golden.then("param_updated", name, vpp), "input")
            elif rec.step != 0:         # the weights of a later step without the step before: nothing to judge
                table.entry_names.pop()
                table.entry_module.pop()
                continue
            row = rows["output"][0]
            table.add(entry, row, golden.now(PARAMS, name, 0, vpp), "output")
        elif direction == "forward":
            for row in rows["input"]:
                table.add(entry, row, golden.now("actv", rec.name[row], micro, vpp), "input")
            for owned, row in params.get(vpp, ()):
                if own == "" or owned == own or owned.startswith(own + "."):
                    # an input here (the verdict's "parameters" rows are made at their entry: here the weights
                    # entry before judges where a weight's difference is made)
                    table.add(entry, row, golden.now(PARAMS, rec.name[row], 0, vpp), "input")
            for row in rows["output"]:
                table.add(entry, row, golden.now("actv", rec.name[row], micro, vpp), "output")
        else:
            for row in rows["output"]:          # the gradients of the outputs come in
                table.add(entry, row, golden.now("actv_grad", rec.name[row], micro, vpp), "input")
            for row in rows["input"]:           # the gradients of the inputs go out
                table.add(entry, row, golden.now("actv_grad", rec.name[row], micro, vpp), "output")
            if last_backward.get((vpp, own)) == (vpp, module, micro, counts[tag]):   # its weights' gradients, summed
                for row in gradients.get((vpp, own), ()):
                    table.add(entry, row, golden.now(WEIGHT_GRADIENT, rec.name[row], 0, vpp), "output")
    return table


def _cells(values: np.ndarray) -> list:
    """Statistics as cells: floats, "N/A" where there is none."""
    return [v if v == v else "N/A" for v in values.tolist()]


def judge(target: _Side, golden: _Side, quantum: float = 0.0, digits: int = 0, cache: dict | None = None) -> tuple:
    """(table, verdict, cells) of one step: the compare core's verdict of the step's entries; verdict None when the
    two steps are identical (nothing to judge). quantum: the absolute rounding of the golden's written statistics
    (decimal_quantum): a target statistic within one quantum of the golden's is the golden's (the same number,
    rounded), and a row below QUANTA quanta is not compared. digits: the golden's significant digits
    (significant_digits, our CSVs): a target statistic within one unit of the golden's last digit is the golden's.
    cache: a dict kept between steps, where the table of a step whose rows are laid out as the step before's is
    taken from."""
    table = _cached_table(target, golden, cache) if cache is not None else build_table(target, golden)
    t_rows = np.array(table.target, dtype=np.int64)
    g_rows = np.array([-1 if g is None else g for g in table.golden], dtype=np.int64)
    has = g_rows >= 0
    g_safe = np.where(has, g_rows, 0)
    matched = has & (golden.present[g_safe] == target.present[t_rows])
    npu = target.values[t_rows]
    bench = np.where(matched[:, None], golden.values[g_safe], np.nan)
    if digits:
        with np.errstate(invalid="ignore", divide="ignore"):
            unit = 10.0 ** (np.floor(np.log10(np.abs(bench))) - digits + 1)
            npu = np.where(np.abs(npu - bench) <= 1.0001 * unit, bench, npu)
    # a gradient's extremes are not compared (where finite on both sides): the masks it went through (ReLU, max-pool,
    # dropout) are decided element by element, and a rounding that moves one pre-activation across zero moves them
    # (a float16 CNN's ReLU gradient: max 0.0051 against 0.0036, its norm 1.6 % off); its norm and mean say whether
    # the gradient differs
    extremes = matched & target.gradient[t_rows] & np.isfinite(npu[:, :2]).all(axis=1) & \
        np.isfinite(bench[:, :2]).all(axis=1)
    if extremes.any():
        npu = npu.copy()
        npu[extremes, :2] = bench[extremes, :2]
    if quantum:
        with np.errstate(invalid="ignore"):
            npu = np.where(np.abs(npu - bench) <= 1.0001 * quantum, bench, npu)
            magnitude = np.nanmax(np.where(np.isnan(bench), -np.inf, np.abs(bench)), axis=1)
        keep = ~(matched & (magnitude < QUANTA * quantum))
        if not keep.all():      # below the golden's precision: left out (neither compared nor read as an input)
            t_rows, g_rows, matched, npu, bench = t_rows[keep], g_rows[keep], matched[keep], npu[keep], bench[keep]
        else:
            keep = None
    else:
        keep = None
    rows = len(t_rows)
    g_list = [int(g) if m else None for g, m in zip(g_rows.tolist(), matched.tolist())]
    table = table.subset(keep, g_list)
    t_list = t_rows.tolist()
    t_dtype = [target.dtype[t] for t in t_list]
    g_dtype = [golden.dtype[g] if g is not None else None for g in g_list]
    if matched.all() and np.array_equal(npu, bench, equal_nan=True) and t_dtype == g_dtype:
        return table, None, {}       # identical: nothing differs, nothing is made anywhere
    cells: dict = {col.NPU_NAME: [target.name[t] for t in t_list],
                   col.BENCH_NAME: [golden.name[g] if g is not None else "N/A" for g in g_list]}
    for column, op in enumerate(STATS):
        cells[f"NPU {CELL[op]}"] = _cells(npu[:, column])
        cells[f"Bench {CELL[op]}"] = _cells(bench[:, column])
    cells["NPU Dtype"], cells["Bench Dtype"] = _texts(t_dtype, "N/A"), _texts(g_dtype, "N/A")
    with np.errstate(invalid="ignore", divide="ignore"):
        t_norm, g_norm = npu[:, 3], bench[:, 3]
        norm_rel = np.where(t_norm == g_norm, 0.0, (t_norm - g_norm) / g_norm)
    data = JudgeInput(mode=col.STATISTICS, entry=np.asarray(table.entry, dtype=np.int64),
                      entry_names=table.entry_names,
                      is_output=np.array([s == "output" for s in table.state], dtype=bool), matched=matched,
                      bench_names=cells[col.BENCH_NAME], dtypes=(t_dtype, g_dtype),
                      shapes=([target.shape(t) for t in t_list],
                              [golden.shape(g) if g is not None else None for g in g_list]),
                      grads=([None] * rows, [None] * rows), npu_max=cells["NPU max"], npu_min=cells["NPU min"],
                      bench_max=cells["Bench max"], bench_min=cells["Bench min"], norm_rel=norm_rel)
    verdict = judge_rows(data, cells, table.state, [True] * rows, cross=_cross(t_dtype, g_dtype))
    return table, verdict, cells


def _layout(records: StepRecords | None) -> tuple | None:
    if records is None:
        return None
    return (records.group, records.name, records.micro_step, records.vpp_stage, records.call, records.module)


def _cached_table(target: _Side, golden: _Side, cache: dict) -> _Table:
    """build_table, or the table of the step before when both runs' rows (and their steps before) are laid out
    the same (most steps of a run)."""
    key = (_layout(target.records), _layout(golden.records)[:4], _layout(target.previous),
           _layout(golden.previous) and _layout(golden.previous)[:4])
    if cache.get("key") == key:
        return cache["table"]
    table = build_table(target, golden)
    cache["key"], cache["table"] = key, table
    return table


def _texts(values: list, fallback) -> list:
    return [fallback if v is None else v for v in values]


def _cross(t_dtype: list, g_dtype: list) -> bool:
    """A target of one framework against a golden of the other (their dtype spellings: torch.float32, Float32)."""
    def framework(dtypes):
        for d in dtypes:
            if d:
                return d.startswith("torch.")
        return None
    a, b = framework(t_dtype), framework(g_dtype)
    return a is not None and b is not None and a != b


def divergences(target: StepRecords, golden: StepRecords, previous: tuple = (None, None),
                first_only: bool = True, cache: dict | None = None) -> list:
    """The rows of the target's step that the verdict finds made at their entry, as Anomalies of kind divergence,
    in call order (only the first with first_only). previous: (target, golden) records of the step before, for the
    weights carried over."""
    if not len(target) or not len(golden):
        return []
    sides = _Side(target, previous[0]), _Side(golden, previous[1])
    table, verdict, cells = judge(*sides, *written_rounding(golden), cache)
    if verdict is None:
        return []
    entering = _enters(table, sides[0], verdict)
    errors = scale_errors(col.STATISTICS, cells)
    jumped = _jumps(table, sides, errors, cache)
    made = np.flatnonzero((verdict.levels >= MADE_HERE) | entering | jumped)
    if not len(made):
        return []
    found = sorted(made.tolist(), key=lambda r: _order(table, sides[0], r))
    if first_only:
        found = found[:1]
    return [_anomaly(table, sides, verdict, errors, row, bool(entering[row]),
                     bool(jumped[row]) and verdict.levels[row] < MADE_HERE) for row in found]


def _jumps(table: _Table, sides: tuple, errors: np.ndarray, cache: dict | None) -> np.ndarray:
    """Per row: an output of another dtype than the golden's (a bfloat16 target against a float32 golden) whose
    difference from the golden jumps at this step while its entry's inputs' does not. Such runs drift apart from
    the first step on (the weights' updates, the residual stream's rounding): once the inputs differ by a few
    percent, the verdict's allowance for what they carry (their error times the statistics' slack and the op's
    amplification) covers a real bug of that size. The runs' own history is the sharper reference: the same
    "introduced" (the output's difference is not explained by its inputs'), read over steps: the output's error is
    beyond JUMP times its median over the steps before, its inputs' within JUMP_INPUTS times theirs. Needs the
    history of WARMUP steps (kept in `cache`)."""
    target, golden = sides
    out = np.zeros(len(table.target), dtype=bool)
    if cache is None or not len(table.target):
        return out
    history = cache.setdefault("history", {})
    entries = np.asarray(table.entry, dtype=np.int64)
    is_input = np.array([s != "output" for s in table.state], dtype=bool)
    finite = np.where(np.isfinite(errors), errors, np.nan)
    rows = target.records
    for entry in np.unique(entries).tolist():
        members = np.flatnonzero(entries == entry)
        inputs = members[is_input[members]]
        e_in = float(np.nanmax(finite[inputs])) if len(inputs) and np.isfinite(finite[inputs]).any() else 0.0
        for row in members[~is_input[members]].tolist():
            t = table.target[row]
            if t >= target.size or table.golden[row] is None or not np.isfinite(finite[row]):
                continue
            low = max(_eps(target.dtype[t]), _eps(golden.dtype[table.golden[row]]))
            if target.dtype[t] == golden.dtype[table.golden[row]] or not low:
                continue
            key = (rows.group[t], rows.name[t], rows.micro_step[t], rows.vpp_stage[t])
            past = history.setdefault(key, [])
            e_out = float(finite[row])
            if len(past) >= WARMUP:
                out_median = float(np.median([p[0] for p in past]))
                in_median = float(np.median([p[1] for p in past]))
                out[row] = e_out > JUMP * out_median and e_out > JUMP_UNITS * low and \
                    e_in <= JUMP_INPUTS * max(in_median, 1e-12)
            past.append((e_out, e_in))
            del past[:-HISTORY]
    return out


def _eps(dtype) -> float:
    return EPS.get(canonical(dtype), 0.0) if isinstance(dtype, str) else 0.0


def _enters(table: _Table, target: _Side, verdict) -> np.ndarray:
    """The row where the verdict finds the difference entering, made by no entry (MSG_ENTERS), when it is an
    activation: the model's data, or the input of a module made by code of its parent's own forward (a functional
    call between two monitored modules). A weight's is judged by its own entry."""
    out = np.zeros(len(table.target), dtype=bool)
    for row, message in enumerate(verdict.messages):
        if MSG_ENTERS in message:
            records, index = target.locate(table.target[row])
            out[row] = records.group[index] == "actv"
    return out


def _order(table: _Table, target: _Side, row: int) -> tuple:
    records, index = target.locate(table.target[row])
    return records.micro_step[index], records.call[index]


def _worst(target: StepRecords, t: int, golden: StepRecords, g: int) -> str:
    """The statistic that differs most, each against its scale (the Norm against the golden's Norm; Max, Min and
    Mean against the golden's largest magnitude: a mean near zero is not read relative to itself)."""
    def value(records, row, op):
        return float(records.values[row, records.ops.index(op)]) if op in records.ops else math.nan
    magnitude = max(abs(value(golden, g, "max")), abs(value(golden, g, "min")))
    best, worst = "norm", -1.0
    for op in STATS:
        a, b = value(target, t, op), value(golden, g, op)
        if a == b or (math.isnan(a) and math.isnan(b)):
            continue
        scale = abs(b) if op == "norm" else magnitude
        err = abs(a - b) / scale if math.isfinite(a) and math.isfinite(b) and scale > 0 else math.inf
        if err > worst:
            best, worst = op, err
    return best


def _anomaly(table: _Table, sides: tuple, verdict, errors: np.ndarray, row: int, entering: bool,
             jumped: bool = False) -> Anomaly:
    (target, t), (golden, g) = sides[0].locate(table.target[row]), sides[1].locate(table.golden[row])
    op = _worst(target, t, golden, g)
    value = float(target.values[t, target.ops.index(op)]) if op in target.ops else math.nan
    baseline = float(golden.values[g, golden.ops.index(op)]) if op in golden.ops else None
    entry = table.entry[row]
    module = target.module[t] or table.entry_module[entry]
    what = f"{target.group[t]} {target.name[t]} differs from the golden run's by {errors[row]:.3g} ({op} {value:.6g} " \
           f"against {baseline:.6g})"
    if entering:
        parent = module.rpartition(".")[0]
        source = f"code of {parent}'s own forward, between its modules" if parent else \
            "the data, or code outside the model's modules"
        message = f"{what} while everything recorded before it agrees: the difference enters here, made by {source}"
        module = parent
    else:
        inputs = [r for r in range(len(table.entry)) if table.entry[r] == entry and table.state[r] != "output"]
        carried = max((float(errors[r]) for r in inputs if np.isfinite(errors[r])), default=0.0)
        origin = verdict.origins[row] if verdict.origins else ""
        if jumped:
            message = (f"{what}, {JUMP:g}x beyond its difference over the steps before, while what it is made from "
                       f"differs as before (at most {carried:.3g}): made at {module or 'the model'}")
        else:
            message = (f"{what} while what it is made from differs by at most {carried:.3g}: made at "
                       f"{module or 'the model'}" + (f" (Error_Origin {origin})" if origin else ""))
    return Anomaly(kind="divergence", rank=target.rank, step=target.step, micro_step=int(target.micro_step[t]),
                   stage=target.stage[t], call=int(target.call[t]), module=module, name=target.name[t],
                   group=target.group[t], op=op, value=value, baseline=baseline, rule=RULE, message=message)


class GoldenWatch:
    """One rank's watch against the golden run named by the config (`golden`: a MONITOR_OUTPUT_DIR, or the config
    itself as a path). `check` each step's records in step order; the golden's steps are read as they are needed,
    one at a time. A golden without this rank, or without a step, has nothing to compare there."""

    def __init__(self, config, rank: int) -> None:
        self.directory = config if isinstance(config, (str, os.PathLike)) else config.golden
        self.rank = rank
        self._steps: Iterator | None = None
        self._current: StepRecords | None = None
        self._done = False
        self.missing_weights = False      # the runs record no param_origin: weights taken as equal
        self._previous: tuple = (None, None)
        self._cache: dict = {}

    def _golden_at(self, step: int) -> StepRecords | None:
        if self._steps is None and not self._done:
            from msprobe.monitor.layout import read_run

            self._steps = read_run(os.fspath(self.directory)).get(self.rank)
            if self._steps is None:
                self._done = True
        while not self._done and (self._current is None or self._current.step < step):
            self._current = next(self._steps, None)
            if self._current is None:
                self._done = True
        current = self._current
        return current if current is not None and current.step == step else None

    def check(self, records: StepRecords) -> list:
        """The first divergence of this step from the golden's (an empty list when there is none or nothing to
        compare)."""
        golden = self._golden_at(records.step)
        if golden is None:
            return []
        if PARAMS not in records.group or PARAMS not in golden.group:
            self.missing_weights = True
        found = divergences(records, golden, self._previous, cache=self._cache)
        self._previous = (records, golden)
        return found

