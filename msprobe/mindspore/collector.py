"""The MindSpore collector: API wrappers (L1), entry recording and the backward hook of each recorded call.

Every wrapped API call that is not nested in another recorded call (a per-thread depth counter) gets the name
`<Prefix>.<api>.<n>.forward`, `n` counting the calls of that API in the step. Its backward entry comes from a
`CellBackwardHook` made for that call alone and bound to `<Prefix>.<api>.<n>.backward`: applied to the call's
tensor arguments and to its outputs, it hands the hook the gradients of the outputs (`input`) and of the
arguments (`output`) once the autograd engine has run the call's backward. A call without a floating-point tensor
argument gets a backward pre-hook on its outputs instead (`output` is then empty), as the reference does.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import threading
import traceback
from collections import OrderedDict

from mindspore import Tensor
from mindspore.common.api import _pynative_executor
from mindspore.ops.operations import _inner_ops as inner

from msprobe.log import get_logger
from msprobe.mindspore._interim import StepWriter
from msprobe.mindspore.apis import COLLECTIVE_PREFIXES, api_targets, is_float_dtype
from msprobe.mindspore.records import Recorder

_HERE = os.path.dirname(os.path.abspath(__file__))
_MISSING = object()


def differentiable(values) -> bool:
    """A floating-point tensor among the top-level values (what a CellBackwardHook on them can carry back)."""
    return any(isinstance(v, Tensor) and is_float_dtype(v.dtype) for v in values)


def _own_frame(filename: str) -> bool:
    return os.path.dirname(os.path.abspath(filename)) == _HERE


def stack_lines(cache: dict) -> tuple:
    """The caller's stack, innermost first, without the collector's frames; formatted once per chain of (code,
    line) positions, since a training step calls the same sites again and again."""
    key = []
    frame = sys._getframe(1)
    while frame is not None:
        key.append((frame.f_code, frame.f_lineno))
        frame = frame.f_back
    key = tuple(key)
    lines = cache.get(key)
    if lines is None:
        frames = [f for f in traceback.extract_stack(sys._getframe(1)) if not _own_frame(f.filename)]
        lines = tuple(f"File {f.filename}, line {f.lineno}, in {f.name}, \n {f.line or ''}" for f in reversed(frames))
        if len(cache) < 100_000:
            cache[key] = lines
    return lines


class BackwardBinding:
    """One CellBackwardHook (and, where needed, a pre-hook) bound to one backward entry name. The hook dicts must
    outlive the call (CellBackwardHook keeps a weak reference): the collector keeps every binding of the step."""

    def __init__(self, collector, name: str, on_grads, with_inputs: bool, cell=None):
        self.hooks = OrderedDict()
        self.pre_hooks = OrderedDict()
        self.kernel = None
        self.pre_kernel = None
        if with_inputs:
            self.hooks[name] = lambda _cell, grad_in, grad_out: on_grads(grad_out, grad_in)
            self.kernel = inner.CellBackwardHook(name, cell, self.hooks)
            self.kernel.register_backward_hook()
        else:
            self.pre_hooks[name] = lambda _cell, grad_out: on_grads(grad_out, None)
            self.pre_kernel = inner.CellBackwardHook(name, cell, self.pre_hooks)
            self.pre_kernel.register_backward_pre_hook()
        collector.bindings.append(self)

    def inputs(self, args: tuple) -> tuple:
        return self.kernel(args) if self.kernel is not None else args

    def outputs(self, out):
        if self.kernel is not None:
            return self.kernel(out)
        if isinstance(out, (Tensor, tuple)):
            return self.pre_kernel(out)
        return out


class Collector:
    """Records one process's entries of the current step."""

    def __init__(self, config):
        self.config = config
        saver = None
        self.writer = StepWriter(config.task, config.level, "mindspore")
        if config.task == "tensor":
            saver = self.writer.save_array
        self.recorder = Recorder(config.summary_mode, saver)
        self._tls = threading.local()
        self.api_active = False
        self.generation = 0
        self._errors_logged: set = set()
        self._patched: list = []
        self._wrappers: dict = {}
        self.bindings: list = []
        self.reset_counters()

    # ------------------------------------------------------------------ state
    @property
    def depth(self) -> int:
        return getattr(self._tls, "depth", 0)

    @depth.setter
    def depth(self, value: int) -> None:
        self._tls.depth = value

    def reset_counters(self) -> None:
        self.api_counts: dict = {}
        self.stack_cache: dict = {}
        self.bindings = []
        self.generation += 1

    # ------------------------------------------------------------------ filters
    def selected(self, name: str, is_api: bool = True) -> bool:
        cfg = self.config
        if cfg.scope and not any(s in name for s in cfg.scope):
            return False
        if cfg.api_list and is_api and not any(s in name for s in cfg.api_list):
            return False
        return True

    def direction_ok(self, direction: str) -> bool:
        modes = set(self.config.data_mode)
        wanted = modes & {"forward", "backward"}
        return "all" in modes or not wanted or direction in wanted

    def section_ok(self, section: str) -> bool:
        modes = set(self.config.data_mode)
        wanted = modes & {"input", "output"}
        return "all" in modes or not wanted or section in wanted

    # ------------------------------------------------------------------ recording
    def log_once(self, key, message: str, *args) -> None:
        if key not in self._errors_logged:
            self._errors_logged.add(key)
            get_logger().warning(message, *args)

    def guard(self, name: str, body: dict, what: str, func):
        """One recording step; an error is logged once per kind and marks the entry instead of propagating."""
        try:
            return func()
        except Exception as exc:  # noqa: BLE001 - the user's training must go on
            self.log_once((type(exc).__name__, what),
                          "msprobe dump: recording %s of %s failed (%s: %s); the entry is marked with dump_error "
                          "and training continues", what, name, type(exc).__name__, exc)
            body["dump_error"] = f"{what}: {type(exc).__name__}: {exc}"
            return None

    def record_inputs(self, name: str, body: dict, args, kwargs) -> None:
        if not self.section_ok("input"):
            return

        def work():
            body["input_args"] = self.recorder.record(list(args), f"{name}.input")
            body["input_kwargs"] = {k: self.recorder.record(v, f"{name}.kwargs.{k}") for k, v in kwargs.items()}
        self.guard(name, body, "input", work)

    def record_outputs(self, name: str, body: dict, out) -> None:
        if not self.section_ok("output"):
            return
        values = list(out) if isinstance(out, (tuple, list)) else [out]
        self.guard(name, body, "output",
                   lambda: body.__setitem__("output", self.recorder.record(values, f"{name}.output")))

    def record_backward(self, name: str, body: dict, grad_outputs, grad_inputs) -> None:
        """`input` = gradients of the call's outputs, `output` = gradients of its arguments (None: not known)."""
        if self.section_ok("input"):
            self.guard(name, body, "input",
                       lambda: body.__setitem__("input", self.recorder.record(list(grad_outputs), f"{name}.input")))
        if self.section_ok("output"):
            values = [] if grad_inputs is None else list(grad_inputs)
            self.guard(name, body, "output",
                       lambda: body.__setitem__("output", self.recorder.record(values, f"{name}.output")))

    def add_entry(self, name: str, body: dict, stack=None) -> None:
        self.writer.data[name] = body
        if stack is not None:
            self.writer.add_stack(name, stack)

    def stack(self, name: str, body: dict):
        return self.guard(name, body, "stack", lambda: stack_lines(self.stack_cache))

    # ------------------------------------------------------------------ hooks' context
    def enter(self):
        """Our own work, or a call whose inner APIs belong to it: nothing inside is recorded."""
        self.depth = self.depth + 1

    def leave(self):
        self.depth = self.depth - 1

    def backward_callback(self, name: str, parent_of, write):
        """A hook body for a backward entry: runs only for this step, as our own work, never raising."""
        generation = self.generation

        def callback(grad_outputs, grad_inputs):
            if generation != self.generation:
                return None
            self.enter()
            try:
                write(grad_outputs, grad_inputs)
            except Exception as exc:  # noqa: BLE001 - the user's training must go on
                self.log_once((type(exc).__name__, "hook"),
                              "msprobe dump: a backward hook failed for %s (%s: %s); its entry is skipped and "
                              "training continues", name, type(exc).__name__, exc)
            finally:
                self.leave()
            return None
        return callback

    # ------------------------------------------------------------------ APIs
    def run_api(self, key: str, func, args, kwargs, collective: bool = False):
        index = self.api_counts.get(key, 0)
        self.api_counts[key] = index + 1
        forward = f"{key}.{index}.forward"
        parent = self.cells.current_parent() if self.cells is not None else None
        if self.config.level == "mix":
            self.writer.construct[forward] = parent
        dump = self.selected(f"{key}.{index}")
        fwd = dump and self.direction_ok("forward")
        body: dict = {}
        self.enter()
        try:
            stack = None
            if fwd:
                self.record_inputs(forward, body, args, kwargs)
                stack = self.stack(forward, body)
                self.add_entry(forward, body, stack)
            binding = None
            if dump and not collective and self.direction_ok("backward") and _pynative_executor.requires_grad():
                binding = self.guard(forward, body, "backward hook",
                                     lambda: self._api_binding(f"{key}.{index}.backward", args))
                if binding is not None:
                    args = binding.inputs(tuple(args))
            out = func(*args, **kwargs)
            if binding is not None:
                out = binding.outputs(out)
            if fwd:
                self.record_outputs(forward, body, (*args, *kwargs.values()) if collective else out)
            return out
        finally:
            self.leave()

    def _api_binding(self, name: str, args) -> BackwardBinding:
        parent = self.cells.backward_parent() if self.cells is not None else None

        def write(grad_outputs, grad_inputs):
            if self.config.level == "mix":
                self.writer.construct[name] = self.cells.backward_parent() if self.cells is not None else parent
            body: dict = {}
            self.record_backward(name, body, grad_outputs, grad_inputs)
            self.add_entry(name, body)
        return BackwardBinding(self, name, self.backward_callback(name, None, write), differentiable(args))

    # ------------------------------------------------------------------ install / uninstall
    cells = None            # the CellHooks, for construct.json parents
    cells_active = False

    def install_api_hooks(self) -> None:
        if self.api_active:
            return
        for owner, attr, prefix in api_targets():
            self._patch(owner, attr, prefix)
        self.api_active = True

    def _patch(self, owner, attr: str, prefix: str) -> None:
        own = vars(owner).get(attr, _MISSING)
        original = getattr(owner, attr, None)
        if original is None:
            return
        wrapper = self._wrappers.get((id(owner), attr))
        if wrapper is None or wrapper.__wrapped__ is not original:
            wrapper = self._wrappers[(id(owner), attr)] = self._wrapper(prefix, attr, original)
        static = isinstance(inspect.getattr_static(owner, attr, None), staticmethod)
        self._patched.append((owner, attr, own, staticmethod(wrapper) if static else wrapper))
        setattr(owner, attr, self._patched[-1][3])

    def _wrapper(self, prefix: str, attr: str, original):
        collector = self
        key = f"{prefix}.{attr}"
        collective = prefix in COLLECTIVE_PREFIXES

        def wrapper(*args, **kwargs):
            if not collector.api_active or collector.depth:
                return original(*args, **kwargs)
            return collector.run_api(key, original, args, kwargs, collective)
        try:
            functools.update_wrapper(wrapper, original)
        except (AttributeError, TypeError):
            pass
        wrapper.__wrapped__ = original
        return wrapper

    def uninstall(self) -> None:
        self.api_active = False
        self.restore_apis()
        self._patched = []

    def restore_apis(self) -> None:
        """The original APIs back in place (at stop(), and while a graph compiles: the compiler parses the Python
        source of what the graph calls)."""
        for owner, attr, own, _ in reversed(self._patched):
            if own is _MISSING:
                delattr(owner, attr)
            else:
                setattr(owner, attr, own)

    def reinstall_apis(self) -> None:
        for owner, attr, _, wrapper in self._patched:
            setattr(owner, attr, wrapper)

    suspendables = ()           # the cell and primitive hooks, suspended with the APIs while a graph compiles

    def suspend(self) -> None:
        self.restore_apis()
        for part in self.suspendables:
            part.suspend()

    def resume(self) -> None:
        for part in self.suspendables:
            part.resume()
        if self.api_active:
            self.reinstall_apis()
