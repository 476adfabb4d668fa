"""`msprobe monitor analyse`: every rank's anomalies in the order they happened (step, micro-step, stage, call
order: `Anomaly.order_key`), the first of them named as the origin, what follows grouped by step, and the
`PrecisionDebugger` configuration that dumps exactly the origin's step, rank and module.

The anomalies come from the run's anomaly files (what the monitor found as it trained, golden divergences included)
or, where a run has none of ours (a run of the reference's monitor, whose alerts are another rule's), from its CSVs
read again through the same rules (`AnomalyDetector`)."""

from __future__ import annotations

import json
import math
import os
import re
import shlex
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from msprobe.dump.paths import check_input_dir
from msprobe.errors import MsprobeError
from msprobe.log import progress
from msprobe.monitor.anomaly import AnomalyDetector, decimal_quantum
from msprobe.monitor.golden import GoldenWatch, split_name
from msprobe.monitor.layout import (
    ANOMALY_DIR,
    REFERENCE_ANOMALY_FILE,
    read_anomalies,
    read_run,
    run_folders,
    stage_of,
)
from msprobe.monitor.records import Anomaly, StepRecords

KINDS = ("nan", "inf", "spike", "drop", "divergence")
SOURCES = ("auto", "anomalies", "csv", "reference")
# the rules the CSVs are read again with when no config names others: the reference's documented settings
DEFAULT_RULES = (("AnomalyTurbulence", {"threshold": 0.5}), ("AnomalyNan", {}))
# the reference's anomaly.json tags name the gradients by their hook
REFERENCE_GROUPS = {"acc_grad": "grad_unreduced", "post_grad": "grad_reduced"}
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
    """What to run next, as lines: the targeted dump (and how to find the culprit with it), or the triage of that
    step against a good command."""
    where = f"step {anomaly.step}, rank {anomaly.rank}, {anomaly.module or 'the whole model'}"
    return [f"dump {where} (tensors): PrecisionDebugger(config_path={config_path!r}) around the training step "
            f"(docs/dump.md), or MSPROBE_DUMP_CONFIG={shlex.quote(config_path)} for a script that makes one; the same "
            f"dump of a good run, then msprobe compare -tp <this dump>/step{anomaly.step} -gp <good dump>/step"
            f"{anomaly.step} -o <dir> -da names the culprit",
            f"or, given a good command, all of it at once: msprobe triage --target \"<your training command>\" "
            f"--golden \"<a good command>\" --step {anomaly.step}"]


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


# ------------------------------------------------------------------------------------------------------ reading
class NoMonitorOutput(MsprobeError):
    """The directory holds no monitor output."""


def load(directory: str, source: str = "auto", rules=DEFAULT_RULES, golden: str | None = None,
         each: Callable[[StepRecords], None] | None = None) -> Analysis:
    """The anomalies of a MONITOR_OUTPUT_DIR (or one rank folder of it), from `source`:

    * `anomalies`: the monitor's own anomaly files (anomaly_detected/rank<r>/anomaly.jsonl), golden divergences
      included;
    * `csv`: the run's CSVs read again through the rules (`rules`: (name, args) pairs, a config's alert), one step
      at a time;
    * `reference`: the reference's anomaly_detected/rank<r>/anomaly.json;
    * `auto`: the monitor's anomaly files when there are any, else the CSVs.

    golden: a golden run's MONITOR_OUTPUT_DIR: the CSVs are also compared with it step by step (GoldenWatch).
    each: called with every step's records read (the CSVs are read whenever it is given)."""
    directory = check_input_dir(directory, "monitor output directory")
    if source not in SOURCES:
        raise MsprobeError(f"unknown source {source!r} (one of {', '.join(SOURCES)})")
    folders = run_folders(directory)
    ours = read_anomalies(directory) if source in ("auto", "anomalies") else []
    reference = _reference_anomaly_files(directory)
    if not folders and not ours and not reference and not _has_anomaly_dir(directory):
        raise NoMonitorOutput(f"{directory} holds no monitor output: no rank folder (<time>-rank<r>-<hash>) and no "
                              f"{ANOMALY_DIR} folder (give the MONITOR_OUTPUT_DIR of a monitored run)")
    if source == "auto":
        source = "anomalies" if ours else "csv" if folders else "reference" if reference else "anomalies"
    found: list = []
    described = ""
    if source == "anomalies":
        # with a golden given, its divergences are computed here (the live watch's, if any, would be twice)
        found = [a for a in ours if not (golden and a.kind == "divergence")]
        described = "the monitor's anomaly files"
    elif source == "reference":
        if not reference:
            raise NoMonitorOutput(f"{directory} holds no {ANOMALY_DIR}/rank<r>/{REFERENCE_ANOMALY_FILE}")
        found, described = read_reference_anomalies(reference), "the reference's anomaly.json"
    recompute = source == "csv"
    if recompute and not folders:
        raise NoMonitorOutput(f"{directory} holds no rank folder of CSVs to read")
    ranks: set = set(folders)
    framework = None
    if recompute or golden or each is not None or not found:
        computed, framework = _read_steps(directory, rules if recompute else (), golden, each)
        found += computed
        if recompute:
            described = f"read again from the CSVs with {_rules_text(rules)}"
        if golden:
            described += (" and " if described else "") + "compared with the golden run"
    elif folders:
        framework = _framework_of(directory)
    return analyse(found, described, ranks, framework or PYTORCH)


