"""The anomaly rules: plain functions over one step's records (`StepRecords`) and a bounded recent history per
metric, so that they run as the model trains (`AnomalyDetector.observe`, called once per step by the engine) and
on recorded CSVs alike (`msprobe monitor analyse` feeds the records it reads through the same detector).

The reference's rule names select the rules:

* `AnomalyNan` (`threshold` optional): a NaN or an infinity in a tensor (its `nans`/`infs` count, or a statistic
  that is NaN/inf), reported once where a metric turns non-finite; with `threshold`, also a tensor whose largest
  magnitude exceeds it. A slot without a tensor (`present` False: the gradient of an input that needs none) is
  never a NaN.
* `AnomalyTurbulence` (`threshold`, the reference's relative deviation, 0.5 in its docs): NaN/inf as above, and a
  jump of a metric against a robust baseline of its own recent values: the baseline is the median of its last
  `recent` values (so a trend lags by a step or two only), the spread the median of its last `window` residuals (the
  absolute deviations of its values from the baseline of their time, x 1.4826: what the test measures, whatever the
  series' trend or autocorrelation). A value is a spike (a drop) when it lies above (below) the baseline by more
  than `threshold` in the metric's own scale *and* by more than `spread` robust standard deviations, once `warmup`
  residuals are known. The norm is judged by its log, its ratio to the baseline (a spike: more than 1 + threshold
  times it, a drop: less than 1 / (1 + threshold) of it), so Adam's m and v growing from zero, steadily, are no
  jump; the mean of activations and parameters is judged in units of the tensor's root mean square (norm /
  sqrt(numel)), never relative to itself, so a mean that sits near zero is no jump when it moves by a fraction of
  its elements' size (a gradient's mean swings with the batch and is not judged); the loss is judged for spikes
  only. A value found anomalous does not enter the history (the baseline stays the one before it); it is reported
  once, at the first of anomalous values in a row, and after `persist` of them the metric has a new level and its
  values restart from them. Values read back from CSVs rounded to decimals (`resolution`) must also move by more
  than RESOLUTION_UNITS of their quantum.

Judgement is vectorised over the rows of a step; the history is a fixed-size array per metric, so memory stays flat
over any number of steps.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from msprobe.errors import MsprobeError
from msprobe.monitor.records import Anomaly, StepRecords

NAN_RULE, TURBULENCE_RULE = "AnomalyNan", "AnomalyTurbulence"
RULES = (TURBULENCE_RULE, NAN_RULE)     # the names the reference accepts, and the ones we do

# the groups whose value is the training loss: judged for spikes only (a falling loss is the point of training)
LOSS_GROUPS = frozenset({"loss"})
# the groups whose mean is judged: activations and parameters, whose mean is a property of the tensor; a gradient's
# or an optimizer state's mean swings with the batch (the gradient of a BatchNorm bias of 8 channels goes from -0.9
# to +0.5 of its root mean square between two clean steps) and says nothing its norm does not
MEAN_GROUPS = frozenset({"actv", "param_origin", "param_updated"})
RESOLUTION_UNITS = 10.0  # a jump smaller than this many quanta of rounded values is no jump
MAD_SIGMA = 1.4826      # a normal distribution's standard deviation per median absolute deviation


class AlertConfigError(MsprobeError):
    """An alert rule the monitor does not know, or an argument it cannot use."""


@dataclass(frozen=True)
class TurbulenceSettings:
    """AnomalyTurbulence's arguments (threshold: the reference's; the others ours, with these defaults)."""

    threshold: float = 0.5      # relative jump: a norm beyond (1 + t) x its baseline (or below it / (1 + t)),
                                # a mean moved by more than t x the tensor's root mean square
    window: int = 64            # the recent values a baseline is taken from
    warmup: int = 10            # values seen before a metric is judged
    spread: float = 8.0         # and the jump beyond this many robust standard deviations of the recent values
    persist: int = 3            # anomalous values in a row that make a new level (the history restarts)
    recent: int = 5             # the baseline is the median of this many last values (the spread: of the window)


@dataclass(frozen=True)
class NanSettings:
    threshold: float | None = None      # also a tensor whose largest magnitude exceeds this


_TURBULENCE_ARGS = {"threshold": float, "window": int, "warmup": int, "spread": float, "persist": int,
                    "recent": int}
# the rules a config may name and their arguments (name -> {argument: required?}), read by the config's validation
RULE_ARGS = {TURBULENCE_RULE: {arg: arg == "threshold" for arg in _TURBULENCE_ARGS}, NAN_RULE: {"threshold": False}}


def parse_rules(rules) -> tuple:
    """(TurbulenceSettings or None, NanSettings or None) of a rule list: (name, args) tuples, the reference's
    `{"rule_name": ..., "args": {...}}` dicts, or an object with a `rules` attribute (the config's alert). An
    unknown rule or argument raises AlertConfigError with one line."""
    rules = getattr(rules, "rules", rules)
    turbulence = nan = None
    for rule in rules or ():
        if isinstance(rule, dict):
            name, args = rule.get("rule_name"), rule.get("args")
        else:
            name, args = rule
        args = {} if args is None else dict(args) if isinstance(args, Mapping) else args
        if not isinstance(args, dict):
            raise AlertConfigError(f"alert rule {name!r}: args must be an object, not {type(args).__name__}")
        if name == TURBULENCE_RULE:
            turbulence = TurbulenceSettings(**_checked(name, args, _TURBULENCE_ARGS))
            if turbulence.threshold <= 0 or turbulence.window < 3 or turbulence.warmup < 3 or \
                    turbulence.spread <= 0 or turbulence.persist < 1 or turbulence.warmup > turbulence.window or \
                    not 1 <= turbulence.recent <= turbulence.warmup:
                raise AlertConfigError(f"alert rule {name}: threshold and spread must be > 0, window >= warmup >= 3, "
                                       f"persist >= 1, 1 <= recent <= warmup (got {args})")
        elif name == NAN_RULE:
            nan = NanSettings(**_checked(name, args, {"threshold": float}))
            if nan.threshold is not None and not nan.threshold > 0:
                raise AlertConfigError(f"alert rule {name}: threshold must be > 0 (got {nan.threshold})")
        else:
            raise AlertConfigError(f"alert rule {name!r} is not supported (supported: {', '.join(RULES)})")
    return turbulence, nan


def _checked(rule: str, args: dict, kinds: dict) -> dict:
    out = {}
    for key, value in args.items():
        kind = kinds.get(key)
        if kind is None:
            raise AlertConfigError(f"alert rule {rule}: unknown argument {key!r} (known: {', '.join(kinds)})")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                (kind is int and float(value) != int(value)) or not math.isfinite(value):
            raise AlertConfigError(f"alert rule {rule}: {key} must be a {'whole ' if kind is int else ''}number, "
                                   f"not {value!r}")
        out[key] = kind(value)
    return out


# the metrics the turbulence rule follows, per row: the log of the norm, and the mean in units of the rms
NORM, MEAN = 0, 1
METRIC_OPS = ("norm", "mean")
ZERO_NORM = 1e-300      # a norm of exactly 0 (a gradient that vanished) is judged as this: far below any other


def _column(records: StepRecords, op: str) -> np.ndarray | None:
    return records.values[:, records.ops.index(op)] if op in records.ops else None


def numels(shapes: Sequence) -> np.ndarray:
    """The element count of each shape (NaN where unknown)."""
    return np.array([math.prod(s) if s is not None else math.nan for s in shapes], dtype=np.float64)


STAT_OPS = ("min", "max", "mean", "norm")


def decimal_quantum(records: StepRecords, most: int = 12) -> float:
    """The absolute quantum of a step's statistics when they were written rounded to a number of decimals (the
    reference's CSVs, and ours, round to `ndigits` = 6 decimals: 1e-6); 0 when they are not so rounded (exact
    values, or significant digits)."""
    columns = [records.ops.index(op) for op in STAT_OPS if op in records.ops]
    if not columns or not len(records):
        return 0.0
    values = records.values[:, columns].ravel()
    values = values[np.isfinite(values) & (values != 0)]
    if len(values) < 8:
        return 0.0
    for digits in range(0, most + 1):
        scaled = values * 10.0 ** digits
        if np.all(np.abs(scaled - np.round(scaled)) <= 1e-6 * np.fmax(1.0, np.abs(scaled))):
            return 10.0 ** -digits
    return 0.0


def nonfinite(records: StepRecords) -> tuple:
    """Per row: (a NaN in the tensor, an infinity in it, the op that shows it), for the rows that hold a tensor."""
    rows = len(records)
    present = records.present if len(records.present) == rows else np.ones(rows, dtype=bool)
    nan, nan_op = _shown_by(records, "nans", np.isnan, ("min", "max", "mean", "norm"))
    inf, inf_op = _shown_by(records, "infs", np.isinf, ("min", "max"))
    nan &= present
    inf &= present & ~nan
    return nan, inf, np.where(nan, nan_op, inf_op)


def _shown_by(records: StepRecords, count: str, test, ops: tuple) -> tuple:
    """Per row whether its `count` column is above 0 or `test` holds for one of its `ops`, and the first op that
    shows it."""
    rows = len(records)
    hit = np.zeros(rows, dtype=bool)
    shown = np.full(rows, "", dtype=object)
    with np.errstate(invalid="ignore"):
        for op in (count, *ops):
            column = _column(records, op)
            if column is None:
                continue
            found = (column > 0) if op == count else test(column)
            shown[found & ~hit] = op
            hit |= found
    return hit, shown


def magnitude(records: StepRecords) -> np.ndarray | None:
    """Per row the largest magnitude max(|min|, |max|) (None when neither is recorded)."""
    low, high = _column(records, "min"), _column(records, "max")
    if low is None and high is None:
        return None
    if low is None or high is None:
        return np.abs(high if low is None else low)
    return np.fmax(np.abs(low), np.abs(high))


def metrics(records: StepRecords) -> tuple:
    """Per row the turbulence rule's metrics [rows, 2] and the scale of the mean [rows]: log(norm) (a norm of 0 at
    the log of ZERO_NORM), and mean / scale with scale the root mean square norm / sqrt(numel) (the largest
    magnitude where no norm or shape is recorded). NaN where a metric is not recorded or not finite."""
    rows = len(records)
    out = np.full((rows, 2), np.nan)
    scale = np.full(rows, np.nan)
    norm, mean = _column(records, "norm"), _column(records, "mean")
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        if norm is not None:
            out[:, NORM] = np.log(np.where(norm == 0, ZERO_NORM, np.where(norm > 0, norm, np.nan)))
            scale = norm / np.sqrt(numels(records.shape))
        if mean is not None:
            big = magnitude(records)
            if big is not None:
                scale = np.where(np.isfinite(scale) & (scale > 0), scale, big)
            out[:, MEAN] = np.where(scale > 0, mean / scale, np.where(mean == 0, 0.0, np.nan))
    out[~np.isfinite(out)] = np.nan
    return out, scale


class _History:
    """Per metric key two rings of the last `window` accepted values: of the two metrics, and of their absolute
    deviations from the baseline at the time (the residuals, whose median is the spread: it measures what the test
    measures, whatever the series' trend or autocorrelation)."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.values = np.full((0, window, 2), np.nan)
        self.residuals = np.full((0, window, 2), np.nan)
        self.count = np.zeros((0, 2), dtype=np.int64)       # values held (<= window)
        self.pos = np.zeros((0, 2), dtype=np.int64)          # next slot of values
        self.rcount = np.zeros((0, 2), dtype=np.int64)      # residuals held (<= window)
        self.rpos = np.zeros((0, 2), dtype=np.int64)
        self.streak = np.zeros((0, 2), dtype=np.int64)       # anomalous values in a row
        self.recent = np.full((0, 2, 0), np.nan)             # the anomalous values of the current streak

    def grow(self, keys: int, persist: int) -> None:
        have = len(self.count)
        if keys <= have:
            return
        extra = max(keys - have, have // 2, 16)
        for name in ("values", "residuals"):
            setattr(self, name, np.concatenate((getattr(self, name), np.full((extra, self.window, 2), np.nan))))
        for name in ("count", "pos", "rcount", "rpos", "streak"):
            setattr(self, name, np.concatenate((getattr(self, name), np.zeros((extra, 2), dtype=np.int64))))
        recent = np.full((have + extra, 2, persist), np.nan)
        recent[:have, :, :self.recent.shape[2]] = self.recent
        self.recent = recent

    def push(self, ring: str, keys: np.ndarray, x: np.ndarray, metric: int) -> None:
        values, count, pos = (self.values, self.count, self.pos) if ring == "values" else \
            (self.residuals, self.rcount, self.rpos)
        at = pos[keys, metric]
        values[keys, at, metric] = x
        pos[keys, metric] = (at + 1) % self.window
        count[keys, metric] = np.minimum(count[keys, metric] + 1, self.window)


def _median(window: np.ndarray, full: np.ndarray) -> np.ndarray:
    """Row medians of a [rows, n] array whose rows are full (no NaN) where `full`, NaN-padded elsewhere."""
    out = np.empty(len(window))
    with np.errstate(invalid="ignore"):
        if full.all():
            return np.median(window, axis=1)
        if full.any():
            out[full] = np.median(window[full], axis=1)
        out[~full] = np.nanmedian(window[~full], axis=1)
    return out


class AnomalyDetector:
    """One rank's alert rules, stateful over the steps: `observe` each step's records in step order, get the
    anomalies found in them. `rules`: the config's alert (or its rules: (name, args) tuples or the reference's
    dicts). No rule: nothing is ever found."""

    def __init__(self, rules=(), *, loss_groups: Iterable[str] = LOSS_GROUPS, resolution: float = 0.0) -> None:
        self.turbulence, self.nan = parse_rules(rules)
        # the absolute quantum of the values (0: exact, as the engine takes them; a CSV that rounds to 6 decimals,
        # as the reference's: 1e-6): a jump must exceed RESOLUTION_UNITS of it
        self.resolution = resolution
        self.loss_groups = frozenset(loss_groups)
        settings = self.turbulence or TurbulenceSettings()
        self._history = _History(settings.window)
        self._keys: dict = {}
        self._finite: np.ndarray = np.ones(0, dtype=bool)     # per key: last seen finite (NaN reported once)
        self._layout: tuple | None = None                     # the last step's row keys, reused when unchanged

    @property
    def active(self) -> bool:
        return self.turbulence is not None or self.nan is not None

    def observe(self, records: StepRecords) -> list:
        """The anomalies of one step's records, in the order of the rows."""
        if not self.active or not len(records):
            return []
        index = self._index(records)
        found: list = []
        nan, inf, shown = nonfinite(records)
        bad = nan | inf
        fresh = bad & self._finite[index]
        self._finite[index[bad]] = False
        self._finite[index[~bad & _present(records)]] = True
        for row in np.flatnonzero(fresh).tolist():
            kind = "nan" if nan[row] else "inf"
            op = shown[row]
            value = _value(records, row, op)
            found.append(_anomaly(records, row, kind, op, value, None,
                                  NAN_RULE if self.nan is not None else TURBULENCE_RULE,
                                  f"{'NaN' if kind == 'nan' else 'an infinity'} in the tensor ({op} = {value:g})"))
        if self.nan is not None and self.nan.threshold is not None:
            big = magnitude(records)
            if big is not None:
                with np.errstate(invalid="ignore"):
                    over = ~bad & _present(records) & (big > self.nan.threshold)
                for row in np.flatnonzero(over).tolist():
                    found.append(_anomaly(records, row, "spike", "max", float(big[row]), self.nan.threshold,
                                          NAN_RULE, f"largest magnitude {big[row]:g} above the threshold "
                                                    f"{self.nan.threshold:g}"))
        if self.turbulence is not None:
            found.extend(self._turbulence(records, index, bad))
        found.sort(key=lambda a: (a.micro_step, a.call))
        return found

    def _index(self, records: StepRecords) -> np.ndarray:
        layout = (records.group, records.name, records.vpp_stage)
        if self._layout is not None and self._layout[0] == layout:
            return self._layout[1]
        keys = self._keys
        index = np.array([keys.setdefault(key, len(keys)) for key in zip(records.group, records.name,
                                                                           records.vpp_stage)], dtype=np.int64)
        if len(keys) > len(self._finite):
            self._finite = np.concatenate((self._finite, np.ones(len(keys) - len(self._finite) + 64, dtype=bool)))
        self._history.grow(len(keys), (self.turbulence or TurbulenceSettings()).persist)
        self._layout = ((list(records.group), list(records.name), list(records.vpp_stage)), index)
        return index

    def _turbulence(self, records: StepRecords, index: np.ndarray, bad: np.ndarray) -> list:
        """Spikes and drops of each row's metrics against its key's recent values; the history updated."""
        settings = self.turbulence
        values, scale = metrics(records)
        values[bad] = np.nan
        loss = np.array([g in self.loss_groups for g in records.group], dtype=bool) \
            if self.loss_groups & set(records.group) else np.zeros(len(records), dtype=bool)
        values[~np.isin(np.asarray(records.group, dtype=object), list(MEAN_GROUPS)), MEAN] = np.nan
        if loss.any():
            values[loss, NORM] = np.nan
            mean = _column(records, "mean")
            values[loss, MEAN] = mean[loss] if mean is not None else np.nan
        found = []
        # a key seen twice in a step (micro-steps, a module called twice) is judged in order, one pass per repeat
        remaining = np.arange(len(records))
        while len(remaining):
            keys = index[remaining]
            _, first = np.unique(keys, return_index=True)
            first.sort()
            rows = remaining[first]
            found.extend(self._judge(records, rows, index[rows], values[rows], scale[rows], loss[rows], settings))
            remaining = np.delete(remaining, first)
        return found

    def _judge(self, records: StepRecords, rows: np.ndarray, keys: np.ndarray, values: np.ndarray,
               scale: np.ndarray, loss: np.ndarray, settings: TurbulenceSettings) -> list:
        history = self._history
        found = []
        for metric in (NORM, MEAN):
            x = values[:, metric]
            flags = np.zeros(len(rows), dtype=np.int8)     # 1 spike, -1 drop
            base = np.full(len(rows), np.nan)
            deviation = np.full(len(rows), np.nan)
            has = np.flatnonzero(~np.isnan(x) & (history.count[keys, metric] > 0))
            if len(has):
                # the baseline: the median of the last `recent` values (a trend lags by a step or two only)
                k = keys[has]
                last = (history.pos[k, metric][:, None] - np.arange(1, settings.recent + 1)) % history.window
                centre = _median(history.values[k[:, None], last, metric], history.count[k, metric] >= settings.recent)
                deviation[has] = x[has] - centre
                base[has] = np.exp(centre) if metric == NORM else centre
                judged = has[history.rcount[k, metric] >= settings.warmup]
                if len(judged):
                    flags[judged] = self._flags(keys[judged], metric, x[judged], deviation[judged], base[judged],
                                                scale[judged], loss[judged], settings)
            accepted = ~np.isnan(x) & (flags == 0)
            history.push("values", keys[accepted], x[accepted], metric)
            measured = accepted & ~np.isnan(deviation)
            history.push("residuals", keys[measured], np.abs(deviation[measured]), metric)
            history.streak[keys[accepted], metric] = 0
            # a value flagged while the one before it was flagged too continues the same anomaly (a new level
            # being reached): reported once, at its first step
            fresh = history.streak[keys, metric] == 0
            self._streaks(keys, x, flags != 0, metric, settings)
            for i in np.flatnonzero((flags != 0) & fresh).tolist():
                row = int(rows[i])
                found.append(self._jump(records, row, metric, int(flags[i]), base[i], float(scale[i]), bool(loss[i]),
                                        settings))
        return found

    def _flags(self, keys: np.ndarray, metric: int, x: np.ndarray, deviation: np.ndarray, base: np.ndarray,
               scale: np.ndarray, loss: np.ndarray, settings: TurbulenceSettings) -> np.ndarray:
        """+1 (spike), -1 (drop) or 0 per judged row: beyond `threshold` in the metric's scale and beyond `spread`
        robust standard deviations of its recent residuals (and, for rounded values, beyond their resolution)."""
        history = self._history
        spread = MAD_SIGMA * _median(history.residuals[keys, :, metric], history.rcount[keys, metric] >= history.window)
        with np.errstate(invalid="ignore", over="ignore"):
            robust = np.abs(deviation) > settings.spread * spread
            if self.resolution:
                raw = np.abs(np.exp(x) - base) if metric == NORM else np.abs(deviation) * np.where(loss, 1.0, scale)
                robust &= raw > RESOLUTION_UNITS * self.resolution
            if metric == NORM:
                jump = math.log1p(settings.threshold)
                up, down = robust & (deviation > jump), robust & (deviation < -jump)
            else:
                relative = np.where(loss, np.abs(base) * settings.threshold, settings.threshold)
                up, down = robust & (deviation > relative), robust & (deviation < -relative)
        return np.where(up, 1, np.where(down & ~loss, -1, 0)).astype(np.int8)

    def _streaks(self, keys: np.ndarray, x: np.ndarray, flagged: np.ndarray, metric: int,
                 settings: TurbulenceSettings) -> None:
        """Count anomalous values in a row; at `persist` of them the metric has a new level: its values restart
        from them (its residuals, the spread, stay)."""
        history = self._history
        if not flagged.any():
            return
        k = keys[flagged]
        streak = history.streak[k, metric]
        history.recent[k, metric, np.minimum(streak, settings.persist - 1)] = x[flagged]
        streak = streak + 1
        history.streak[k, metric] = streak
        for key in k[streak >= settings.persist].tolist():
            history.values[key, :, metric] = np.nan
            history.values[key, :settings.persist, metric] = history.recent[key, metric, :settings.persist]
            history.count[key, metric] = settings.persist
            history.pos[key, metric] = settings.persist % history.window
            history.streak[key, metric] = 0

    def _jump(self, records: StepRecords, row: int, metric: int, direction: int, base: float, rms: float,
              loss: bool, settings: TurbulenceSettings) -> Anomaly:
        kind = "spike" if direction > 0 else "drop"
        if metric == NORM:
            value = _value(records, row, "norm")
            ratio = value / base if base else math.inf
            message = f"norm {value:.6g} is {ratio:.3g} x its recent baseline {base:.6g}"
            return _anomaly(records, row, kind, "norm", value, float(base), TURBULENCE_RULE, message)
        value = _value(records, row, "mean")
        if loss:
            message = f"loss {value:.6g} above its recent baseline {base:.6g} by more than {settings.threshold:g} of it"
            return _anomaly(records, row, kind, "mean", value, float(base), TURBULENCE_RULE, message)
        baseline = base * rms
        message = (f"mean {value:.6g} moved {'up' if direction > 0 else 'down'} from its recent baseline "
                   f"{baseline:.6g} by more than {settings.threshold:g} of the tensor's root mean square {rms:.6g}")
        return _anomaly(records, row, kind, "mean", value, baseline, TURBULENCE_RULE, message)


def _present(records: StepRecords) -> np.ndarray:
    return records.present if len(records.present) == len(records) else np.ones(len(records), dtype=bool)


def _value(records: StepRecords, row: int, op: str) -> float:
    return float(records.values[row, records.ops.index(op)]) if op in records.ops else math.nan


def _anomaly(records: StepRecords, row: int, kind: str, op: str, value: float, baseline: float | None, rule: str,
             message: str) -> Anomaly:
    return Anomaly(kind=kind, rank=records.rank, step=records.step, micro_step=int(records.micro_step[row]),
                   stage=records.stage[row], call=int(records.call[row]), module=records.module[row],
                   name=records.name[row], group=records.group[row], op=op, value=value, baseline=baseline,
                   rule=rule, message=message)
