"""`msprobe monitor report`: one self-contained HTML page of a monitored run: a plot per metric and module over the
steps (paged and filterable in the page, drawn as inline SVG), the anomalies in the order they happened with the
origin and the first divergence marked. The page embeds its data as JSON and the script msprobe/data/report/
monitor.js, in the style of the compare report (report/html.py); it needs no network.

Big runs are capped, not refused: each series keeps at most MAX_POINTS steps (every step while they fit; then every
second, fourth... step, a stride that doubles as the run grows, so memory stays flat whatever the run's length; an
anomaly is marked at its own step whether or not that step is drawn), and at most MAX_SERIES series are drawn (those with anomalies first, then in the
order they were taken); the page says what was left out."""

from __future__ import annotations

import math
import os

import numpy as np

from msprobe.dump.paths import prepare_output_dir
from msprobe.monitor.analyse import DEFAULT_RULES, anomaly_json, describe, groups, load
from msprobe.monitor.records import StepRecords
from msprobe.report.html import write_page

MAX_POINTS = 400           # steps kept per series
MAX_SERIES = 1500          # series drawn
MAX_ANOMALIES = 2000       # anomalies listed in the page (the count is always the total)
SHOWN_OPS = ("norm", "mean", "max", "min", "zeros", "nans", "infs")
DIGITS = 5


class _Rank:
    """One rank's series: a [points, keys, ops] array on a step grid whose stride doubles when it is full."""

    def __init__(self) -> None:
        self.keys: dict = {}            # (group, name, micro, vpp) -> column
        self.meta: list = []            # per column: (group, name, module, stage, micro, vpp, first call)
        self.steps: list = []
        self.values = np.full((0, 0, len(SHOWN_OPS)), np.nan, dtype=np.float32)
        self.stride = 1
        self.seen = 0
        self._layout = None

    def add(self, records: StepRecords) -> None:
        self.seen += 1
        if (self.seen - 1) % self.stride:
            return
        columns = self._columns(records)
        if len(self.steps) == MAX_POINTS:          # full: keep every other point, take every other step from now on
            self.values = self.values[::2].copy()
            self.steps = self.steps[::2]
            self.stride *= 2
            if (self.seen - 1) % self.stride:
                return
        row = np.full((len(self.meta), len(SHOWN_OPS)), np.nan, dtype=np.float32)
        present = records.present if len(records.present) == len(records) else np.ones(len(records), dtype=bool)
        for j, op in enumerate(SHOWN_OPS):
            if op in records.ops:
                row[columns, j] = np.where(present, records.values[:, records.ops.index(op)], np.nan)
        if self.values.shape[1] < len(self.meta):
            grown = np.full((self.values.shape[0], len(self.meta), len(SHOWN_OPS)), np.nan, dtype=np.float32)
            grown[:, :self.values.shape[1]] = self.values
            self.values = grown
        self.values = np.concatenate((self.values, row[None]))
        self.steps.append(records.step)

    def _columns(self, records: StepRecords) -> np.ndarray:
        layout = (records.group, records.name, records.micro_step, records.vpp_stage)
        if self._layout is not None and self._layout[0] == layout:
            return self._layout[1]
        columns = []
        for i, key in enumerate(zip(*layout)):
            column = self.keys.get(key)
            if column is None:
                column = self.keys[key] = len(self.meta)
                self.meta.append((records.group[i], records.name[i], records.module[i], records.stage[i],
                                  records.micro_step[i], records.vpp_stage[i], records.call[i]))
            columns.append(column)
        index = np.array(columns, dtype=np.int64)
        self._layout = ((list(layout[0]), list(layout[1]), list(layout[2]), list(layout[3])), index)
        return index


class SeriesCollector:
    """Every rank's series, fed one StepRecords at a time (the `each` of analyse.load)."""

    def __init__(self) -> None:
        self.ranks: dict = {}

    def __call__(self, records: StepRecords) -> None:
        rank = self.ranks.get(records.rank)
        if rank is None:
            rank = self.ranks[records.rank] = _Rank()
        rank.add(records)


