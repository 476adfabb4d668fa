"""The whole triage: round 1 (statistics) -> round 2 (tensors) -> round 3 (replay) -> the findings, written as one
HTML page and triage.json in the triage's own folder under the output folder (and copied to the output folder as
the latest answer). `msprobe triage` and `msprobe.triage(...)` both call triage()."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import asdict, dataclass, field

from msprobe.errors import UsageError
from msprobe.io import remove_tree, write_text
from msprobe.triage import evidence, rounds
from msprobe.triage.classify import NON_FINITE, classify
from msprobe.triage.launch import Interrupted, stop_signals

AGREE, CULPRIT, DIFFER = "agree", "culprit", "differ"
FAILED, INTERRUPTED = "failed", "interrupted"     # a run failed before its step was recorded; the triage was stopped
FRAMEWORKS = ("auto", "pytorch", "mindspore")


@dataclass
class Findings:
    """What a triage found; `to_dict()` is what `--json` prints and triage.json holds."""

    outcome: str                                  # agree | culprit | differ (differences no op makes its own) |
    #                                               failed (a run failed before its step) | interrupted
    culprit: str | None = None                    # dump entry, e.g. Functional.conv2d.1.forward
    module: str | None = None                     # its enclosing module/cell entry
    category: str | None = None                   # dtype/cast | argument | kernel precision | nondeterminism |
    #                                               framework convention | nan/inf
    reason: str = ""                              # the evidence behind the category, one sentence
    advice: str = ""
    step: int = 0
    rank: int | None = None
    source: str = ""                              # the user's line that called the culprit
    stack: list = field(default_factory=list)
    first_divergence: str | None = None
    failures: list = field(default_factory=list)  # crashes, timeouts, NaN/Inf, collector errors: findings too
    rounds: list = field(default_factory=list)    # per round: name, evidence lines, commands, files
    output_dir: str = ""                          # this triage's own folder under -o
    report: str = ""                              # the HTML page

    @property
    def exit_code(self) -> int:
        """1 when a culprit is named or a run failed (a crash, a timeout, NaN/Inf: findings too), else 0."""
        return 1 if self.outcome == CULPRIT or self.failures else 0

    def to_dict(self) -> dict:
        return asdict(self)

    def lines(self) -> list:
        """The console summary."""
        where = f"step {self.step}" + (f", rank {self.rank}" if self.rank is not None else "")
        if self.outcome == AGREE:
            head = [f"msprobe triage: the runs agree at {where}."]
        elif self.outcome == FAILED:
            head = [f"msprobe triage: nothing compared at {where}: a run failed before the step was recorded."]
        elif self.outcome == INTERRUPTED:
            head = [f"msprobe triage: interrupted at {where}; what finished is under {self.output_dir}."]
        elif self.outcome == DIFFER:
            head = [f"msprobe triage: the runs differ at {where} (first at {self.first_divergence}), but no op makes "
                    "an error or warning of its own: rounding carried along, no culprit."]
        else:
            head = [f"msprobe triage: culprit {self.culprit} at {where}",
                    f"  module:   {self.module or '-'}",
                    f"  source:   {self.source or '-'}",
                    f"  cause:    {self.category} - {self.reason}",
                    f"  advice:   {self.advice}"]
            if self.first_divergence and self.first_divergence != self.culprit:
                head.insert(1, f"  first divergence: {self.first_divergence}")
        body = [f"  failure:  {failure}" for failure in self.failures]
        for found in self.rounds:
            body.append(f"  {found['name']}: " + (found["evidence"][0] if found["evidence"] else ""))
        body.append(f"  report:   {self.report}")
        return head + body

    def __str__(self) -> str:
        return "\n".join(self.lines())


def triage(target: str | None = None, golden: str | None = None, *, output_dir: str | os.PathLike = "triage_out",
           step: int = 0, level: str = "mix", framework: str = "auto", timeout: float | None = None,
           keep_dumps: bool = False, stop: bool = True, target_dump: str | None = None,
           golden_dump: str | None = None, cwd: str | None = None, progress=None) -> Findings:
    """Run the triage loop on two training commands (or the target's command twice, or existing statistics dumps
    with target_dump/golden_dump) and return its findings; everything is written in a folder of its own under
    output_dir (Findings.output_dir). Ctrl-C, SIGTERM and SIGHUP end the runs and raise launch.Interrupted after
    the partial findings are written."""
    options = _options(target, golden, output_dir, step, level, framework, timeout, keep_dumps, stop, target_dump,
                       golden_dump, cwd)
    top = options.output_dir
    os.makedirs(top, exist_ok=True)
    options = dataclasses.replace(options, output_dir=own_folder(top))
    findings = Findings(AGREE, step=options.step, output_dir=options.output_dir)
    with stop_signals():
        try:
            _rounds(findings, options, progress or (lambda text: None))
        except Interrupted as exc:
            findings.outcome = INTERRUPTED
            findings.failures.append(f"the triage was stopped ({exc.name}) during {_stage(findings)}: the runs' "
                                     "process groups were ended; what finished is readable here")
            if exc.runs:
                findings.rounds.append({"name": f"{_stage(findings)} (interrupted)", "evidence": [],
                                        "runs": _runs_record(exc.runs), "commands": [], "files": []})
            _finish(findings, options, top)
            exc.folder = options.output_dir
            raise
        _finish(findings, options, top)
    return findings


def own_folder(output_dir: str) -> str:
    """A new folder for one triage under output_dir, made by it (never one another triage, earlier or running at
    the same time, uses): triage_<YYYYmmddHHMMSS>, or with _2, _3, ... when that second is taken."""
    stamp = time.strftime("%Y%m%d%H%M%S")
    for number in range(1, 10000):
        path = os.path.join(output_dir, f"triage_{stamp}" + (f"_{number}" if number > 1 else ""))
        try:
            os.mkdir(path)
        except FileExistsError:
            continue
        return path
    raise UsageError(f"-o {output_dir} holds 10000 triages of this second; choose another folder.")


_STAGES = ("round 1 (statistics)", "round 2 (tensors)", "round 3 (replay)", "the findings")


def _stage(findings: Findings) -> str:
    """What the triage was doing: the round after those recorded."""
    return _STAGES[min(len(findings.rounds), len(_STAGES) - 1)]


def _rounds(findings: Findings, options: rounds.Options, say) -> None:
    try:
        first = rounds.statistics(options, say)
    except rounds.RunFailed as exc:
        if not any(run.crashed or run.timed_out for run in exc.runs):
            raise                   # a run that ended normally without the step: the command cannot be triaged
        findings.outcome = FAILED
        findings.failures += [run.no_dump_reason(options.step) for run in exc.missing]
        missing = " and ".join(f"the {run.side} run" for run in exc.missing)
        findings.rounds.append({"name": "round 1 (statistics)",
                                "evidence": [f"no comparison: {missing} left no dump of step {options.step}"],
                                "runs": _runs_record(exc.runs), "commands": [run.by_hand() for run in exc.runs],
                                "files": []})
        return
    findings.rank, findings.first_divergence = first.rank, first.first_divergence
    findings.failures += _run_failures(first.runs)
    findings.rounds.append(_round1_record(options, first))
    culprit = first.culprit
    non_finite = first.non_finite if first.non_finite and not first.golden_non_finite else None
    if non_finite:
        findings.failures.append(f"the target's outputs turn NaN/Inf first at {non_finite}")
        culprit = culprit or non_finite
    if first.differs and culprit is None:
        findings.outcome = DIFFER
    if culprit is not None:
        say("round 2: dumping the culprit's tensors")
        second = rounds.tensors(options, first)
        findings.failures += _run_failures(second.runs)
        findings.rounds.append(_round2_record(second))
        say("round 3: replaying the culprit")
        third = rounds.replay(options, first, second)
        findings.rounds.append(_round3_record(third))
        _conclude(findings, options, first, second, third, culprit, non_finite)


def _finish(findings: Findings, options: rounds.Options, top: str) -> None:
    """The page and triage.json (in the triage's folder, copied to -o as the latest answer), then the clean-up."""
    _write(findings, top)
    if not options.keep_dumps:
        _clean(options.output_dir)


def _options(target, golden, output_dir, step, level, framework, timeout, keep_dumps, stop, target_dump,
             golden_dump, cwd) -> rounds.Options:
    if target is None and target_dump is None:
        raise UsageError("give --target CMD (with --golden CMD, or alone to run it twice), or -tp/-gp dumps.")
    if (target_dump is None) != (golden_dump is None):
        raise UsageError("-tp and -gp go together (the two statistics dumps to start from).")
    if target_dump is None and golden is not None and target is None:
        raise UsageError("--golden needs --target.")
    if target_dump is not None and golden is None and target is not None:
        raise UsageError("with -tp/-gp, give both --target and --golden (or neither).")
    for name, command in (("--target", target), ("--golden", golden)):
        if command is not None and (not isinstance(command, str) or not command.strip()):
            raise UsageError(f"{name} must be a non-empty command.")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise UsageError(f"step must be a non-negative integer, got {step!r}.")
    if level not in rounds.STATISTICS_LEVELS:
        raise UsageError(f"level must be one of {', '.join(rounds.STATISTICS_LEVELS)} (the culprit is an API), "
                         f"got {level!r}.")
    if framework not in FRAMEWORKS:
        raise UsageError(f"framework must be one of {', '.join(FRAMEWORKS)}, got {framework!r}.")
    if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
        raise UsageError(f"timeout must be a positive number of seconds, got {timeout!r}.")
    if not isinstance(output_dir, (str, os.PathLike)) or not os.fspath(output_dir).strip():
        raise UsageError("output_dir must be a path.")
    out = os.path.abspath(os.fspath(output_dir))
    if os.path.exists(out) and not os.path.isdir(out):
        raise UsageError(f"-o {out} exists and is not a folder.")
    return rounds.Options(target, golden, out, step, level, framework, timeout, keep_dumps, stop,
                          target_dump, golden_dump, cwd)


def _conclude(findings: Findings, options, first, second, third, culprit: str, non_finite) -> None:
    findings.outcome = CULPRIT
    findings.culprit = culprit
    findings.module = first.module if culprit == first.culprit else None
    target_file = evidence.dump_file(first.target_path, first.rank)
    golden_file = evidence.dump_file(first.golden_path, first.rank)
    target_data = evidence.load_dump(target_file).get("data") or {}
    golden_data = evidence.load_dump(golden_file).get("data") or {}
    if findings.module is None:
        construct = os.path.join(os.path.dirname(target_file), "construct.json")
        if os.path.isfile(construct):
            parent = evidence.load_dump(construct).get(culprit)
            findings.module = parent if isinstance(parent, str) else None
    golden_name = evidence.forward_of(first.golden_culprit or culprit)
    cause = classify(options.same_command, target_data.get(evidence.forward_of(culprit)),
                     golden_data.get(golden_name), first.frameworks, third.target, second.inputs_differ,
                     non_finite=culprit == non_finite, culprit=culprit)
    findings.category, findings.reason, findings.advice = cause.category, cause.reason, cause.advice
    findings.stack = first.stack if culprit == first.culprit else evidence.stack_of(target_file, culprit)
    findings.source = evidence.user_line(findings.stack)
    if cause.category == NON_FINITE and first.culprit and first.culprit != culprit:
        findings.failures.append(f"the compare's culprit is {first.culprit}")


def _run_failures(runs: list) -> list:
    failures = []
    for run in runs:
        if run.timed_out:
            failures.append(f"the {run.side} run timed out after {run.seconds:.0f} s: stopped, its partial dump used")
        elif run.crashed and not run.stopped:
            tail = run.tail(3).strip().replace("\n", " | ")
            failures.append(f"the {run.side} run crashed (exit status {run.returncode}); its step was dumped as far as "
                            f"it went; output ends: {tail}")
        failures += [f"the {run.side} run's collector: {error}" for error in run.errors]
    return failures


def _runs_record(runs: list) -> list:
    return [{"side": run.side, "command": run.command, "exit_status": run.returncode, "seconds": round(run.seconds, 2),
             "stopped_after_step": run.stopped, "timed_out": run.timed_out, "log": run.log} for run in runs]


def _round1_record(options, first) -> dict:
    if not first.differs:
        headline = ("nothing differs: the same command is deterministic at this step" if options.same_command
                    else "nothing differs: every compared output is identical")
    elif first.culprit:
        error = f", output relative error {first.relative_error:.3g}" if first.relative_error else ""
        headline = f"culprit {first.culprit} ({first.culprit_result}{error}); {first.summary}"
    else:
        headline = f"the runs differ (first at {first.first_divergence}) but no op makes its own error; {first.summary}"
    return {"name": "round 1 (statistics)", "evidence": [headline, *first.analysis_lines], "runs": _runs_record(first.runs),
            "commands": first.commands, "files": first.compare_files}


def _round2_record(second) -> dict:
    if second.skipped:
        return {"name": "round 2 (tensors)", "evidence": [f"skipped: {second.skipped}"], "runs": _runs_record(second.runs),
                "commands": [], "files": []}
    rows = [f"{row.get('NPU Name')}: cosine {row.get('Cosine')}, max abs err {row.get('MaxAbsErr')}, "
            f"{row.get('Result', '')}" for row in second.rows]
    inputs = {None: "its inputs were not compared", True: "its inputs already differ",
              False: "its inputs are identical"}[second.inputs_differ]
    outputs = {None: "", True: ", its outputs differ", False: ", its outputs are identical"}[second.outputs_differ]
    return {"name": "round 2 (tensors)", "evidence": [inputs + outputs, *rows], "runs": _runs_record(second.runs),
            "commands": second.commands, "files": second.compare_files}


def _round3_record(third) -> dict:
    if third.skipped:
        return {"name": "round 3 (replay)", "evidence": [f"skipped: {third.skipped}"], "commands": [], "files": []}
    lines = []
    for side, replayed in (("target", third.target), ("golden", third.golden)):
        if replayed is None:
            continue
        detail = "; ".join(f"{o['dtype']} vs {o['benchmark_dtype']} benchmark: cosine {o['cosine']}, max abs err "
                           f"{o['max_abs_err']}" for o in replayed.get("outputs", []) if o.get("cosine") is not None)
        lines.append(f"on the {side}'s inputs: {replayed['status']}" + (f" ({detail})" if detail else "")
                     + (f" - {replayed['message']}" if replayed.get("message") else ""))
    verdicts = {(third.target or {}).get("status"), (third.golden or {}).get("status")}
    if (third.target or {}).get("status") in ("error", "warning"):
        lines.insert(0, "the op computes wrongly (against the CPU benchmark) on the target's inputs")
    elif "pass" in verdicts:
        lines.insert(0, "the op computes correctly on its own inputs: the difference comes from its inputs, its "
                        "dtype or its arguments")
    return {"name": "round 3 (replay)", "evidence": lines, "commands": third.commands, "files": []}


def _write(findings: Findings, top: str) -> str:
    from msprobe.triage.page import render

    out = findings.output_dir
    findings.report = os.path.join(out, "triage.html")
    text = json.dumps(findings.to_dict(), indent=2, ensure_ascii=False, default=str) + "\n"
    write_text(os.path.join(out, "triage.json"), text)
    write_text(findings.report, render(findings))
    # the latest answer at the top of -o (its links point into this triage's folder)
    write_text(os.path.join(top, "triage.json"), text)
    write_text(os.path.join(top, "triage.html"), render(dataclasses.replace(findings, output_dir=top)))
    return findings.report


def _clean(folder: str) -> None:
    """Round 2's tensor dumps go (without following a symbolic link: nothing outside the triage's folder is ever
    removed); round 1's statistics dumps (what its compare command reads), the logs, configurations, compare
    tables and pages stay."""
    for side in ("target", "golden"):
        remove_tree(folder, os.path.join("round2_tensors", side, "dump"))
