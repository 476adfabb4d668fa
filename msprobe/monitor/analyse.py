"""`msprobe monitor analyse`: every rank's anomalies in the order they happened (step, micro-step, stage, call
order: `Anomaly.order_key`), the first of them named as the origin, what follows grouped by step, and the
`PrecisionDebugger` configuration that dumps exactly the origin's step, rank and module.

The anomalies come from the run's anomaly files (what the monitor found as it trained, golden divergences included)
or, where a run has none of ours (a run of the reference's monitor, whose alerts are another rule's), from its CSVs
read again through the same rules (`AnomalyDetector`)."""

from __future__ import annotations

import math
import shlex
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from msprobe.monitor.records import Anomaly

KINDS = ("nan", "inf", "spike", "drop", "divergence")
GROUP_MODULES = 8          # modules named per group
DUMP_PATH = "./monitor_dump"
PYTORCH, MINDSPORE = "pytorch", "mindspore"


@dataclass
class Analysis:
    anomalies: list                     # every anomaly, in order (Anomaly.order_key)
    source: str = ""                    # where they come from, for the summary
    ranks: list = field(default_factory=list)
    framework: str = PYTORCH

    @property
    def first(self) -> Anomaly | None:
        return self.anomalies[0] if self.anomalies else None


def ordered(anomalies: Iterable[Anomaly]) -> list:
    """Anomalies in the order they happened (every rank's interleaved by step, micro-step, stage, call order)."""
    return sorted(anomalies, key=Anomaly.order_key)


def analyse(anomalies: Iterable[Anomaly], source: str = "", ranks: Iterable[int] = (),
            framework: str = PYTORCH) -> Analysis:
    found = ordered(anomalies)
    return Analysis(found, source, sorted(set(ranks) | {a.rank for a in found}), framework)


def groups(analysis: Analysis) -> list:
    """What follows the origin, one group per step: its count, ranks, kinds and first modules in order. The origin's
    step comes first (the origin and how it spread within the step), later steps after it."""
    out: list = []
    by_step: dict = {}
    for anomaly in analysis.anomalies:
        group = by_step.get(anomaly.step)
        if group is None:
            group = by_step[anomaly.step] = {"step": anomaly.step, "count": 0, "ranks": set(), "kinds": Counter(),
                                             "modules": []}
            out.append(group)
        group["count"] += 1
        group["ranks"].add(anomaly.rank)
        group["kinds"][anomaly.kind] += 1
        label = anomaly.module or "(model)"
        if label not in group["modules"]:
            group["modules"].append(label)
    for group in out:
        group["ranks"] = sorted(group["ranks"])
        group["kinds"] = {kind: group["kinds"][kind] for kind in KINDS if group["kinds"][kind]}
        group["more_modules"] = max(0, len(group["modules"]) - GROUP_MODULES)
        group["modules"] = group["modules"][:GROUP_MODULES]
    return out


def anomaly_json(anomaly: Anomaly) -> dict:
    """An anomaly as one JSON object (the `first` of `--json`); non-finite numbers as null."""
    return {"step": anomaly.step, "rank": anomaly.rank, "micro_step": anomaly.micro_step, "stage": anomaly.stage,
            "call": anomaly.call, "module": anomaly.module, "name": anomaly.name, "metric": anomaly.metric,
            "kind": anomaly.kind, "value": _number(anomaly.value), "baseline": _number(anomaly.baseline),
            "rule": anomaly.rule, "message": anomaly.message}


def _number(value) -> float | None:
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


def dump_config(anomaly: Anomaly, framework: str = PYTORCH, dump_path: str = DUMP_PATH) -> dict:
    """The `PrecisionDebugger` configuration (docs/dump.md) that dumps the anomaly's step, rank and module: task
    tensor, level mix (the module and every API called inside it), its forward, backward and parameter gradients
    selected by the module's prefix (`Module.layers.1.fc1.`; `Cell.` for MindSpore). The model itself (an anomaly
    of the model's own input or output) selects everything of that step."""
    prefix = "Cell." if framework == MINDSPORE else "Module."
    selection = [f"{prefix}{anomaly.module}."] if anomaly.module else []
    return {"task": "tensor", "dump_path": dump_path, "rank": [anomaly.rank], "step": [anomaly.step],
            "level": "mix", "async_dump": False,
            "tensor": {"scope": [], "list": selection, "data_mode": ["all"]}}


def describe(anomaly: Anomaly) -> str:
    """One line: where and what (`step 20, rank 0, forward, layers.1.fc1 (layers.1.fc1.output): actv.norm spike,
    2294.77 against 46.31`)."""
    where = f"step {anomaly.step}"
    if anomaly.micro_step:
        where += f" (micro-step {anomaly.micro_step})"
    module = anomaly.module or "the model"
    what = f"{anomaly.metric} {anomaly.kind}"
    if anomaly.baseline is not None and math.isfinite(anomaly.value):
        against = "the golden's" if anomaly.kind == "divergence" else "against"
        what += f", {anomaly.value:.6g} {against} {anomaly.baseline:.6g}"
    elif math.isfinite(anomaly.value) or anomaly.kind in ("nan", "inf"):
        what += f" ({anomaly.op} = {anomaly.value:g})"
    return f"{where}, rank {anomaly.rank}, {anomaly.stage}, {module} ({anomaly.name}): {what}"


def next_commands(anomaly: Anomaly, config_path: str) -> list:
    """What to run next: the targeted dump, and the triage of that step against a golden command."""
    quoted = shlex.quote(config_path)
    return [f"MSPROBE_DUMP_CONFIG={quoted} <your training command>   (a script with a PrecisionDebugger: it dumps "
            f"step {anomaly.step}, rank {anomaly.rank}, {anomaly.module or 'the whole model'}; or "
            f"PrecisionDebugger(config_path={config_path!r}), docs/dump.md)",
            f"msprobe triage --target \"<your training command>\" --golden \"<a good command>\" --step {anomaly.step}"]


def to_json(analysis: Analysis, config_path: str | None = None) -> dict:
    first = analysis.first
    return {"anomalies": len(analysis.anomalies), "ranks": analysis.ranks, "source": analysis.source,
            "first": anomaly_json(first) if first else None, "groups": groups(analysis),
            "dump_config": config_path if first else None,
            "next": next_commands(first, config_path) if first and config_path else []}


def summary(analysis: Analysis, config_path: str | None = None) -> list:
    """The console summary, as lines."""
    count = len(analysis.anomalies)
    ranks = analysis.ranks
    head = f"{count} anomal{'y' if count == 1 else 'ies'} on {len(ranks)} rank{'s' if len(ranks) != 1 else ''}"
    if analysis.source:
        head += f" ({analysis.source})"
    first = analysis.first
    if first is None:
        return [f"{head}: nothing to name."]
    lines = [f"{head}.", f"first (the origin): {describe(first)}"]
    if first.message:
        lines.append(f"  {first.message}")
    for group in groups(analysis)[:6]:
        kinds = ", ".join(f"{n} {kind}" for kind, n in group["kinds"].items())
        modules = ", ".join(group["modules"]) + (f" and {group['more_modules']} more" if group["more_modules"] else "")
        lines.append(f"  step {group['step']}: {group['count']} ({kinds}) on rank "
                     f"{', '.join(map(str, group['ranks']))}: {modules}")
    more = len(groups(analysis)) - 6
    if more > 0:
        lines.append(f"  ... and {more} later steps with anomalies")
    if config_path:
        lines.append(f"dump configuration: {config_path}")
        lines.append("next:")
        lines.extend(f"  {command}" for command in next_commands(first, config_path))
    return lines