def _rules_text(rules) -> str:
    rules = getattr(rules, "rules", rules)
    parts = []
    for rule in rules or ():
        name, args = (rule.get("rule_name"), rule.get("args")) if isinstance(rule, dict) else rule
        args = dict(args or {})
        parts.append(name + (f"({', '.join(f'{k}={v}' for k, v in args.items())})" if args else ""))
    return ", ".join(parts) or "no rule"


def _read_steps(directory: str, rules, golden: str | None, each) -> tuple:
    """(anomalies, framework): every rank's steps read once, through the rules, the golden watch and `each`."""
    found: list = []
    framework = None
    for rank, steps in read_run(directory).items():
        detector = None
        watch = GoldenWatch(golden, rank) if golden else None
        for records in progress(steps, desc=f"rank {rank}"):
            if framework is None:
                framework = _framework(records)
            if rules and detector is None:
                detector = AnomalyDetector(rules, resolution=decimal_quantum(records))
            if detector is not None:
                found += detector.observe(records)
            if watch is not None:
                found += watch.check(records)
            if each is not None:
                each(records)
    return found, framework


def _framework(records: StepRecords) -> str | None:
    for dtype in records.dtype:
        if dtype:
            return PYTORCH if dtype.startswith("torch.") else MINDSPORE
    return None


def _framework_of(directory: str) -> str | None:
    """The framework of a run, from the dtypes of its first step."""
    for steps in read_run(directory).values():
        first = next(steps, None)
        if first is not None:
            return _framework(first)
    return None


def _has_anomaly_dir(directory: str) -> bool:
    return os.path.isdir(os.path.join(directory, ANOMALY_DIR)) or os.path.basename(directory) == ANOMALY_DIR


def _reference_anomaly_files(directory: str) -> list:
    base = directory if os.path.basename(directory) == ANOMALY_DIR else os.path.join(directory, ANOMALY_DIR)
    if re.fullmatch(r"rank\d+", os.path.basename(directory)):
        candidates = [directory]
    elif os.path.isdir(base):
        candidates = [os.path.join(base, name) for name in sorted(os.listdir(base)) if re.fullmatch(r"rank\d+", name)]
    else:
        candidates = []
    return [os.path.join(c, REFERENCE_ANOMALY_FILE) for c in candidates
            if os.path.isfile(os.path.join(c, REFERENCE_ANOMALY_FILE))]


_MESSAGE = re.compile(r"Rule (?P<rule>\w+) reports anomaly signal in \('(?P<tag>.*)', '(?P<op>\w+)'\) at step "
                      r"(?P<step>\d+)(?:, current value (?P<value>\S+?), history mean (?P<base>\S+?))?\.?$")
_TAG = re.compile(r"^(?P<vpp>\d+):(?P<name>.*?)(?::(?P<micro>\d+))?/rank(?P<rank>\d+)/(?P<group>\w+)$")


def read_reference_anomalies(paths: list) -> list:
    """The reference's anomaly.json entries as Anomalies (its rule AnomalyTurbulence flags rises: kind spike;
    AnomalyNan: nan). Entries that do not parse are skipped."""
    found = []
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                entries = json.load(handle)
        except (OSError, ValueError) as exc:
            raise MsprobeError(f"{path}: not the reference's anomaly file ({exc})") from None
        if not isinstance(entries, dict):
            continue
        for entry in entries.values():
            anomaly = _reference_anomaly(entry)
            if anomaly is not None:
                found.append(anomaly)
    return found


def _reference_anomaly(entry) -> Anomaly | None:
    if not isinstance(entry, dict):
        return None
    tag = _TAG.match(str(entry.get("tag_name", "")))
    message = _MESSAGE.search(str(entry.get("message", "")))
    if tag is None:
        return None
    group = REFERENCE_GROUPS.get(tag["group"], tag["group"])
    name = tag["name"]
    module = split_name(name)[0] if split_name(name)[1] else name.rpartition(".")[0]
    rule = message["rule"] if message else "AnomalyTurbulence"

    def number(text):
        try:
            return float(text)
        except (TypeError, ValueError):
            return math.nan
    try:
        return Anomaly(kind="nan" if rule == "AnomalyNan" else "spike", rank=int(entry.get("rank", tag["rank"])),
                       step=int(entry.get("step", 0)), micro_step=int(entry.get("micro_step", 0) or 0),
                       stage=stage_of(group), call=int(entry.get("call_id", 0) or 0), module=module, name=name,
                       group=group, op=message["op"] if message else "", value=number(message and message["value"]),
                       baseline=(number(message["base"]) if message and message["base"] else None), rule=rule,
                       message=str(entry.get("message", "")))
    except (TypeError, ValueError):
        return None
