"""The live golden watch: each step's records of the target, as it trains, against the golden run's records of the
same step, rank, module and metric, read lazily from the golden's MONITOR_OUTPUT_DIR one step at a time.

Whether a difference is made at a module or carried into it is the compare core's judgement, not a second one:
the step's records become a statistics table of module entries, as a level-L0 dump of the step would give,
and `compare.verdict.judge_rows` judges it (Error_Origin: the output's error against what its inputs' errors and
the dtypes' rounding explain, dtype-aware, with the statistics' rounding allowance; the NaN and norm rules).

* a forward entry per module call: inputs (`actv` `<module>.input*`), the weights the step starts with
  (`param_origin` of the module's parameters and those of its sub-modules: a weight that drifted in earlier steps
  carries its difference into the output) and outputs (`actv` `<module>.output*`);
* a backward entry per module call: the gradients of its outputs as inputs (`actv_grad` `<module>.output*`), the
  gradients of its inputs as outputs (`actv_grad` `<module>.input*`), and, as for any backward, its forward entry's
  tensors.

A row the verdict finds made at its entry (level "made here": Error_Origin `introduced`, NaN/Inf in the target
only, a norm error its quiet inputs do not explain) is a divergence; the first of a step (in call order) is
reported as one Anomaly of kind `divergence` (rule GoldenDivergence), with the statistic that differs most as its
value and the golden's as the baseline. A row that only the rounding of a lower precision explains (a bfloat16
target against a float32 golden) is never one.

Without `param_origin` in both runs the weights are taken as equal, and a target whose weights drifted from the
golden's (a lower precision's updates) would show every module as made here after the first steps: the watch says
so once (`missing_weights`)."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator

import numpy as np

from msprobe.compare.rules import JudgeInput
from msprobe.compare.verdict import MADE_HERE, MSG_ENTERS, judge_rows, scale_errors
from msprobe.monitor.anomaly import decimal_quantum
from msprobe.monitor.records import Anomaly, StepRecords
from msprobe.table import columns as col

RULE = "GoldenDivergence"
# a golden written rounded to decimals (ndigits): a statistic whose magnitude is below this many of its quanta has
# fewer than ~2 significant digits there, and is not compared
QUANTA = 100.0
STATS = ("max", "min", "mean", "norm")          # the statistics the verdict reads, in its order
CELL = {"max": "max", "min": "min", "mean": "mean", "norm": "l2norm"}
PARAMS = "param_origin"


def split_name(name: str) -> tuple:
    """`layers.0.fc1.input` -> ("layers.0.fc1", "input"); `lstm.output_1` -> ("lstm", "output"); `.output` ->
    ("", "output"); other names -> (name, "")."""
    module, _, slot = name.rpartition(".")
    kind = slot.split("_", 1)[0]
    return (module, kind) if kind in ("input", "output") else (name, "")


class _Table:
    """The rows of a statistics table being built: per row the (records, row) of each side (the golden's None when
    it has no such row), its state and entry."""

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

    def keep(self, mask: np.ndarray) -> None:
        for name in ("target", "golden", "state", "entry"):
            setattr(self, name, [v for v, k in zip(getattr(self, name), mask) if k])

    def add(self, entry: int, target: tuple, golden: tuple | None, state: str) -> None:
        self.target.append(target)
        self.golden.append(golden)
        self.state.append(state)
        self.entry.append(entry)


class _Side:
    """One run's records of a step (and of the step before, for the weights and optimizer states carried over),
    indexed by (group, name, micro-step, model chunk)."""

    def __init__(self, records: StepRecords, previous: StepRecords | None = None) -> None:
        self.records = records
        # only the step just before holds the tensors this step starts from (with step_interval > 1 it is further)
        self.previous = previous if previous is not None and previous.step == records.step - 1 else None
        self.index = _index(records)
        self.before = _index(self.previous) if self.previous is not None else {}

    def now(self, group: str, name: str, micro: int = 0, vpp: int = 0) -> tuple | None:
        row = self.index.get((group, name, micro, vpp))
        return None if row is None else (self.records, row)

    def then(self, group: str, name: str, vpp: int = 0) -> tuple | None:
        row = self.before.get((group, name, 0, vpp))
        return None if row is None else (self.previous, row)


def _index(records: StepRecords) -> dict:
    return {key: row for row, key in enumerate(zip(records.group, records.name, records.micro_step,
                                                   records.vpp_stage))}


# the optimizer, per parameter: what the update reads (its moments as recorded around the step: before the update
# with the reference's monitor, after it with ours; either way they hold what the update read) and what it makes
OPTIMIZER_IN = ("exp_avg", "exp_avg_sq")
OPTIMIZER_OUT = ("update_ratio", "param_updated")
GRADIENTS = ("grad_reduced", "grad_unreduced")                # the gradient the optimizer reads (the first present)
WEIGHT_GRADIENT = "grad_unreduced"                            # made by the backward of the parameter's module


def build_table(target: _Side, golden: _Side) -> _Table:
    """The step's entries in call order, each entry's rows inputs first:

    * between steps, per parameter: its `param_updated` of the step before (input) and its `param_origin` (output):
      a weight changed outside any module (by the script) differs here and not at the step before;
    * forward and backward module calls (module docstring);
    * the optimizer, per parameter: `param_origin`, the gradient and the moments of the step before (inputs); the
      moments, the update ratio and `param_updated` (outputs)."""
    rec = target.records
    params: dict = {}
    for row, (group, module, vpp) in enumerate(zip(rec.group, rec.module, rec.vpp_stage)):
        if group == PARAMS:
            params.setdefault(vpp, []).append((module, row))
    entries = []                  # (call, direction, vpp, module, micro, rows: {slot: [row]})
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
            entry = calls[key] = [math.inf, direction, vpp, module, micro, {"input": [], "output": []}]
            entries.append(entry)
        entry[5][slot].append(row)
        # a forward call ends with its outputs, a backward one with the gradients of its inputs
        if (slot == "output") == (direction == "forward"):
            entry[0] = min(entry[0], call)
    for vpp, owned in params.items():
        for _, row in owned:
            entries.append([rec.call[row] - 0.5, "weights", vpp, rec.name[row], 0, {"input": [], "output": [row]}])
    optimizer: dict = {}
    for row, (group, name, vpp, call) in enumerate(zip(rec.group, rec.name, rec.vpp_stage, rec.call)):
        if group in OPTIMIZER_OUT:
            optimizer.setdefault((vpp, name), [math.inf, "optimizer", vpp, name, 0, {"input": [], "output": []}])
            entry = optimizer[(vpp, name)]
            entry[5]["output"].append(row)
            entry[0] = min(entry[0], call)
    entries.extend(optimizer.values())
    entries.sort(key=lambda e: e[0])
    gradients: dict = {}
    for row, (group, module, vpp) in enumerate(zip(rec.group, rec.module, rec.vpp_stage)):
        if group == WEIGHT_GRADIENT:
            gradients.setdefault((vpp, module), []).append(row)
    last_backward: dict = {}         # (vpp, module) -> (micro, number) of its last backward call
    seen: dict = {}
    for _, direction, vpp, module, micro, rows in entries:
        if direction == "backward" and rows["output"]:
            seen[(vpp, module)] = seen.get((vpp, module), -1) + 1
            last_backward[(vpp, module)] = (micro, seen[(vpp, module)])
    table = _Table()
    counts: dict = {}
    for _, direction, vpp, module, micro, rows in entries:
        if not rows["output"]:
            continue
        kind = "forward" if direction != "backward" else "backward"
        tag = (direction, vpp, module)
        counts[tag] = counts.get(tag, -1) + 1
        entry = table.add_entry(kind, vpp, module if direction in ("forward", "backward") else f"{direction}:{module}",
                                counts[tag])
        if direction in ("weights", "optimizer"):
            table.entry_module[entry] = rec.module[rows["output"][0]]
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
            table.add(entry, (rec, row), golden.now(PARAMS, name, 0, vpp), "output")
        elif direction == "optimizer":
            name = module
            inputs = [target.now(PARAMS, name, 0, vpp)]
            golden_in = [golden.now(PARAMS, name, 0, vpp)]
            for group in GRADIENTS:
                if target.now(group, name, 0, vpp) is not None:
                    inputs.append(target.now(group, name, 0, vpp))
                    golden_in.append(golden.now(group, name, 0, vpp))
                    break
            for group in OPTIMIZER_IN:
                inputs.append(target.now(group, name, 0, vpp))
                golden_in.append(golden.now(group, name, 0, vpp))
            for t, g in zip(inputs, golden_in):
                if t is not None:
                    table.add(entry, t, g, "input")
            for row in rows["output"]:
                table.add(entry, (rec, row), golden.now(rec.group[row], name, 0, vpp), "output")
        elif direction == "forward":
            for row in rows["input"]:
                table.add(entry, (rec, row), golden.now("actv", rec.name[row], micro, vpp), "input")
            for owned, row in params.get(vpp, ()):
                if module == "" or owned == module or owned.startswith(module + "."):
                    # an input here (the verdict's "parameters" rows are made at their entry: here the weights
                    # entry before judges where a weight's difference is made)
                    table.add(entry, (rec, row), golden.now(PARAMS, rec.name[row], 0, vpp), "input")
            for row in rows["output"]:
                table.add(entry, (rec, row), golden.now("actv", rec.name[row], micro, vpp), "output")
        else:
            for row in rows["output"]:          # the gradients of the outputs come in
                table.add(entry, (rec, row), golden.now("actv_grad", rec.name[row], micro, vpp), "input")
            for row in rows["input"]:           # the gradients of the inputs go out
                table.add(entry, (rec, row), golden.now("actv_grad", rec.name[row], micro, vpp), "output")
            if last_backward.get((vpp, module)) == (micro, counts[tag]):     # and its weights' gradients, once summed
                for row in gradients.get((vpp, module), ()):
                    table.add(entry, (rec, row), golden.now(WEIGHT_GRADIENT, rec.name[row], 0, vpp), "output")
    return table


def _column(refs: list, op: str) -> list:
    """The statistic of each (records, row) (None where a row is missing, absent or the op not recorded)."""
    out = []
    for ref in refs:
        if ref is None:
            out.append(None)
            continue
        records, row = ref
        out.append(float(records.values[row, records.ops.index(op)])
                   if op in records.ops and records.present[row] else None)
    return out


def _texts(values: list, fallback) -> list:
    return [fallback if v is None else v for v in values]


def _of(refs: list, field: str) -> list:
    out = []
    for ref in refs:
        if ref is None or not ref[0].present[ref[1]]:
            out.append(None)
        else:
            value = getattr(ref[0], field)[ref[1]]
            out.append(str(list(value)) if field == "shape" and value is not None else value)
    return out


def judge(target: _Side, golden: _Side, quantum: float = 0.0) -> tuple:
    """(table, verdict, cells) of one step: the compare core's verdict of the step's entries. quantum: the
    absolute rounding of the golden's written statistics (decimal_quantum): a target statistic within one quantum
    of the golden's is the golden's (the same number, rounded), and a row below QUANTA quanta is not compared."""
    table = build_table(target, golden)
    rows = len(table.target)
    present_t = [bool(r.present[i]) for r, i in table.target]
    matched = np.array([g is not None and bool(g[0].present[g[1]]) == p for g, p in zip(table.golden, present_t)],
                       dtype=bool)
    npu = {op: _column(table.target, op) for op in STATS}
    bench = {op: _column(table.golden, op) for op in STATS}
    if quantum:
        for op in STATS:
            npu[op] = [b if a is not None and b is not None and abs(a - b) <= 1.0001 * quantum else a
                       for a, b in zip(npu[op], bench[op])]
        magnitude = np.nanmax(np.array([[np.nan if v is None else abs(v) for v in bench[op]] for op in STATS],
                                       dtype=np.float64), axis=0, initial=0.0)
        keep = ~(magnitude < QUANTA * quantum)
        if not keep.all():      # below the golden's precision: left out (neither compared nor read as an input)
            table.keep(keep)
            matched = matched[keep]
            npu = {op: [v for v, k in zip(values, keep) if k] for op, values in npu.items()}
            bench = {op: [v for v, k in zip(values, keep) if k] for op, values in bench.items()}
            rows = len(table.target)
    golden_refs = [g if m else None for g, m in zip(table.golden, matched)]
    cells: dict = {col.NPU_NAME: [r.name[i] for r, i in table.target],
                   col.BENCH_NAME: [g[0].name[g[1]] if g is not None else "N/A" for g in golden_refs]}
    for op in STATS:
        cells[f"NPU {CELL[op]}"] = _texts(npu[op], "N/A")
        cells[f"Bench {CELL[op]}"] = _texts([b if m else None for b, m in zip(bench[op], matched)], "N/A")
    t_dtype, g_dtype = _of(table.target, "dtype"), _of(golden_refs, "dtype")
    cells["NPU Dtype"], cells["Bench Dtype"] = _texts(t_dtype, "N/A"), _texts(g_dtype, "N/A")
    with np.errstate(invalid="ignore", divide="ignore"):
        t_norm = np.array([np.nan if v is None else v for v in npu["norm"]])
        g_norm = np.array([np.nan if v is None or not m else v for v, m in zip(bench["norm"], matched)])
        norm_rel = np.where(t_norm == g_norm, 0.0, (t_norm - g_norm) / g_norm)
    data = JudgeInput(mode=col.STATISTICS, entry=np.asarray(table.entry, dtype=np.int64),
                      entry_names=table.entry_names,
                      is_output=np.array([s == "output" for s in table.state], dtype=bool), matched=matched,
                      bench_names=cells[col.BENCH_NAME], dtypes=(t_dtype, g_dtype),
                      shapes=(_of(table.target, "shape"), _of(golden_refs, "shape")),
                      grads=([None] * rows, [None] * rows), npu_max=cells["NPU max"], npu_min=cells["NPU min"],
                      bench_max=cells["Bench max"], bench_min=cells["Bench min"], norm_rel=norm_rel)
    verdict = judge_rows(data, cells, table.state, [True] * rows, cross=_cross(t_dtype, g_dtype))
    return table, verdict, cells


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
                first_only: bool = True) -> list:
    """The rows of the target's step that the verdict finds made at their entry, as Anomalies of kind divergence,
    in call order (only the first with first_only). previous: (target, golden) records of the step before, for the
    weights and optimizer states carried over."""
    if not len(target) or not len(golden):
        return []
    table, verdict, cells = judge(_Side(target, previous[0]), _Side(golden, previous[1]), decimal_quantum(golden))
    entering = _enters(table, verdict)
    made = np.flatnonzero((verdict.levels >= MADE_HERE) | entering)
    if not len(made):
        return []
    errors = scale_errors(col.STATISTICS, cells)
    found = sorted(made.tolist(), key=lambda r: _order(table, r))
    if first_only:
        found = found[:1]
    return [_anomaly(table, verdict, errors, row, bool(entering[row])) for row in found]


def _enters(table: _Table, verdict) -> np.ndarray:
    """The row where the verdict finds the difference entering, made by no entry (MSG_ENTERS), when it is an
    activation: the model's data, or the input of a module made by code of its parent's own forward (a functional
    call between two monitored modules). A weight's is judged by its own entry."""
    out = np.zeros(len(table.target), dtype=bool)
    for row, message in enumerate(verdict.messages):
        if MSG_ENTERS in message:
            records, index = table.target[row]
            out[row] = records.group[index] == "actv"
    return out


def _order(table: _Table, row: int) -> tuple:
    records, index = table.target[row]
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


def _anomaly(table: _Table, verdict, errors: np.ndarray, row: int, entering: bool) -> Anomaly:
    (target, t), (golden, g) = table.target[row], table.golden[row]
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
        found = divergences(records, golden, self._previous)
        self._previous = (records, golden)
        return found

