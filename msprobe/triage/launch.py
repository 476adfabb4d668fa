"""One run of a user's training command with the collector injected (inject.py): the plan and the collector
configuration written under the triage's output folder, the command started in a process group of its own, its
output kept in a log file, a timeout or Ctrl-C ending the whole group (SIGTERM first: the collector writes the
step it was recording, marked incomplete), and what the run left: its exit status, its dump, its status files."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field

from msprobe.collect.config import FORCED_CONFIG
from msprobe.io import write_text
from msprobe.triage.inject import PLAN_VARIABLE

SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "site")
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GRACE_SECONDS = 10.0          # after SIGTERM, before SIGKILL


@dataclass
class Run:
    """What one run of a training command left."""

    side: str                   # target | golden
    command: str
    folder: str                 # <-o>/<round>/<side>: dump/, log, plan, config, status
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
        """The end of the run's output (for a crash)."""
        try:
            with open(self.log, encoding="utf-8", errors="replace") as handle:
                return "".join(handle.readlines()[-lines:])
        except OSError:
            return ""


def environment(plan_path: str, config_path: str) -> dict:
    """The child's environment: our sitecustomize first on PYTHONPATH, the plan, the forced collector config."""
    env = dict(os.environ)
    paths = [SITE_DIR] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env[PLAN_VARIABLE] = plan_path
    env[FORCED_CONFIG] = config_path
    env["MSPROBE_TRIAGE_ROOT"] = PACKAGE_ROOT
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
    wait for all; a run past its timeout has its group ended. Ctrl-C ends every group, then is raised again (what
    finished stays readable under the output folder)."""
    started = []
    try:
        for run in runs:
            env = environment(os.path.join(run.folder, "plan.json"), run.config_path)
            log = open(run.log, "wb")       # noqa: SIM115 - closed below, once the run has ended
            try:
                process = subprocess.Popen(run.command, shell=True, cwd=cwd, env=env, stdout=log,
                                           stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
            except BaseException:
                log.close()
                raise
            started.append((run, process, log, time.monotonic()))
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
    except KeyboardInterrupt:
        for run, process, _log, start in started:
            if process.poll() is None:
                run.interrupted = True
                run.returncode = _end_group(process)
                run.seconds = time.monotonic() - start
        raise
    finally:
        for run, _process, log, _start in started:
            log.close()
            run.statuses = read_statuses(run.folder)
    return runs


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

