"""The rounds of a triage, each a plain function from the previous round's findings to its own (so one can be rerun
or tested alone): statistics (dump both runs, compare, -da) -> tensors (the next dump of -da, per run, compared) ->
replay (the culprit API replayed on its dumped inputs against the CPU high-precision benchmark). They call the
Python API (msprobe/api.py) in process; only the user's training commands run as child processes (launch.py)."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field

from msprobe.errors import MsprobeError, UsageError
from msprobe.triage import evidence
from msprobe.triage.launch import execute, prepare

STATISTICS_LEVELS = ("L1", "mix")


@dataclass(frozen=True)
class Options:
    """One triage: the two commands (golden None: the target's command run twice), or existing statistics dumps."""

    target: str | None = None
    golden: str | None = None
    output_dir: str = "triage_out"
    step: int = 0
    level: str = "mix"
    framework: str = "auto"            # auto | pytorch | mindspore: which framework the collector hooks
    timeout: float | None = None       # seconds per run
    keep_dumps: bool = False
    stop: bool = True                  # stop each run after the chosen step
    target_dump: str | None = None     # -tp: an existing statistics dump (file, step or rank folder)
    golden_dump: str | None = None
    cwd: str | None = None             # where the commands run (default: the current directory)

    @property
    def same_command(self) -> bool:
        return self.golden is None and self.target is not None and self.target_dump is None

    @property
    def golden_command(self) -> str | None:
        return self.target if self.same_command else self.golden


class RunFailed(MsprobeError):
    """A run left no dump of the chosen step (it crashed before it, or never called the model): `runs` are the
    round's runs, `missing` those without a dump."""

    def __init__(self, message: str, runs: list = (), missing: list = ()):
        super().__init__(message)
        self.runs, self.missing = list(runs), list(missing)


@dataclass
class Statistics:
    """Round 1: both runs' statistics of the step, compared; -da's first divergence and culprit."""

    runs: list = field(default_factory=list)      # Run of each side that was started
    target_path: str = ""                          # what compare was given
    golden_path: str = ""
    differs: bool = False                           # some compared output differs
    first_divergence: str | None = None
    culprit: str | None = None                     # dump entry name, e.g. Functional.conv2d.1.forward
    golden_culprit: str | None = None              # its name in the golden dump (cross-framework)
    module: str | None = None
    rank: int | None = None
    culprit_result: str = ""                       # the culprit row's verdict (warning | error)
    culprit_item: str = ""
    relative_error: float = 0.0                    # the culprit's largest output relative error
    summary: str = ""                              # the compare's one-line summary
    analysis_lines: list = field(default_factory=list)
    next_dump: dict | None = None                  # -da's configurations: {"target": config, "golden": config}
    non_finite: str | None = None                  # first NaN/Inf-producing op of the target
    golden_non_finite: str | None = None
    stack: list = field(default_factory=list)
    frameworks: tuple = ("", "")
    compare_files: list = field(default_factory=list)
    commands: list = field(default_factory=list)   # to reproduce the round by hand


@dataclass
class Tensors:
    """Round 2: the culprit's (and its module's) real tensors of both runs, compared."""

    runs: list = field(default_factory=list)
    target_path: str = ""
    golden_path: str = ""
    rows: list = field(default_factory=list)      # the culprit's rows: name, cosine, max abs err, max rel err, result
    inputs_differ: bool | None = None              # some input of the culprit differs beyond 1e-6 of its size
    outputs_differ: bool | None = None
    skipped: str = ""                              # why the round did not run
    compare_files: list = field(default_factory=list)
    commands: list = field(default_factory=list)


@dataclass
class Replay:
    """Round 3: the culprit API replayed on its dumped inputs (target and golden) against the CPU benchmark."""

    target: dict | None = None      # {"status": pass|warning|error|SKIP, "message", "outputs": [{dtype, status, cosine,
    golden: dict | None = None      # max_abs_err}]}
    skipped: str = ""
    commands: list = field(default_factory=list)


# ----------------------------------------------------------------------------------------------------- round 1
def statistics(options: Options, progress=None) -> Statistics:
    """Round 1: dump both runs' statistics of the step (or take the given dumps), compare them, find the first
    divergence and the culprit (the compare's verdict, read through -da)."""
    found = Statistics()
    folder = os.path.join(options.output_dir, "round1_statistics")
    if options.target_dump is not None:
        if options.golden_dump is None:
            raise UsageError("-tp needs -gp (the golden statistics dump).")
        found.target_path, found.golden_path = options.target_dump, options.golden_dump
    else:
        config = {"task": "statistics", "level": options.level}
        found.runs = run_pair(options, folder, config, progress, "round 1")
        paths = _compared(found.runs, options.step)
        found.target_path, found.golden_path = paths
    _compare_statistics(found, options, folder)
    return found


def run_pair(options: Options, folder: str, config: dict | tuple, progress, label: str) -> list:
    """Both runs of a round, at the same time (each in its own process group); config is one collector
    configuration or (target's, golden's)."""
    configs = config if isinstance(config, tuple) else (config, config)
    runs = [prepare(side, command, os.path.join(folder, side), side_config, options.step, options.stop,
                    options.framework)
            for side, command, side_config in zip(("target", "golden"), (options.target, options.golden_command),
                                                  configs)]
    if progress:
        progress(f"{label}: running both commands (step {options.step})")
    return execute(runs, options.timeout, options.cwd)


def _compared(runs: list, step: int) -> tuple:
    target, golden = runs
    paths = evidence.compare_paths(target.dump_root, golden.dump_root, step)
    if paths is None:
        missing = [run for run in runs if not evidence.step_dumps(run.dump_root, step)]
        raise RunFailed("; ".join(run.no_dump_reason(step) for run in missing), runs, missing)
    return paths


def _compare_statistics(found: Statistics, options: Options, folder: str) -> None:
    from msprobe import api

    out = os.path.join(folder, "compare")
    mapping = _mapping(found.target_path, found.golden_path)
    result = api.compare(found.target_path, found.golden_path, **mapping)
    found.summary = str(result.summary)
    found.compare_files = result.write(out, "csv", html=True)
    analysis = api.diff_analyze(found.target_path, found.golden_path, **mapping)
    found.analysis_lines = list(analysis.lines)
    found.first_divergence = analysis.op_name
    found.differs = analysis.op_name is not None
    found.rank = analysis.rank
    culprit = analysis.culprit or {}
    if culprit.get("op_name"):
        found.culprit = culprit["op_name"]
        found.module = culprit.get("module")
        found.golden_culprit = culprit.get("golden_op_name")
        found.culprit_result = culprit.get("result", "")
        found.culprit_item = culprit.get("item", "")
        found.relative_error = float(culprit.get("max_output_relative_error") or 0.0)
        found.stack = [str(line) for line in culprit.get("stack_info") or []]
        found.rank = culprit.get("rank", found.rank)
    if analysis.next_dump is not None:
        found.next_dump = {"target": analysis.next_dump, "golden": analysis.next_dump_golden}
    target_file = evidence.dump_file(found.target_path, found.rank)
    golden_file = evidence.dump_file(found.golden_path, found.rank)
    target, golden = evidence.load_dump(target_file), evidence.load_dump(golden_file)
    found.frameworks = (target.get("framework", ""), golden.get("framework", ""))
    found.non_finite = evidence.first_non_finite(target)
    found.golden_non_finite = evidence.first_non_finite(golden)
    if found.culprit and not found.stack:
        found.stack = evidence.stack_of(target_file, found.culprit)
    found.commands = _commands(options, found.runs, found.target_path, found.golden_path, out)


def _mapping(target_path: str, golden_path: str) -> dict:
    """A MindSpore run against a PyTorch one is compared with the built-in layer mapping (docs/cross_framework.md);
    two runs of one framework by name."""
    frameworks = {evidence.load_dump(evidence.dump_file(path, None)).get("framework") for path in
                  (target_path, golden_path)}
    return {"layer_mapping": True} if len(frameworks) > 1 else {}


def _commands(options: Options, runs: list, target_path: str, golden_path: str, out: str, kept: bool = True) -> list:
    """The round by hand: each run as the triage ran it (launch.Run.by_hand), then the compare: of the dumps
    compared when they are kept, else of the step folders the runs by hand write again (one process folder each)."""
    lines = [run.by_hand() for run in runs]
    if not kept:
        target_path, golden_path = (os.path.dirname(os.path.dirname(path)) if os.path.isfile(path) else path
                                    for path in (target_path, golden_path))
    mapping = " -lm" if _mapping(target_path, golden_path) else ""
    lines.append(f"msprobe compare -tp {shlex.quote(target_path)} -gp {shlex.quote(golden_path)} -o "
                 f"{shlex.quote(out)} -da{mapping}")
    return lines


# ----------------------------------------------------------------------------------------------------- round 2
def tensors(options: Options, first: Statistics, progress=None) -> Tensors:
    """Round 2: both runs again with -da's next-dump configurations (the culprit and its module, task tensor),
    each into its own folder, and the compare of their tensors."""
    found = Tensors()
    if first.culprit is None or first.next_dump is None:
        found.skipped = "no culprit to dump" if first.culprit is None else "-da wrote no next-dump configuration"
        return found
    if options.target is None:
        found.skipped = "no training commands (give --target and --golden with -tp/-gp to dump the tensors)"
        return found
    folder = os.path.join(options.output_dir, "round2_tensors")
    configs = tuple(_for_this_run(first.next_dump[side]) for side in ("target", "golden"))
    found.runs = run_pair(options, folder, configs, progress, "round 2")
    try:
        found.target_path, found.golden_path = _compared(found.runs, options.step)
    except RunFailed as exc:
        found.skipped = str(exc)
        return found
    from msprobe import api

    out = os.path.join(folder, "compare")
    result = api.compare(found.target_path, found.golden_path, **_mapping(found.target_path, found.golden_path))
    found.compare_files = result.write(out, "csv", html=True)
    call = evidence.call_of(first.culprit)
    input_errors, output_errors = [], []
    for row in result.rows:
        name = str(row.get("NPU Name", ""))
        if not name.startswith(call + ".forward."):
            continue
        found.rows.append({key: row.get(key) for key in ("NPU Name", "NPU Tensor Dtype", "Bench Tensor Dtype",
                                                         "Cosine", "MaxAbsErr", "MaxRelativeErr", "Result")
                           if key in row})
        error = _number(row.get("MaxAbsErr"))
        size = max(abs(_number(row.get("NPU max")) or 0.0), abs(_number(row.get("Bench max")) or 0.0), 1.0)
        if error is not None:
            (input_errors if ".input" in name else output_errors if ".output" in name else []).append(error / size)
    found.inputs_differ = any(e > 1e-6 for e in input_errors) if input_errors else None
    found.outputs_differ = any(e > 1e-6 for e in output_errors) if output_errors else None
    found.commands = _commands(options, found.runs, found.target_path, found.golden_path, out, options.keep_dumps)
    return found


def _for_this_run(config: dict) -> dict:
    """-da's configuration with the parts a triage sets itself left out (dump_path and step: launch.prepare)."""
    return {key: value for key, value in config.items() if key not in ("dump_path", "step")}


def _number(value):
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number else None


# ----------------------------------------------------------------------------------------------------- round 3
def replay(options: Options, first: Statistics, second: Tensors) -> Replay:
    """Round 3: the culprit API replayed on the target's dumped inputs, and on the golden's, against the CPU
    high-precision benchmark (acc_check's replayer)."""
    found = Replay()
    if first.culprit is None:
        found.skipped = "no culprit"
        return found
    if not second.target_path:
        found.skipped = "no tensor dump of the culprit (round 2 " + (second.skipped or "did not run") + ")"
        return found
    name = evidence.call_of(first.culprit)
    golden_name = evidence.call_of(first.golden_culprit or first.culprit)
    found.target = _replay_one(evidence.dump_file(second.target_path, first.rank), name)
    found.golden = _replay_one(evidence.dump_file(second.golden_path, first.rank), golden_name)
    found.commands = [f"msprobe acc_check -api_info {shlex.quote(evidence.dump_file(path, first.rank))} -o "
                      f"{shlex.quote(os.path.join(options.output_dir, 'round3_replay', side))}"
                      for side, path in (("target", second.target_path), ("golden", second.golden_path))]
    return found


def _replay_one(dump_path: str, name: str) -> dict:
    from msprobe.acc_check.check import open_dump, tensor_directory

    try:
        dump = open_dump(dump_path)
        if name not in dump.names:
            recorded = f"{name}.forward" in dump.content["data"]
            return {"status": "SKIP", "outputs": [],
                    "message": f"acc_check does not replay {name}" if recorded else f"{name} is not in the tensor dump"}
        if not dump.backend.supported(name):
            return {"status": "SKIP", "message": f"acc_check does not replay {name}", "outputs": []}
        device = dump.backend.prepare(dump.options)
        tensor_dir = tensor_directory(dump.path, dump.content) if dump.real_data else None
        replayer = dump.backend.replayer(dump.content["data"], tensor_dir, device, dump.options)
        result = replayer.run(name, dump.names.index(name))
    except MsprobeError as exc:          # no API acc_check replays, no framework to replay with, ...
        return {"status": "SKIP", "message": str(exc), "outputs": []}
    outputs = [{"dtype": output.device_dtype, "benchmark_dtype": output.bench_dtype, "status": output.status,
                "cosine": output.metrics.get("余弦相似度"), "max_abs_err": output.metrics.get("最大绝对误差"),
                "message": output.message} for output in result.forward]
    return {"status": result.forward_status, "message": result.message, "outputs": outputs,
            "benchmark": dump.backend.benchmark}
