"""The life cycle every collector shares: start/stop/step/step_scope, the exit handler and SIGTERM, one recording
debugger per process, and patches owned by the debugger that made them. A framework subclasses DebuggerBase and
fills in its hooks (_models, _rank, _install, _uninstall, _flush_pending, _new_step, _save).

Semantics (docs/dump.md, "What happens when your step crashes"):

* start(), stop() and step() may also be called on the class (`PrecisionDebugger.start(model)`, as the
  reference's class methods): they act on the newest debugger of that class.
* start() while this debugger records is ignored (nested start); stop() or step() without start() do nothing
  but step() counts the step.
* A second debugger's start() while another records stops that one first (its step is written, marked
  incomplete with the reason) and then records: the newest start() wins, so a notebook cell run again never
  leaves two debuggers fighting over the same hooks.
* stop() may be called from any thread.
* Whatever ends the step before stop() - an exception in `with debugger.step_scope(model):`, the end of the
  process (atexit), SIGTERM - the step's files are written with what was recorded, marked "incomplete".
* Nothing here raises into the training: a failure is logged once and recording of that step stops. The only
  exceptions are usage errors of start()'s arguments, at the first recorded step, and never under `msprobe
  triage` (whose configuration replaces the script's): there a start() without the model that the level needs
  waits for it (`waiting_for_model`), and the triage's injection (triage/inject.py) starts it on the first model
  called in the step.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import signal
import threading
import types
import weakref

from msprobe.collect.config import TRIAGE_PLAN, DumpConfig
from msprobe.collect.guard import ErrorLog, one_line
from msprobe.collect.paths import step_directory
from msprobe.collect.writer import StepWriter
from msprobe.log import get_logger, setup_logging

_LOCK = threading.RLock()
_ACTIVE: list = []                  # the debugger recording now, if any (at most one)
_EXIT_REGISTERED: list = []
_PREVIOUS_SIGTERM: list = []        # the SIGTERM handler ours replaced, while ours is installed
_REPORTED: list = []                # weak references to the debuggers that wrote a step (named at the run's end)

EXITED = "the process exited before stop() was called"
TERMINATED = "the process received SIGTERM before stop() was called"
SUPERSEDED = "another debugger started before stop() was called"


def active_debugger():
    """The debugger recording in this process, or None."""
    return _ACTIVE[0] if _ACTIVE else None


def not_recording():
    """The running debugger's "not recording" guard (its collector's `working()`), or nothing when none runs: the
    ops of a tool running beside it (the training monitor's statistics) inside it are never recorded as the
    training's API calls, so that a dump is the same with that tool on."""
    working = getattr(getattr(active_debugger(), "collector", None), "working", None)
    return working() if working is not None else contextlib.nullcontext()


class Patches:
    """Attributes one debugger replaced (functions of a framework): restore() puts back only those that still hold
    the debugger's replacement; one replaced again by someone else since is left to them (our replacement inside
    theirs passes calls through once recording stopped)."""

    def __init__(self, errors: ErrorLog):
        self.errors = errors
        self._done: list = []

    def set(self, owner, name: str, replacement) -> None:
        original = getattr(owner, name)
        setattr(owner, name, replacement)
        self._done.append((owner, name, original, replacement))

    def restore(self) -> None:
        done, self._done = self._done, []
        for owner, name, original, replacement in reversed(done):
            if getattr(owner, name, None) is replacement:
                setattr(owner, name, original)
            else:
                self.errors.once(("replaced", id(owner), name), "%s.%s was replaced by other code while recording; "
                                 "it is left as it is now", getattr(owner, "__name__", type(owner).__name__), name)


class _InstanceOrClass:
    """A debugger method that may also be called on the class, as the reference's class methods are:
    `PrecisionDebugger.start(model)` acts on the newest debugger of that class (nothing, when none was made)."""

    def __init__(self, method):
        self.method = method
        functools.update_wrapper(self, method)

    def __get__(self, debugger, cls):
        debugger = debugger if debugger is not None else cls.__dict__.get("_newest")
        if debugger is None:
            return lambda *args, **kwargs: None
        return types.MethodType(self.method, debugger)


class DebuggerBase:
    """start(model)/stop()/step() around each training step, or `with debugger.step_scope(model):`."""

    framework = "pytorch"
    suffix = ".pt"

    def __init__(self, config: DumpConfig, model=None):
        type(self)._newest = self
        self.config = config
        self.model = model
        self.current_step = 0
        self.errors = ErrorLog()
        self.writer = StepWriter(self.framework, config.task, config.level, save=self._save, suffix=self.suffix,
                                 errors=self.errors)
        self._running = False
        self.waiting_for_model = False     # under msprobe triage: a start() without its model (module docstring)
        self._ending_thread = None
        self._after_end: list = []
        self._folders: list = []       # the step folders written, in order
        _console()

    # ------------------------------------------------------------------ framework hooks
    def _models(self, model) -> list:
        """The models of start(model) as a list (usage errors raise MsprobeError)."""
        return [] if model is None else list(model) if isinstance(model, (list, tuple)) else [model]

    def _rank(self):
        """This process's rank, or None outside a distributed job."""
        return None

    def _install(self, models: list) -> None:
        """Install the hooks and patches of one recording (may raise: _uninstall is then called)."""
        raise NotImplementedError

    def _uninstall(self) -> None:
        """Remove everything _install put in place; called from any thread, possibly after a partial _install."""
        raise NotImplementedError

    def _flush_pending(self) -> None:
        """Hand the writer the entries still waiting (e.g. module backward entries) before the files are closed."""

    def _new_step(self) -> None:
        """Reset the per-step counters."""

    def _tidy(self) -> None:
        """Called first by start(), stop() and step() in the calling thread (per-thread leftovers of a stop() made
        in another thread)."""

    def _save(self, tensor, path: str) -> None:
        """Write one tensor file (task tensor)."""
        raise NotImplementedError

    def _step_directory(self) -> str:
        """Where the current step of this process is written."""
        return step_directory(self.config.dump_path, self.current_step, self._rank())

    # ------------------------------------------------------------------ public
    @property
    def running(self) -> bool:
        return self._running

    @_InstanceOrClass
    def start(self, model=None) -> None:
        self._quietly("start", self._tidy)
        if self._running or not self.config.wants_step(self.current_step) or \
                not self.config.wants_rank(self._quietly("rank", self._rank)):
            return
        self.waiting_for_model = self._waits_for_model(model)
        if self.waiting_for_model:
            return
        models = self._models(model if model is not None else self.model)     # usage errors raise
        self._quietly("start", lambda: self._start(models))

    def _waits_for_model(self, model) -> bool:
        """Under msprobe triage, whose configuration replaced the script's: start() without the model that the
        level needs (L0, mix) waits for the triage to start it on the model (never a usage error there)."""
        return model is None and self.model is None and self.config.level in ("L0", "mix") and \
            bool(os.environ.get(TRIAGE_PLAN))

    @_InstanceOrClass
    def stop(self) -> None:
        self._quietly("stop", self._tidy)
        self.waiting_for_model = False
        self._end(None)

    @_InstanceOrClass
    def step(self) -> None:
        self.stop()
        self.current_step += 1
        self._quietly("step", self._new_step)

    @contextlib.contextmanager
    def step_scope(self, model=None):
        """One training step: start(model) on entry; stop() and step() on exit. An exception inside is not
        swallowed: the step's files are written first, marked incomplete with the exception."""
        self.start(model)
        try:
            yield self
        except BaseException as exc:
            self._end(f"the step raised {one_line(exc)}")
            self.step()
            raise
        self.step()

    # ------------------------------------------------------------------ life cycle
    def _quietly(self, what: str, job):
        try:
            return job()
        except Exception as exc:  # noqa: BLE001 - the user's training must go on
            self.errors.once((what, type(exc).__name__), "%s() failed (%s); training continues", what,
                             one_line(exc))
            return None

    def _start(self, models: list) -> None:
        with _LOCK:
            if self._running:
                return
            other = active_debugger()
            if other is not None and other is not self:
                self.errors.once("superseded", "a second debugger started while the one writing %s was "
                                 "recording: that one is stopped first (its step is written, marked incomplete)",
                                 other.writer.directory)
                other._end(SUPERSEDED)
            try:
                self._install(models)
            except Exception:
                self._quietly("start", self._uninstall)
                raise
            self.writer.open(self._step_directory())
            self._running = True
            _ACTIVE[:] = [self]
            if not _watch_process_end():
                self.errors.once("no sigterm", "start() runs outside the main thread, where Python cannot install a "
                                 "SIGTERM handler: a step stopped by SIGTERM is not written (an exception or the "
                                 "end of the process still is)")

    def _end(self, incomplete: str | None) -> None:
        """Stop recording and write the step's files; `incomplete` says why the step did not finish."""
        with _LOCK:
            if not self._running or self._ending_thread is not None:
                return
            self._ending_thread = threading.get_ident()
        try:
            self._quietly("stop", self._flush_pending)
            self._running = False
            self._quietly("stop", self._uninstall)
            path = self._quietly("stop", lambda: self.writer.close(incomplete))
            if path:
                self._quietly("stop", lambda: self._written(path, incomplete))
        finally:
            with _LOCK:
                self._ending_thread = None
                if active_debugger() is self:
                    _ACTIVE.clear()
                    _release_sigterm()
            work, self._after_end = self._after_end, []
            for job in work:
                job()

    def _written(self, path: str, incomplete: str | None) -> None:
        """Say where a step went, once per step folder: the first at info level (with where the rest is said),
        the next ones at debug level. The run's end names the dump root (_at_exit)."""
        folder = os.path.dirname(path)
        if folder in self._folders:
            return
        self._folders.append(folder)
        state = f", incomplete: {incomplete}" if incomplete else ""
        if len(self._folders) == 1:
            _REPORTED.append(weakref.ref(self))
            get_logger().info("msprobe dump: step %d written to %s (%d entries%s); the next steps are logged at "
                              "debug level (MSPROBE_LOG_LEVEL=0)", self.current_step, folder, self.writer.entries,
                              state)
        else:
            get_logger().debug("msprobe dump: step %d written to %s (%d entries%s)", self.current_step, folder,
                               self.writer.entries, state)

    def _forked(self) -> None:
        """In the child of a fork made while recording: nothing is recorded there and the parent's files are left
        alone (the child's copies of the hooks and patches are removed)."""
        self._running = False
        self.writer.forget()
        self._quietly("fork", self._uninstall)

    def _call_soon(self, job) -> None:
        """Run `job` (a signal handler's work) now, or after the part of this debugger the thread is inside."""
        if self._ending_thread == threading.get_ident():
            self._after_end.append(job)
        else:
            self.writer.call_soon(job)


# ---------------------------------------------------------------------- process end
def _watch_process_end() -> bool:
    """The exit handler (once per process) and, from the main thread, the SIGTERM handler while recording; False
    when SIGTERM cannot be watched from this thread."""
    if not _EXIT_REGISTERED:
        atexit.register(_at_exit)
        _EXIT_REGISTERED.append(True)
    if threading.current_thread() is not threading.main_thread():
        return signal.getsignal(signal.SIGTERM) is _on_sigterm
    if _PREVIOUS_SIGTERM:
        return True
    current = signal.getsignal(signal.SIGTERM)
    if current is None or current == signal.SIG_IGN:     # set outside Python, or ignored: left alone
        return True
    _PREVIOUS_SIGTERM.append(current)
    signal.signal(signal.SIGTERM, _on_sigterm)
    return True


def _release_sigterm() -> None:
    if not _PREVIOUS_SIGTERM or threading.current_thread() is not threading.main_thread():
        return              # from another thread: ours stays, and passes the signal on when no debugger records
    previous = _PREVIOUS_SIGTERM.pop()
    if signal.getsignal(signal.SIGTERM) is _on_sigterm:
        signal.signal(signal.SIGTERM, previous)


def _after_fork_in_child() -> None:
    global _LOCK
    _LOCK = threading.RLock()
    debugger = active_debugger()
    _ACTIVE.clear()                    # our SIGTERM handler stays: with no debugger it passes the signal on
    if debugger is not None:
        debugger._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _at_exit() -> None:
    debugger = active_debugger()
    if debugger is not None:
        debugger._end(EXITED)
    for reference in _REPORTED:
        done = reference()
        if done is not None and done._folders:
            get_logger().info("msprobe dump: this run's dump is in %s (%d step folder%s)", done.config.dump_path,
                              len(done._folders), "" if len(done._folders) == 1 else "s")


def _console() -> None:
    """The collector's log lines reach the console of a training script that configured no logging (as the
    commands' do); a script's own logging set-up is left alone."""
    import logging

    if not logging.getLogger().handlers:
        setup_logging()


def _on_sigterm(signum, frame) -> None:
    debugger = active_debugger()
    previous = _PREVIOUS_SIGTERM[0] if _PREVIOUS_SIGTERM else signal.SIG_DFL

    def finish():
        if debugger is not None:
            debugger._end(TERMINATED)
        if signal.getsignal(signal.SIGTERM) is _on_sigterm:
            _PREVIOUS_SIGTERM.clear()
            signal.signal(signal.SIGTERM, previous)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:         # die of the signal, as without us
            os.kill(os.getpid(), signum)

    if debugger is None:
        finish()
    else:
        debugger._call_soon(finish)
