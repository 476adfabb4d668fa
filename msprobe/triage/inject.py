"""The collector inside the user's training processes, without a line of theirs changed (docs/triage.md).

site/sitecustomize.py calls arm() in every Python process of the training command when MSPROBE_TRIAGE_PLAN names
a plan (a JSON file the triage writes). arm() waits for torch or mindspore to be imported, then:

* wraps `nn.Module.__call__` / `nn.Cell.__call__`: the first top-level call of a module (one not made inside
  another module's call) starts our PrecisionDebugger on that module, the model (MindSpore's training wrappers,
  `TrainOneStepCell(WithLossCell(net, loss), optimizer)` and the like, taken off: the model is `net`; in
  GRAPH_MODE a compiled function called from Python, an @ms.jit step or ms.value_and_grad's, is such a call too,
  its model the first cell with parameters it refers to). Our
  debugger is made at the first call and started in every step until the chosen one (it records the chosen step
  only): a GRAPH_MODE network, or an @ms.jit cell, compiles at its first call, so its taps go in then;
* marks the end of a step when an optimizer step returns (torch: around the hooked `Optimizer.step`, after every
  optimizer hook; MindSpore: when an `nn.Optimizer` cell's call returns, or when the outermost cell around it
  returns, for `TrainOneStepCell`; a top-level cell that holds an optimizer and runs as one graph, GRAPH_MODE or
  an @ms.jit construct, ends the step when it returns): the step's files are written, and with `stop` the
  process leaves there (SystemExit(0)), so a triage costs one step of each run;
* a PrecisionDebugger the user makes takes the triage's configuration (MSPROBE_DUMP_CONFIG, read by
  collect/config.py): ours then stands aside, and the user's start/stop/step mark the steps; a start() of theirs
  without the model the configuration's level needs waits for it (collect/debugger.py) and is started here on
  the first model called.

Nothing here changes a number: the wrappers only call through, and the collectors are bit-identical. Nothing here
raises into the training except the SystemExit that ends a stopped run; a failure is written once to stderr and
to the status file. Each process that imports torch or mindspore writes status_<pid>.json in the plan's status
folder: what it imported, the steps it counted, whether it recorded and stopped the run, and any error.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import os
import sys
import threading

# the modules of MindSpore's training wrappers (TrainOneStepCell, WithLossCell, amp's): the model is inside them
_MS_WRAPPERS = ("mindspore.nn.wrap.", "mindspore.train.", "mindspore.amp", "mindspore.boost.")

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
        self.framework = ""           # the framework recorded (by our debugger or the script's)
        self.imported: list = []      # the frameworks hooked in this process
        self.models: list = []
        self.recorded = False         # a debugger recorded the chosen step
        self.finished = False
        self.errors: list = []
        self._tls = threading.local()
        self._lock = threading.Lock()
        self._pending_end = False
        self._cells: dict = {}        # id(top-level module or compiled function) -> _found()

    # ------------------------------------------------------------------ the frameworks
    def patch(self, name: str) -> None:
        try:
            if name == "torch":
                self._patch_torch()
            else:
                self._patch_mindspore()
        except Exception as exc:  # noqa: BLE001
            self._error(f"cannot hook {name}: {type(exc).__name__}: {exc}")
            return
        self.imported.append("pytorch" if name == "torch" else "mindspore")
        self._quietly(self.write_status)

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
        executor = _jit_executor()
        if executor is None:
            return
        original_run = executor.__call__

        def run(graph, *args, **kwargs):
            # a compiled function called from Python (not a jit cell, whose Cell.__call__ is the step's): in
            # GRAPH_MODE a step function (@ms.jit, or ms.value_and_grad's) runs the model inside its graph
            function = getattr(graph, "fn", None)
            if getattr(graph, "obj", None) is not None or function is None or not _graph_mode():
                return original_run(graph, *args, **kwargs)
            return session.call(function, lambda _function, *a, **k: original_run(graph, *a, **k), args, kwargs,
                                "mindspore")

        executor.__call__ = run

    # ------------------------------------------------------------------ the step
    def _depth(self) -> int:
        return getattr(self._tls, "depth", 0)

    def call(self, module, original, args, kwargs, framework: str):
        """A module's call (or, in GRAPH_MODE, a compiled step function's): a top-level one starts the debugger on
        the model and may end the step when it returns."""
        depth = self._depth()
        top = depth == 0 and not self.finished
        if top:
            self._quietly(lambda: self._top_level(module, framework))
        self._tls.depth = depth + 1
        try:
            result = original(module, *args, **kwargs)
        except BaseException:
            self._tls.depth = depth
            if depth == 0:
                self._pending_end = False
            raise
        self._tls.depth = depth
        if top and (self._pending_end or self._graph_step(module, framework)):
            self._pending_end = False
            self._end_step()
        return result

    def optimizer_stepped(self) -> None:
        if self._depth() > 0:            # inside a cell (TrainOneStepCell): the step ends when it returns
            self._pending_end = True
            return
        self._end_step()

    def _top_level(self, module, framework: str) -> None:
        model = self._found(module, framework)[1]
        if model is None:                # a compiled function that calls no model
            return
        user = self._user_debugger(framework)
        if user is not None:             # the script's own debugger marks the steps; it may wait for the model
            self.framework = self.framework or framework
            if user.current_step > self.step:        # its step() passed the recorded step: stop before the next
                self._finish()
                return
            if getattr(user, "waiting_for_model", False):
                user.start(model)
            self._started(user, model, framework)
            return
        if self.debugger is None:
            self.framework = framework
            self.debugger = self._make_debugger(framework)
            self.debugger.current_step = self.steps_done
        if self.framework == framework and not self.debugger.running:
            # every step until the chosen one: a graph compiles at the first call, so the first start() taps it;
            # the debugger's configuration (step: [N]) records the chosen step only
            self.debugger.start(model)
            self._started(self.debugger, model, framework)

    def _started(self, debugger, model, framework: str) -> None:
        if debugger.running and not self.recorded:
            self.recorded = True
            self.framework = framework
            self.models.append(type(model).__name__)
            self.write_status()

    def _found(self, called, framework: str) -> tuple:
        """(the module or function called, the model it runs or None, whether it holds an optimizer), computed
        once per top-level module or compiled function."""
        found = self._cells.get(id(called))
        if found is None or found[0] is not called:
            if framework != "mindspore":
                found = (called, called, False)
            else:
                found = (called, *_ms_model(called))
            self._cells[id(called)] = found
        return found

    def _graph_step(self, called, framework: str) -> bool:
        """A top-level cell or compiled function that holds an optimizer and ran as one graph (GRAPH_MODE, or an
        @ms.jit construct): its optimizer step ran inside the graph, where no Python call is seen, so its return
        ends the step."""
        if framework != "mindspore" or not self._found(called, framework)[2]:
            return False
        construct = getattr(type(called), "construct", None)
        return bool(getattr(getattr(construct, "__func__", construct), "__wrapped_by_jit__", False)) or _graph_mode()

    def _end_step(self) -> None:
        self.steps_done += 1
        if self.debugger is not None:
            self._quietly(self.debugger.step)        # writes the recorded step, counts the step
        user = self._user_debugger(self.framework) if self.framework else None
        done = self.steps_done > self.step if user is None else user.current_step > self.step
        if done:
            self._finish()
        elif not self.finished:
            self._quietly(self.write_status)        # the steps counted, for a run that ends before its step

    def _finish(self) -> None:
        """The recorded step is written: say so, and leave the process unless --no-stop."""
        if self.finished:
            return
        self.finished = True
        self._quietly(self.write_status)
        if self.stop_after:
            sys.stdout.flush()
            sys.stderr.flush()
            raise SystemExit(0)

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
        status = {"pid": os.getpid(), "imported": self.imported, "framework": self.framework, "models": self.models,
                  "steps_done": self.steps_done, "recorded": self.recorded, "finished": self.finished,
                  "stopped": self.finished and self.stop_after, "errors": self.errors,
                  "user_debugger": bool(self.framework) and self._user_debugger(self.framework) is not None}
        path = os.path.join(folder, f"status_{os.getpid()}.json")
        temporary = path + ".tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(status, handle)
        os.replace(temporary, path)


def _graph_mode() -> bool:
    import mindspore as ms

    return ms.get_context("mode") != ms.PYNATIVE_MODE


def _jit_executor():
    """MindSpore's executor of compiled functions (its __call__ runs one), or None."""
    try:
        from mindspore.graph import api
    except ImportError:       # MindSpore before 2.9
        from mindspore.common import api
    return getattr(api, "_JitExecutor", None)


