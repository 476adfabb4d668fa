"""One run of a user's training command with the collector injected (inject.py): the plan and the collector
configuration written under the triage's own folder, the command started in a process group of its own, its
output kept in a log file, a timeout, Ctrl-C, SIGTERM or SIGHUP ending the whole group (SIGTERM first: the
collector writes the step it was recording, marked incomplete), and what the run left: its exit status, its dump,
its status files, the end of its log, and why it left no dump of the step."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field

from msprobe.collect.config import FORCED_CONFIG, TRIAGE_PLAN
from msprobe.io import write_text

SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "site")
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GRACE_SECONDS = 10.0          # after SIGTERM, before SIGKILL
TAIL_BYTES = 64 * 1024        # at most this much of a log's end is read to quote its last lines
STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")      # end the runs' groups, then the triage


class Interrupted(KeyboardInterrupt):
    """The triage was told to stop (Ctrl-C, SIGTERM, SIGHUP): the runs' groups were ended. `runs` are those of the
    round that was running (their logs and partial dumps stay readable)."""

    def __init__(self, signum: int = signal.SIGINT, runs: list | None = None):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.runs = runs or []
        self.folder = ""            # the triage's folder, once its partial answer is written (loop.py)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


@dataclass
class Run:
    """What one run of a training command left."""

    side: str                   # target | golden
    command: str
    folder: str                 # <triage folder>/<round>/<side>: dump/, log, plan, config, status
    cwd: str = ""               # where the command ran
    returncode: int | None = None
    timed_out: bool = False
    interrupted: bool = False
    seconds: float = 0.0
    statuses: list = field(default_factory=list)   # each process's status_<pid>.json

    @property
    def dump_root(self) -> str:
        return os.path.join(self.folder, "dump")

    @property
    def log(self) -> str:
        return os.path.join(self.folder, "run.log")

    @property
    def config_path(self) -> str:
        return os.path.join(self.folder, "config.json")

    @property
    def stopped(self) -> bool:
        """The triage ended the run after the chosen step (not a crash, not the end of the training)."""
        return any(status.get("stopped") for status in self.statuses)

    @property
    def crashed(self) -> bool:
        return not self.timed_out and not self.interrupted and self.returncode not in (0, None)

    @property
    def errors(self) -> list:
        return [error for status in self.statuses for error in status.get("errors", [])]

    def tail(self, lines: int = 15) -> str:
        """The last `lines` lines of the run's output (for a crash), read from the end of the log: at most
        TAIL_BYTES of it, whatever the log's size."""
        return log_tail(self.log, lines)

    def no_dump_reason(self, step: int) -> str:
        """Why the run left no dump of `step`: what it did, its collector's errors, the end of its output."""
        statuses = self.statuses
        frameworks = sorted({name for status in statuses for name in status.get("imported") or ()})
        steps = max((int(status.get("steps_done") or 0) for status in statuses), default=0)
        if self.timed_out:
            why = f"timed out before step {step} was recorded"
        elif self.crashed:
            why = f"exited with status {self.returncode} before step {step} was recorded"
        elif not statuses:
            why = ("never imported torch or mindspore in a Python process the collector could enter (is the command "
                   "a Python training run?)")
        elif not any(status.get("recorded") for status in statuses):
            imported = " and ".join(IMPORT_NAMES.get(name, name) for name in frameworks) or "torch or mindspore"
            if steps < step:
                why = (f"imported {imported} but ended after {steps} optimizer step{'' if steps == 1 else 's'}, "
                       f"before step {step}")
            else:
                why = f"imported {imported} but no model was called in step {step}" + (
                    " (in PyNative mode a model called only inside an @ms.jit function runs unseen in its graph: "
                    "triage the step without @ms.jit, or in GRAPH_MODE)"
                    if "mindspore" in frameworks else " (no torch.nn.Module was called)")
        elif os.path.isdir(os.path.join(self.dump_root, "graph")):
            why = (f"recorded step {step} in two halves, graph/ and pynative/ (an @ms.jit cell inside the model), which "
                   f"the triage does not compare: compare them with msprobe compare -tp {self.dump_root} -gp <the "
                   "other run's dump>")
        else:
            why = "recorded nothing"
        errors = "; ".join(self.errors)
        tail = self.tail(5).strip().replace("\n", " | ")
        return (f"the {self.side} run ({self.command}) {why}" + (f"; collector: {errors}" if errors else "")
                + (f"; its output ends: {tail}" if tail else "") + f" (log: {self.log})")

    def by_hand(self) -> str:
        """The shell command that runs this run again as the triage ran it: in its folder, with the triage's
        injection, plan and collector configuration (it writes the same dump into the same dump folder)."""
        return (f"(cd {shlex.quote(self.cwd or os.getcwd())} && "
                f"{TRIAGE_PLAN}={shlex.quote(os.path.join(os.path.abspath(self.folder), 'plan.json'))} "
                f"{FORCED_CONFIG}={shlex.quote(os.path.abspath(self.config_path))} "
                f"{ROOT_VARIABLE}={shlex.quote(PACKAGE_ROOT)} "
                f"PYTHONPATH={shlex.quote(SITE_DIR)}${{PYTHONPATH:+:$PYTHONPATH}} {self.command})")


IMPORT_NAMES = {"pytorch": "torch", "mindspore": "mindspore"}
ROOT_VARIABLE = "MSPROBE_TRIAGE_ROOT"


