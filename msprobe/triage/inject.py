"""The collector inside the user's training processes, without a line of theirs changed (docs/triage.md).

site/sitecustomize.py calls arm() in every Python process of the training command when MSPROBE_TRIAGE_PLAN names
a plan (a JSON file the triage writes). arm() waits for torch or mindspore to be imported, then:

* wraps `nn.Module.__call__` / `nn.Cell.__call__`: the first top-level call of a module (one not made inside
  another module's call) in the chosen step starts our PrecisionDebugger on that module, the model;
* marks the end of a step when an optimizer step returns (torch: around the hooked `Optimizer.step`, after every
  optimizer hook; MindSpore: when an `nn.Optimizer` cell's call returns, or when the outermost cell around it
  returns, for `TrainOneStepCell`): the step's files are written, and with `stop` the process leaves there
  (SystemExit(0)), so a triage costs one step of each run;
* a PrecisionDebugger the user makes takes the triage's configuration (MSPROBE_DUMP_CONFIG, read by
  collect/config.py): ours then stands aside, and the user's start/stop/step mark the steps.

Nothing here changes a number: the wrappers only call through, and the collectors are bit-identical. Nothing here
raises into the training except the SystemExit that ends a stopped run; a failure is written once to stderr and
to the status file. Each process writes status_<pid>.json in the plan's status folder: what it detected, whether
it stopped the run, and any error.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import os
import sys
import threading

PLAN_VARIABLE = "MSPROBE_TRIAGE_PLAN"

_armed: list = []


def arm(plan_path: str) -> None:
    """Read the plan and install the import hook (once per process)."""
    if _armed:
        return
    with open(plan_path, encoding="utf-8") as handle:
        plan = json.load(handle)
    session = Session(plan)
    _armed.append(session)
    wanted = {"pytorch": ("torch",), "mindspore": ("mindspore",)}.get(plan.get("framework"), ("torch", "mindspore"))
    for module in wanted:
        if module in sys.modules:
            session.patch(module)
    if not all(module in sys.modules for module in wanted):
        sys.meta_path.insert(0, _AfterImport(session, wanted))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs session.patch(name) right after the module `torch` or `mindspore` has been executed."""

    def __init__(self, session, names):
        self.session, self.names, self.busy = session, set(names), False

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.names or self.busy:
            return None
        self.busy = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self.busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        loader, session = spec.loader, self.session

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                session.patch(fullname)

        spec.loader = _Loader()
        return spec