def _ms_model(called) -> tuple:
    """(the model, whether it holds an optimizer) of a top-level MindSpore cell, or of a compiled function (the
    first cell with parameters, not an optimizer, that the function refers to through its names and closures,
    or None)."""
    from mindspore import nn

    if isinstance(called, nn.Cell):
        return _unwrap(called)
    cells = _referred_cells(called)
    holds = any(isinstance(inner, nn.Optimizer) for cell in cells for _name, inner in cell.cells_and_names())
    models = [cell for cell in cells if not isinstance(cell, nn.Optimizer)
              and next(iter(cell.get_parameters()), None) is not None]
    return (_unwrap(models[0])[0] if models else None), holds


def _referred_cells(function, levels: int = 5) -> list:
    """The cells a function refers to, in the order its code names them: its globals and closure variables, and
    through the functions, bound methods and partials among them (`levels` deep)."""
    import functools
    import types

    from mindspore import nn

    found, seen, todo = [], set(), [(function, 0)]
    while todo:
        value, level = todo.pop(0)
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, nn.Cell):
            found.append(value)
            continue
        if level >= levels:
            continue
        if isinstance(value, functools.partial):
            inner = [value.func, *value.args]
        elif isinstance(value, types.MethodType):
            inner = [value.__self__, value.__func__]
        elif isinstance(value, types.FunctionType):
            closure = []
            for cell in value.__closure__ or ():
                try:
                    closure.append(cell.cell_contents)
                except ValueError:          # an empty closure cell
                    continue
            names = value.__globals__
            inner = closure + [names[name] for name in value.__code__.co_names if name in names]
        else:
            continue
        todo += [(item, level + 1) for item in inner]
    return found


def _unwrap(cell) -> tuple:
    """(the model, whether `cell` holds an optimizer) of a top-level MindSpore cell: MindSpore's training wrappers
    (TrainOneStepCell, WithLossCell, amp's, or any cell holding an optimizer) are taken off while one child cell
    with parameters, not an optimizer, is left inside (TrainOneStepCell(WithLossCell(net, loss), opt) -> net), as
    `debugger.start(net)` is written by hand."""
    from mindspore import nn

    holds = any(isinstance(inner, nn.Optimizer) for _name, inner in cell.cells_and_names())
    model = cell
    for _ in range(16):
        children = list(model.name_cells().values())
        wrapper = type(model).__module__.startswith(_MS_WRAPPERS) or \
            any(isinstance(child, nn.Optimizer) for child in children)
        inside = [child for child in children if not isinstance(child, nn.Optimizer)
                  and next(iter(child.get_parameters()), None) is not None]
        if not wrapper or len(inside) != 1:
            break
        model = inside[0]
    return model, holds