def _number(value) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(f"{value:.{DIGITS}g}")


def _special(value) -> str | None:
    """NaN and infinities, which JSON cannot hold, as text."""
    if value is None or math.isfinite(value):
        return None
    return "nan" if math.isnan(value) else "inf" if value > 0 else "-inf"


def page_data(directory: str, analysis, collector: SeriesCollector) -> dict:
    marked: dict = {}       # (rank, group, name, micro, vpp) -> anomaly indexes
    anomalies = analysis.anomalies[:MAX_ANOMALIES]
    for index, anomaly in enumerate(anomalies):
        marked.setdefault((anomaly.rank, anomaly.group, anomaly.name, anomaly.micro_step), []).append(index)
    series = []
    for rank, data in sorted(collector.ranks.items()):
        for column, (group, name, module, stage, micro, vpp, call) in enumerate(data.meta):
            found = marked.get((rank, group, name, micro), [])
            series.append((0 if found else 1, rank, stage, call, column, group, name, module, micro, vpp, found))
    series.sort(key=lambda s: (s[0], s[1], ("forward", "backward", "optimizer", "step").index(s[2])
                               if s[2] in ("forward", "backward", "optimizer", "step") else 4, s[3]))
    shown = series[:MAX_SERIES]
    out_series = []
    for _, rank, stage, _, column, group, name, module, micro, vpp, found in shown:
        data = collector.ranks[rank]
        values = {}
        for j, op in enumerate(SHOWN_OPS):
            column_values = data.values[:, column, j].astype(np.float64)
            if np.isnan(column_values).all() and op not in ("nans", "infs"):
                continue
            if op in ("nans", "infs") and not np.nansum(np.abs(column_values)):
                continue
            values[op] = [_number(v) if math.isfinite(v) else _special(v) for v in column_values.tolist()]
        out_series.append({"rank": rank, "group": group, "name": name, "module": module, "stage": stage,
                           "micro": micro, "vpp": vpp, "values": values, "anomalies": found})
    first = analysis.first
    divergence = next((a for a in analysis.anomalies if a.kind == "divergence"), None)
    steps = [s for data in collector.ranks.values() for s in data.steps]
    return {
        "summary": {"directory": directory, "source": analysis.source, "ranks": analysis.ranks,
                    "anomalies": len(analysis.anomalies), "listed": len(anomalies),
                    "first": anomaly_json(first) if first else None, "first_text": describe(first) if first else "",
                    "divergence": anomaly_json(divergence) if divergence else None,
                    "divergence_text": describe(divergence) if divergence else "",
                    "steps": [min(steps), max(steps)] if steps else None, "series": len(series),
                    "shown": len(shown), "strides": {str(r): d.stride for r, d in collector.ranks.items()},
                    "groups": groups(analysis)[:20]},
        "steps": {str(rank): data.steps for rank, data in collector.ranks.items()},
        "ops": list(SHOWN_OPS),
        "series": out_series,
        "anomalies": [[a.step, a.rank, a.micro_step, a.stage, a.module, a.name, a.metric, a.kind, _number(a.value),
                       _number(a.baseline), a.rule, a.message] for a in anomalies],
    }


def write_report(directory: str, output: str = "monitor_report.html", source: str = "auto", rules=DEFAULT_RULES,
                 golden: str | None = None) -> str:
    """Read the run once (its anomalies as `msprobe monitor analyse` reads them, every step's records for the
    plots), write the page; its path."""
    collector = SeriesCollector()
    analysis = load(directory, source, rules, golden, each=collector)
    if output.lower().endswith((".html", ".htm")):
        parent = os.path.dirname(os.path.abspath(output))
        prepare_output_dir(parent)
        path = os.path.abspath(output)
    else:
        path = os.path.join(prepare_output_dir(output), "monitor_report.html")
    data = page_data(os.path.abspath(directory), analysis, collector)
    return write_page(path, data, f"msprobe monitor: {os.path.basename(os.path.abspath(directory))}",
                      script="monitor.js")