class Session:
    """The triage's part of one training process: step counting, the model, our debugger, the status file."""

    def __init__(self, plan: dict):
        self.plan = plan
        self.step = int(plan.get("step", 0))
        self.stop_after = bool(plan.get("stop", True))
        self.steps_done = 0           # optimizer steps that have returned
        self.debugger = None
        self.framework = ""
        self.models: list = []
        self.finished = False
        self.errors: list = []
        self._tls = threading.local()
        self._lock = threading.Lock()
        self._pending_end = False

    # ------------------------------------------------------------------ the frameworks
    def patch(self, name: str) -> None:
        try:
            if name == "torch":
                self._patch_torch()
            else:
                self._patch_mindspore()
        except Exception as exc:  # noqa: BLE001
            self._error(f"cannot hook {name}: {type(exc).__name__}: {exc}")

    def _patch_torch(self) -> None:
        import torch

        original_call = torch.nn.Module.__call__
        session = self

        def __call__(module, *args, **kwargs):
            return session.call(module, original_call, args, kwargs, "pytorch")

        torch.nn.Module.__call__ = __call__
        optimizer = torch.optim.Optimizer
        hook_step = optimizer.__dict__["profile_hook_step"].__func__

        def profile_hook_step(func):
            hooked = hook_step(func)

            def step(*args, **kwargs):
                result = hooked(*args, **kwargs)
                session.optimizer_stepped()
                return result

            return step

        optimizer.profile_hook_step = staticmethod(profile_hook_step)

    def _patch_mindspore(self) -> None:
        from mindspore import nn

        original_call = nn.Cell.__call__
        optimizer_class = nn.Optimizer
        session = self

        def __call__(cell, *args, **kwargs):
            if isinstance(cell, optimizer_class):
                result = original_call(cell, *args, **kwargs)
                session.optimizer_stepped()
                return result
            return session.call(cell, original_call, args, kwargs, "mindspore")

        nn.Cell.__call__ = __call__

    # ------------------------------------------------------------------ the step
    def _depth(self) -> int:
        return getattr(self._tls, "depth", 0)

    def call(self, module, original, args, kwargs, framework: str):
        depth = self._depth()
        if depth == 0 and not self.finished:
            self._quietly(lambda: self._top_level(module, framework))
        self._tls.depth = depth + 1
        try:
            return original(module, *args, **kwargs)
        finally:
            self._tls.depth = depth
            if depth == 0 and self._pending_end:
                self._pending_end = False
                self._end_step()

    def optimizer_stepped(self) -> None:
        if self._depth() > 0:            # inside a cell (TrainOneStepCell): the step ends when it returns
            self._pending_end = True
            return
        self._end_step()

    def _top_level(self, module, framework: str) -> None:
        if self.steps_done != self.step or self._user_debugger(framework) is not None:
            return
        if self.debugger is None:
            self.framework = framework
            self.debugger = self._make_debugger(framework)
            self.debugger.current_step = self.step
        if not self.debugger.running:
            self.models.append(type(module).__name__)
            self.debugger.start(module)
            self.write_status()

    def _end_step(self) -> None:
        self.steps_done += 1
        self._quietly(self._stop_recording)
        user = self._user_debugger(self.framework) if self.framework else None
        done = self.steps_done > self.step if user is None else user.current_step > self.step
        if done and not self.finished:
            self.finished = True
            self._quietly(self.write_status)
            if self.stop_after:
                sys.stdout.flush()
                sys.stderr.flush()
                raise SystemExit(0)

    def _stop_recording(self) -> None:
        if self.debugger is not None and self.debugger.running:
            self.debugger.stop()

    def _make_debugger(self, framework: str):
        if framework == "pytorch":
            from msprobe.pytorch.debugger import PrecisionDebugger
        else:
            from msprobe.mindspore.debugger import PrecisionDebugger
        return PrecisionDebugger(config_path=self.plan["config"])

    def _user_debugger(self, framework: str):
        """The newest PrecisionDebugger of the framework when it is not ours (the user made one)."""
        module = sys.modules.get("msprobe.pytorch.debugger" if framework == "pytorch" else "msprobe.mindspore.debugger")
        debugger_class = getattr(module, "PrecisionDebugger", None)
        newest = vars(debugger_class).get("_newest") if debugger_class is not None else None
        return newest if newest is not None and newest is not self.debugger else None

    # ------------------------------------------------------------------ status and errors
    def _quietly(self, job) -> None:
        try:
            job()
        except Exception as exc:  # noqa: BLE001 - the training goes on
            self._error(f"{type(exc).__name__}: {exc}")

    def _error(self, message: str) -> None:
        with self._lock:
            if message in self.errors:
                return
            self.errors.append(message)
        sys.stderr.write(f"msprobe triage: {message}\n")
        try:
            self.write_status()
        except Exception:  # noqa: BLE001, S110 - the status file is best effort
            pass

    def write_status(self) -> None:
        folder = self.plan.get("status_dir")
        if not folder:
            return
        status = {"pid": os.getpid(), "framework": self.framework, "models": self.models,
                  "steps_done": self.steps_done, "recorded": self.debugger is not None, "finished": self.finished,
                  "stopped": self.finished and self.stop_after, "errors": self.errors,
                  "user_debugger": bool(self.framework) and self._user_debugger(self.framework) is not None}
        path = os.path.join(folder, f"status_{os.getpid()}.json")
        temporary = path + ".tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(status, handle)
        os.replace(temporary, path)