def log_tail(path: str, lines: int) -> str:
    """The last `lines` lines of a text file, from at most its last TAIL_BYTES (a line longer than that is cut at
    its start)."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - TAIL_BYTES))
            data = handle.read(TAIL_BYTES)
    except OSError:
        return ""
    return "".join(data.decode("utf-8", errors="replace").splitlines(keepends=True)[-lines:])


def environment(plan_path: str, config_path: str) -> dict:
    """The child's environment: our sitecustomize first on PYTHONPATH, the plan, the forced collector config."""
    env = dict(os.environ)
    paths = [SITE_DIR] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env[TRIAGE_PLAN] = plan_path
    env[FORCED_CONFIG] = config_path
    env[ROOT_VARIABLE] = PACKAGE_ROOT
    return env


def prepare(side: str, command: str, folder: str, config: dict, step: int, stop: bool, framework: str) -> Run:
    """The run's folder with its collector configuration (dump_path its own dump/) and plan."""
    run = Run(side, command, folder)
    os.makedirs(os.path.join(folder, "status"), exist_ok=True)
    config = dict(config, dump_path=run.dump_root, step=[step])
    write_text(run.config_path, json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    plan = {"config": run.config_path, "step": step, "stop": stop, "framework": framework,
            "status_dir": os.path.join(folder, "status")}
    write_text(os.path.join(folder, "plan.json"), json.dumps(plan, indent=2) + "\n")
    return run


def execute(runs: list, timeout: float | None, cwd: str | None = None) -> list:
    """Run the commands (each through the shell, as typed, in a process group of its own) at the same time and
    wait for all; a run past its timeout has its group ended. Ctrl-C, SIGTERM or SIGHUP (stop_signals()) end every
    group, then raise Interrupted with the runs (what finished stays readable under the triage's folder)."""
    started = []
    folder = os.path.abspath(cwd) if cwd else os.getcwd()
    try:
        for run in runs:
            run.cwd = folder
            env = environment(os.path.join(run.folder, "plan.json"), run.config_path)
            log = open(run.log, "wb")       # noqa: SIM115 - closed below, once the run has ended
            try:
                with _signals_held():       # a stop signal during the fork is raised once the child is known
                    process = subprocess.Popen(run.command, shell=True, cwd=folder, env=env, stdout=log,
                                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                               start_new_session=True)
                    started.append((run, process, log, time.monotonic()))
            except BaseException:
                if not started or started[-1][0] is not run:
                    log.close()
                raise
        pending = list(started)
        while pending:
            for item in list(pending):
                run, process, log, start = item
                code = process.poll()
                if code is None and timeout is not None and time.monotonic() - start > timeout:
                    run.timed_out = True
                    code = _end_group(process)
                if code is not None or run.timed_out:
                    run.returncode = code
                    run.seconds = time.monotonic() - start
                    pending.remove(item)
            if pending:
                time.sleep(0.05)
    except KeyboardInterrupt as exc:            # Ctrl-C, or Interrupted by SIGTERM/SIGHUP
        for run, process, _log, start in started:
            if process.poll() is None or _group_alive(process.pid):
                run.interrupted = True
                run.returncode = _end_group(process)
                run.seconds = time.monotonic() - start
        raise Interrupted(getattr(exc, "signum", signal.SIGINT), runs) from None
    finally:
        for run, _process, log, _start in started:
            log.close()
            run.statuses = read_statuses(run.folder)
    return runs


# ------------------------------------------------------------------ stop signals
_HELD: list = []            # depth of _signals_held() sections
_NOTED: list = []           # a stop signal that arrived inside one


def _on_stop_signal(signum, _frame) -> None:
    if _HELD:
        _NOTED.append(signum)
        return
    raise Interrupted(signum)


@contextlib.contextmanager
def _signals_held():
    _HELD.append(True)
    try:
        yield
    finally:
        _HELD.pop()
    if not _HELD and _NOTED:
        signum = _NOTED[0]
        _NOTED.clear()
        raise Interrupted(signum)


@contextlib.contextmanager
def stop_signals():
    """While the triage runs (from the main thread): Ctrl-C, SIGTERM and SIGHUP raise Interrupted, which ends the
    runs' process groups (execute) and leaves the partial result readable (loop.py); the handlers in place before
    are put back after. A signal that was ignored (nohup) stays ignored."""
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for name in STOP_SIGNALS:
            signum = getattr(signal, name, None)
            if signum is None or signal.getsignal(signum) == signal.SIG_IGN:
                continue
            previous[signum] = signal.signal(signum, _on_stop_signal)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def _end_group(process: subprocess.Popen) -> int | None:
    """SIGTERM to the run's process group (the collector writes the step it records), SIGKILL to what is left after
    the grace. Waits for the whole group, not only the shell: the training process may still be writing its step
    when the shell has gone."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)
        deadline = time.monotonic() + GRACE_SECONDS
        try:
            while time.monotonic() < deadline:
                process.poll()
                if not _group_alive(process.pid):
                    return process.wait()
                time.sleep(0.05)
        except KeyboardInterrupt:          # a second Ctrl-C: no more grace
            continue
    return process.poll()


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_statuses(folder: str) -> list:
    statuses = []
    for path in sorted(glob.glob(os.path.join(folder, "status", "status_*.json"))):
        with contextlib.suppress(OSError, ValueError):
            with open(path, encoding="utf-8") as handle:
                statuses.append(json.load(handle))
    return statuses

