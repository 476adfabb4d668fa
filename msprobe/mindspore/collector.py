"""The MindSpore collector: API wrappers (L1), entry recording and the backward hook of each recorded call.

Every wrapped API call that is not nested in another recorded call (a per-thread depth counter, which also covers
the collector's own work) gets the name `<Prefix>.<api>.<n>.forward`, `n` counting the calls of that API in the
step. Its backward entry comes from a `CellBackwardHook` made for that call alone and bound to
`<Prefix>.<api>.<n>.backward`: applied to the call's tensor arguments and to its outputs, it hands the hook the
gradients of the outputs (`input`) and of the arguments (`output`) once the autograd engine ran the call's
backward. A call without a floating-point tensor argument gets a backward pre-hook on its outputs instead
(`output` is then empty), as the reference does.

Entries go to the shared StepWriter (msprobe.collect.writer) in the reference's order: an API when it is called,
a cell when it returns, a backward entry when its hook runs. Two kinds wait for their last gradient: a Primitive's
backward entry (filled gradient by gradient, reserved at its first one) and a cell's parameters_grad entry
(written when the last of the cell's parameters got its gradient); stop() writes whatever still waits.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
from collections import OrderedDict
from contextlib import contextmanager

from mindspore import Tensor
from mindspore._c_expression import HookType
from mindspore.ops.operations import _inner_ops as inner

from msprobe.collect.guard import one_line
from msprobe.collect.recording import Recording
from msprobe.collect.stacks import stack_lines
from msprobe.mindspore.apis import COLLECTIVE_PREFIXES, api_targets, is_float_dtype
from msprobe.mindspore.records import Recorder

try:                              # MindSpore 2.9+ (mindspore.common.api is deprecated there and says so on import)
    from mindspore.graph.api import _pynative_executor
except ImportError:               # MindSpore before 2.9
    from mindspore.common.api import _pynative_executor

_HERE = os.path.dirname(os.path.abspath(__file__))
_MISSING = object()


def differentiable(values) -> bool:
    """A floating-point tensor among the top-level values (what a CellBackwardHook on them can carry back)."""
    return any(isinstance(v, Tensor) and is_float_dtype(v.dtype) for v in values)


def hookable(out):
    """(the tensors of a call's result a hook can be applied to, a function giving the result with them), or
    (None, None): a tensor; the tensors among the items of a tuple (a new tuple; a namedtuple keeps its type), a
    list or a dict (the same object, its items replaced: code that keeps a reference to it sees the same object)."""
    if isinstance(out, Tensor):
        return (out,), lambda values: values[0]
    if type(out) is tuple or (isinstance(out, tuple) and hasattr(out, "_fields")):
        items = tuple(out)
        rebuild = out._make if hasattr(out, "_fields") else tuple
    elif type(out) in (list, dict):
        keys = list(range(len(out))) if type(out) is list else list(out)
        items = tuple(out[k] for k in keys)

        def rebuild(values):
            for key, value in zip(keys, values):
                if value is not out[key]:
                    out[key] = value
            return out
    else:
        return None, None
    if not any(isinstance(v, Tensor) for v in items):
        return None, None
    return items, rebuild


class BackwardBinding:
    """One CellBackwardHook bound to one backward entry name: a backward hook (applied to the call's arguments and
    outputs: it reports both gradients once the arguments' gradients are computed) or a backward pre-hook (applied
    to the outputs only: it reports their gradients). CellBackwardHook keeps a weak reference to its hook dict,
    so the collector keeps every binding of the step. A result without a tensor to hook (None, a custom object)
    leaves the backward hook at the arguments alone: it then reports the arguments' gradients only."""

    def __init__(self, collector, name: str, on_grads, with_inputs: bool, cell=None, on_start=None):
        self.hooks = OrderedDict()
        self.kernel = None
        self.pre_kernel = None
        self.outputs_hooked = True
        if with_inputs:
            self.kernel = inner.CellBackwardHook(name, cell, self.hooks)
            self.kernel.set_hook_fn(self._two_phase(on_grads, on_start), HookType.BackwardHook)
        else:
            self.hooks[name] = lambda _cell, grad_out: on_grads(grad_out, None)
            self.pre_kernel = inner.CellBackwardHook(name, cell, self.hooks)
            self.pre_kernel.register_backward_pre_hook()
        collector.bindings.append(self)

    def _two_phase(self, on_grads, on_start):
        """The hook function of a backward-hook kernel: called first with the gradients of the outputs (then
        `on_start`, where the call's backward begins), then with those of the arguments (then `on_grads`); a
        result without hooked tensors makes the first call the arguments' gradients."""
        kernel_grads = []
        cell_id = self.kernel.cell_id       # not self.kernel's at the call: a finished binding may drop its kernel

        def hook(grad):
            if not kernel_grads:
                kernel_grads.append(grad)
                if on_start is not None and self.outputs_hooked:
                    on_start(grad, None)
                return cell_id
            grad_outputs = kernel_grads.pop()
            if self.outputs_hooked:
                on_grads(grad_outputs, grad)
            else:
                if on_start is not None:
                    on_start((), None)
                on_grads((), grad_outputs)
            return grad
        return hook

    def inputs(self, args: tuple) -> tuple:
        return self.kernel(args) if self.kernel is not None else args

    def outputs(self, out):
        items, rebuild = hookable(out)
        if items is None:
            self.outputs_hooked = False
            return out
        return rebuild(tuple((self.kernel or self.pre_kernel)(items)))


class Waiting:
    """An entry whose place in dump.json is taken while its gradients still arrive (a Primitive's backward)."""

    def __init__(self, collector, name: str, seq: int):
        self.collector = collector
        self.name = name
        self.body: dict = {}
        self.slot = None
        self.parent = None
        self.arguments_seen = 0
        self.seq = seq

    def settle(self) -> None:
        col = self.collector
        if self.slot is None:
            return
        if col.config.level == "mix":
            col.writer.add_construct(self.name, self.parent)
        col.writer.complete(self.slot)
        self.slot = None


class Collector(Recording):
    """Records one process's entries of the current step into the debugger's StepWriter."""

    output_sequences = (tuple, list)     # a cell or API returning a list gives outputs 0, 1, ... as the reference

    def __init__(self, config, writer, errors):
        self.config = config
        self.writer = writer
        self.errors = errors
        save = writer.save_tensor if config.task == "tensor" else None
        self.recorder = Recorder(config.summary_mode, save, errors.failed)
        self._tls = threading.local()
        self._count_lock = threading.Lock()
        self.api_active = False
        self.cells_active = False
        self.cells = None                # the CellHooks: construct.json parents
        self.suspendables = ()           # cell and primitive hooks, suspended with the APIs while a graph compiles
        self.generation = 0
        self._patched: list = []         # (owner, attribute, own value or _MISSING, wrapper)
        self._wrappers: dict = {}
        self._by_original: dict = {}     # id(original API function) -> its wrapper
        self.bindings: list = []
        self.waiting: list = []          # Waiting entries of this step
        self.reset_counters()

    # ------------------------------------------------------------------ state
    @property
    def depth(self) -> int:
        """How deep this thread is in recorded calls and the collector's own work (0: the user's code)."""
        return getattr(self._tls, "depth", 0)

    def enter(self) -> None:
        """Our own work, or a recorded call whose inner APIs belong to it: nothing inside is recorded."""
        self._tls.depth = getattr(self._tls, "depth", 0) + 1

    def leave(self) -> None:
        self._tls.depth -= 1

    @contextmanager
    def working(self):
        """enter() ... leave() around a block, however it ends (a tool beside the debugger: not_recording)."""
        self.enter()
        try:
            yield
        finally:
            self.leave()

    def reset_counters(self) -> None:
        self.api_counts: dict = {}
        self.stack_cache: dict = {}
        self.bindings = []
        self.waiting = []
        self.seq = 0
        self.generation += 1

    def count(self, counts: dict, key: str) -> int:
        """The next number of `key` in `counts`: each call its own, also when threads call at once."""
        with self._count_lock:
            index = counts.get(key, 0)
            counts[key] = index + 1
            return index

    # ------------------------------------------------------------------ recording (collect.recording)
    def enclosing(self):
        return self.cells.stack if self.cells is not None else ()

    def record(self, value, prefix: str):
        return self.recorder.record(value, prefix)

    def grads_wanted(self) -> bool:
        return self.direction_ok("backward") and _pynative_executor.requires_grad()

    def stack(self, name: str, body: dict):
        return self.guard(name, body, "stack", lambda: stack_lines(self.stack_cache, _HERE, 2))

    def parent(self):
        return self.cells.current_parent() if self.cells is not None else None

    def backward_callback(self, name: str, write):
        """The body of a backward hook: `write(*grads)` for this step only, as the collector's own work, never
        raising (a failure is logged once per kind)."""
        generation = self.generation

        def callback(*grads):
            if generation != self.generation:
                return None
            self.enter()
            try:
                write(*grads)
            except Exception as exc:  # noqa: BLE001 - the user's training must go on
                self.errors.once((type(exc).__name__, "backward hook"), "a backward hook failed for %s (%s); its "
                                 "entry is skipped and training continues", name, one_line(exc))
            finally:
                self.leave()
            return None
        return callback

    def next_seq(self) -> int:
        """The forward order of a recorded call (its backward hooks carry it)."""
        with self._count_lock:
            self.seq += 1
            return self.seq

    def settle_waiting(self, seq: int) -> None:
        """The backward of a call made at forward position `seq` runs: every waiting entry of a later call is
        complete, since the autograd engine runs a node's backward only once every node that consumed its outputs
        ran (parameter gradient hooks, which run as soon as their gradient is ready, do not settle anything)."""
        if not self.waiting:
            return
        still = []
        for entry in self.waiting:
            if entry.seq > seq:
                entry.settle()
            elif entry.slot is not None:
                still.append(entry)
        self.waiting = still

    def settle_all(self) -> None:
        for entry in self.waiting:
            entry.settle()
        self.waiting = []

    # ------------------------------------------------------------------ recorded calls
    def record_call(self, key: str, counts: dict, call, args, kwargs, hooks=None, shown=None,
                    collective: bool = False):
        """One recorded call `<key>.<n>.forward` (an API, a Primitive attribute, a jit graph): its parent in
        construct.json, its inputs before the call (`shown`: the arguments to record, when not all), the hooks of
        its backward entry (`hooks(backward name, args, seq)` -> an object with inputs(args) and outputs(result),
        or None), the call, its outputs (a collective's: its arguments after the call); the entry is written when
        the call returns, or raises."""
        index = self.count(counts, key)
        seq = self.next_seq()
        forward = f"{key}.{index}.forward"
        if self.config.level == "mix":
            self.writer.add_construct(forward, self.parent())
        forward_ok = self.selected(forward) and self.direction_ok("forward")
        dump_backward = self.selected(f"{key}.{index}.backward")
        body: dict = {}
        stack = None
        self.enter()
        try:
            if forward_ok:
                self.record_inputs(forward, body, args if shown is None else shown, kwargs)
                stack = self.stack(forward, body)
            binding = None
            if dump_backward and hooks is not None and self.grads_wanted():
                binding = self.guard(forward, body, "backward hook",
                                     lambda: hooks(f"{key}.{index}.backward", args, seq))
                hooked = None if binding is None else \
                    self.guard(forward, body, "backward hook", lambda: binding.inputs(tuple(args)))
                if hooked is None:
                    binding = None
                else:
                    args = hooked
            try:
                out = call(*args, **kwargs)
            except BaseException as exc:
                if forward_ok:          # the call that failed is often what the user is looking for
                    body["dump_error"] = f"the call raised {one_line(exc)}"
                    self.writer.add(forward, body, stack)
                raise
            if binding is not None:
                out = self.hooked_outputs(forward, body, binding, out)
            if forward_ok:
                self.record_outputs(forward, body, (*args, *kwargs.values()) if collective else out)
                self.writer.add(forward, body, stack)
            return out
        finally:
            self.leave()

    def hooked_outputs(self, name: str, body: dict, binding: BackwardBinding, out):
        """The call's outputs through the binding's hook (unchanged when that fails: the entry says why)."""
        try:
            return binding.outputs(out)
        except Exception as exc:  # noqa: BLE001 - the user's training must go on
            body["dump_error"] = self.errors.failed("backward hook", name, exc)
            return out

    def api_binding(self, name: str, args, seq: int) -> BackwardBinding:
        """The backward hook of an API call (of a jit graph: `args` are the tensors hooked)."""
        def write(grad_outputs, grad_inputs):
            self.settle_waiting(seq)
            if self.config.level == "mix":
                self.writer.add_construct(name, self.cells.backward_parent() if self.cells is not None else None)
            body: dict = {}
            self.record_backward(name, body, grad_outputs, grad_inputs)
            self.writer.add(name, body)
        return BackwardBinding(self, name, self.backward_callback(name, write), differentiable(args))

    # ------------------------------------------------------------------ install / uninstall
    def install_api_hooks(self) -> None:
        if self.api_active:
            return
        for owner, attr, prefix in api_targets():
            self._patch(owner, attr, prefix)
        self.api_active = True

    def _patch(self, owner, attr: str, prefix: str) -> None:
        """Replace owner.attr by its wrapper; remembered as it was (own attribute or inherited, staticmethod or
        not) so that it can be put back exactly, also for the time a graph compiles."""
        own = vars(owner).get(attr, _MISSING)
        original = getattr(owner, attr, None)
        if original is None:
            return
        wrapper = self._wrappers.get((id(owner), attr))
        if wrapper is None or wrapper.__wrapped__ is not original:
            wrapper = self._wrappers[(id(owner), attr)] = self._wrapper(prefix, attr, original)
            self._by_original[id(original)] = wrapper
        if isinstance(inspect.getattr_static(owner, attr, None), staticmethod):
            wrapper = staticmethod(wrapper)
        self._patched.append((owner, attr, own, wrapper))
        setattr(owner, attr, wrapper)

    def wrapper_of(self, value):
        """The wrapper of an API function (`ops.relu` kept by a cell as its activation), or None."""
        wrapper = self._by_original.get(id(value))
        return wrapper if wrapper is not None and wrapper.__wrapped__ is value else None

    def _wrapper(self, prefix: str, attr: str, original):
        collector = self
        key = f"{prefix}.{attr}"
        collective = prefix in COLLECTIVE_PREFIXES

        hooks = None if collective else collector.api_binding

        def wrapper(*args, **kwargs):
            if not collector.api_active or getattr(collector._tls, "depth", 0):
                return original(*args, **kwargs)
            return collector.record_call(key, collector.api_counts, original, args, kwargs, hooks,
                                         collective=collective)
        try:
            functools.update_wrapper(wrapper, original)
        except (AttributeError, TypeError):
            pass
        wrapper.__wrapped__ = original
        return wrapper

    def uninstall_apis(self) -> None:
        self.api_active = False
        self.restore_apis()
        self._patched = []

    def restore_apis(self) -> None:
        """The original APIs back in place; one that other code replaced meanwhile is left to that code (our
        wrapper inside passes its calls through once recording stopped)."""
        for owner, attr, own, wrapper in reversed(self._patched):
            if vars(owner).get(attr, _MISSING) is not wrapper:
                self.errors.once(("replaced", id(owner), attr), "%s.%s was replaced by other code while "
                                 "recording; it is left as it is now", getattr(owner, "__name__", owner), attr)
            elif own is _MISSING:
                delattr(owner, attr)
            else:
                setattr(owner, attr, own)

    def reinstall_apis(self) -> None:
        for owner, attr, own, wrapper in self._patched:
            if vars(owner).get(attr, _MISSING) is own:
                setattr(owner, attr, wrapper)

    def suspend(self) -> None:
        """Nothing of ours in place (while a graph compiles: the compiler parses the Python source it calls)."""
        self.restore_apis()
        for part in self.suspendables:
            part.suspend()

    def resume(self) -> None:
        for part in self.suspendables:
            part.resume()
        if self.api_active:
            self.reinstall_apis()
