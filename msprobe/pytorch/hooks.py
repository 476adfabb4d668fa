"""The collector: API hooks (TorchFunctionMode plus thin wrappers), module hooks and entry recording."""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
import threading
import traceback

import torch
import torch.nn.functional as F  # noqa: N812
from torch._guards import CompileContext
from torch.overrides import TorchFunctionMode

from msprobe.log import get_logger
from msprobe.pytorch.module_hooks import ModuleHooks, guard_compiled
from msprobe.pytorch.stats import tensor_record, value_record
from msprobe.pytorch.writer import StepWriter

_HERE = os.path.dirname(os.path.abspath(__file__))
_MAX_DEPTH = 64

# APIs that are counted (and appear in construct.json) but whose data is not dumped: shape/layout
# changes, casts and constructors ("low risk" in the reference's terms).
LOW_RISK = frozenset("""
squeeze unsqueeze reshape reshape_as view view_as flatten unflatten expand expand_as repeat repeat_interleave
tile transpose permute moveaxis movedim swapaxes swapdims chunk unsafe_chunk split split_with_sizes
unsafe_split unsafe_split_with_sizes tensor_split hsplit vsplit dsplit unbind stack cat concat concatenate
hstack vstack dstack column_stack row_stack align_as align_to atleast_1d atleast_2d atleast_3d ravel clamp
unfold type_as to float double int long half bfloat16 byte char bool cfloat numpy empty empty_like zeros
zeros_like ones ones_like full full_like arange linspace logspace eye identity diag diagflat diag_embed triu
tril triu_indices tril_indices clone __bool__ stride
""".split())

# Tensor methods / torch functions that are not hooked at all: metadata queries, indexing helpers, Python
# protocol methods and autograd plumbing, as with the reference. Also (docs/dump.md, "What is recorded"):
# detach (autograd bookkeeping, called by the optimizers themselves), `~` and the random generators (exact,
# no precision content; the reference does not record them), and the Python-level reflected operators
# (`a @ t` -> torch.matmul(a, t) ...), whose inner torch call is recorded instead, as the reference does.
_NOT_HOOKED = frozenset("""
view contiguous __getitem__ size dim item tolist numel __len__ __iter__ __repr__ __format__
__hash__ __reduce_ex__ __deepcopy__ __setstate__ __array__ __array_wrap__ data_ptr is_contiguous
storage_offset element_size nelement requires_grad_ retain_grad register_hook
register_post_accumulate_grad_hook backward is_floating_point is_complex is_tensor is_grad_enabled
is_nonzero get_device untyped_storage storage __contains__ __index__ __int__ __float__ __complex__
__get__ __set__ __delete__ __torch_function__ __torch_dispatch__ _is_view is_set_to __reversed__ __dir__
__rtruediv__ __rdiv__ dim_order is_inference is_shared share_memory_ _has_compatible_shallow_copy_type tensor as_tensor from_numpy
get_default_dtype is_storage is_autocast_enabled
detach detach_ __invert__ __rmatmul__ __rfloordiv__ __rlshift__ __rrshift__
rand rand_like randn randn_like randint randint_like randperm uniform_ random_
""".split())
_PRIVATE_HOOKED = frozenset({"_foreach_norm", "_fused_adam_", "_fused_adamw_"})

# Python operators reach a TorchFunctionMode under the method's name (`a + b` arrives as Tensor.add), so
# these are wrapped directly to keep the reference's names (Tensor.__add__ ...).
TENSOR_OPERATORS = tuple(f"__{n}__" for n in """
add radd iadd sub isub mul rmul imul truediv itruediv div idiv floordiv ifloordiv mod rmod imod
pow rpow ipow matmul and rand iand or ror ior xor rxor ixor lshift ilshift rshift irshift eq ne lt le gt ge
neg abs
""".split())

DISTRIBUTED_APIS = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "broadcast",
                    "reduce", "reduce_scatter", "reduce_scatter_tensor", "scatter", "gather", "all_to_all",
                    "all_to_all_single", "send", "recv", "isend", "irecv", "batch_isend_irecv")


def _hooked_name(name: str) -> bool:
    if name in _NOT_HOOKED:
        return False
    return not name.startswith("_") or name in _PRIVATE_HOOKED or (name.startswith("__") and name.endswith("__"))


@functools.lru_cache(maxsize=1)
def api_table() -> dict:
    """func object -> (prefix, name) for every hooked torch function, Tensor method and functional."""
    table = {}
    for namespace in (torch, torch.linalg, torch.special, torch.fft):
        for name in dir(namespace):
            obj = getattr(namespace, name, None)
            if callable(obj) and not inspect.isclass(obj) and _hooked_name(name):
                table.setdefault(obj, ("Torch", name))
    for name in dir(torch.Tensor):
        obj = inspect.getattr_static(torch.Tensor, name, None)
        if callable(obj) and not isinstance(obj, (type, property)) and _hooked_name(name):
            table[getattr(torch.Tensor, name)] = ("Tensor", name)
    for name, obj in functional_apis().items():
        table[obj] = ("Functional", name)
    return table


@functools.lru_cache(maxsize=1)
def functional_apis() -> dict:
    result = {}
    for name in dir(F):
        obj = getattr(F, name)
        if name.startswith("_") or inspect.isclass(obj) or not callable(obj):
            continue
        if getattr(obj, "__module__", None) in ("torch.nn.functional", "torch._C._nn") or \
                (inspect.isbuiltin(obj) and getattr(obj, "__module__", "").startswith("torch")):
            result[name] = obj
    return result


def _own_frame(filename: str) -> bool:
    return os.path.dirname(os.path.abspath(filename)) == _HERE


def _stack_lines(cache: dict) -> tuple:
    """The caller's stack, innermost first, without our own frames. Formatting (source lines included) is
    cached per chain of (code, line) positions: a training step calls the same sites again and again."""
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


def _first_grad_fn(value, depth=0):
    if isinstance(value, torch.Tensor):
        return value.grad_fn
    if depth < 4 and isinstance(value, (list, tuple)):
        for item in value:
            found = _first_grad_fn(item, depth + 1)
            if found is not None:
                return found
    return None


class _ApiMode(TorchFunctionMode):
    def __init__(self, collector):
        super().__init__()
        self.collector = collector

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if torch.compiler.is_compiling():      # the compiler traces what the user's code does, nothing else
            return func(*args, **kwargs)
        col = self.collector
        if col.busy or not col.api_active:
            return func(*args, **kwargs)
        if func is torch.Tensor.__rtruediv__ or func is torch.Tensor.__rdiv__:
            # torch implements `other / tensor` as `tensor.reciprocal() * other`; record those two calls
            inverse = col.run_api("Tensor", "reciprocal", torch.Tensor.reciprocal, (args[0],), {})
            return col.run_api("Tensor", "__mul__", torch.Tensor.__mul__, (inverse, args[1]), {})
        try:
            prefix, name = api_table()[func]
        except (KeyError, TypeError):
            return func(*args, **kwargs)
        return col.run_api(prefix, name, func, args, kwargs)


class Collector:
    """Records entries of one process into a StepWriter according to a DumpConfig."""

    def __init__(self, config):
        self.config = config
        self.writer = StepWriter(config.task, config.level)
        self._tls = threading.local()
        self.api_active = False
        self.module_active = False
        self.generation = 0
        self._errors_logged: set = set()
        self._mode = None
        self._patched: list = []
        self._handles: list = []
        self._wrappers: dict = {}     # one wrapper per patched function for the collector's life (see _patch)
        self.modules = ModuleHooks(self)
        self.reset_counters()

    # ------------------------------------------------------------------ state
    @property
    def busy(self) -> bool:
        return getattr(self._tls, "busy", False)

    @busy.setter
    def busy(self, value: bool) -> None:
        self._tls.busy = value

    @contextlib.contextmanager
    def working(self):
        """Our own work, or a call whose inner APIs belong to it: the APIs called inside are not recorded (busy,
        per thread); the previous state comes back however the block ends."""
        previous = self.busy
        self.busy = True
        try:
            yield
        finally:
            self.busy = previous

    def reset_counters(self) -> None:
        self.api_counts: dict = {}
        self.module_counts: dict = {}
        self.param_grad_counts: dict = {}
        self.module_stack: list = []
        self.stack_cache: dict = {}       # formatted stacks per chain of (code, line) positions
        self.modules.reset()
        self.generation += 1

    # ------------------------------------------------------------------ filters
    def selected(self, name: str) -> bool:
        """Whether entry `name` is dumped: it holds one of the `scope` substrings (when given) and one of the `list`
        substrings (when given) or, at level mix, is called inside a module whose name holds one (as the
        reference's collector reads `list`: the culprit API and its module, msprobe compare -da's next dump)."""
        cfg = self.config
        if cfg.scope and not any(s in name for s in cfg.scope):
            return False
        if not cfg.api_list or any(s in name for s in cfg.api_list):
            return True
        return cfg.level == "mix" and any(s in module for module in self.module_stack for s in cfg.api_list)

    def direction_ok(self, direction: str) -> bool:
        modes = set(self.config.data_mode)
        wanted = modes & {"forward", "backward"}
        return "all" in modes or not wanted or direction in wanted

    def section_ok(self, section: str) -> bool:
        modes = set(self.config.data_mode)
        wanted = modes & {"input", "output"}
        return "all" in modes or not wanted or section in wanted

    # ------------------------------------------------------------------ recording
    def record(self, value, prefix: str, depth: int = 0):
        if isinstance(value, torch.Tensor):
            rec = tensor_record(value, self.config.summary_mode)
            if self.config.task == "tensor":
                data_name = prefix + ".pt"
                self.writer.save_tensor(data_name, value)
                rec["data_name"] = data_name
            return rec
        if depth >= _MAX_DEPTH:
            return None
        if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
            return [self.record(v, f"{prefix}.{i}", depth + 1) for i, v in enumerate(value)]
        if isinstance(value, torch.Size):
            return {"type": "torch.Size", "value": list(value)}
        if isinstance(value, dict):
            return {str(k): self.record(v, f"{prefix}.{k}", depth + 1) for k, v in value.items()}
        return value_record(value)

    def log_once(self, key, message: str, *args) -> None:
        if key not in self._errors_logged:
            self._errors_logged.add(key)
            get_logger().warning(message, *args)

    def guard(self, name: str, body: dict, what: str, func):
        """Run one recording step; an error is logged once and marks the entry instead of propagating."""
        try:
            return func()
        except Exception as exc:  # noqa: BLE001 - the user's training must go on
            self.log_once((type(exc).__name__, what),
                           "msprobe dump: recording %s of %s failed (%s: %s); the entry is marked with dump_error "
                           "and training continues", what, name, type(exc).__name__, exc)
            body["dump_error"] = f"{what}: {type(exc).__name__}: {exc}"
            return None

    @contextlib.contextmanager
    def shielded(self, what: str):
        """Our own work inside a hook: never recorded (busy), and an error is logged once and swallowed, so that
        it never reaches the user's training step."""
        with self.working():
            try:
                yield
            except Exception as exc:  # noqa: BLE001 - the user's training must go on
                self.log_once((type(exc).__name__, "hook"),
                               "msprobe dump: a hook failed in %s (%s: %s); what it was recording is skipped and "
                               "training continues", what, type(exc).__name__, exc)

    def stack_lines(self) -> tuple:
        return _stack_lines(self.stack_cache)

    def record_inputs(self, name: str, body: dict, args, kwargs) -> None:
        """Record the inputs before the call (in-place APIs change them)."""
        if not self.section_ok("input"):
            return

        def work():
            body["input_args"] = self.record(list(args), f"{name}.input")
            body["input_kwargs"] = {k: self.record(v, f"{name}.kwargs.{k}") for k, v in kwargs.items()}
        self.guard(name, body, "input", work)

    def record_outputs(self, name: str, body: dict, out) -> None:
        if not self.section_ok("output"):
            return
        values = list(out) if isinstance(out, tuple) else [out]
        self.guard(name, body, "output", lambda: body.__setitem__("output", self.record(values, f"{name}.output")))

    def add_entry(self, name: str, body: dict, stack=None) -> None:
        self.writer.data[name] = body
        if stack is not None:
            self.writer.add_stack(name, stack)

    # ------------------------------------------------------------------ APIs
    def run_api(self, prefix: str, name: str, func, args, kwargs, collective: bool = False):
        if CompileContext.try_get() is not None:     # torch.compile's own machinery at work (not its tracing)
            return func(*args, **kwargs)
        key = f"{prefix}.{name}"
        index = self.api_counts.get(key, 0)
        self.api_counts[key] = index + 1
        forward = f"{key}.{index}.forward"
        parent = self.module_stack[-1] if self.module_stack else None
        if self.config.level == "mix":
            self.writer.construct[forward] = parent
        dump = name not in LOW_RISK and self.selected(forward)
        dump_backward = name not in LOW_RISK and self.selected(f"{key}.{index}.backward")
        with self.working():
            body: dict = {}
            stack = None
            if dump and self.direction_ok("forward"):
                self.record_inputs(forward, body, args, kwargs)
                stack = self.guard(forward, body, "stack", self.stack_lines)
            out = func(*args, **kwargs)
            if dump and self.direction_ok("forward"):
                self.record_outputs(forward, body, (*args, *kwargs.values()) if collective else out)
                self.add_entry(forward, body, stack)
            if dump_backward and not collective and self.direction_ok("backward") and torch.is_grad_enabled():
                self.guard(forward, body, "backward hook",
                           lambda: self._hook_api_backward(f"{key}.{index}.backward", parent, out))
            return out

    def _hook_api_backward(self, name: str, parent, out) -> None:
        grad_fn = _first_grad_fn(out)
        if grad_fn is None:
            return
        generation = self.generation
        parent_bw = parent.replace(".forward.", ".backward.") if parent else None

        def hook(grad_inputs, grad_outputs):
            if generation != self.generation or not self.api_active:
                return None
            with self.shielded(name):
                self.modules.flush()        # module entries complete before this node ran come first
                body: dict = {}
                if self.config.level == "mix":
                    self.writer.construct[name] = parent_bw
                if self.section_ok("input"):
                    self.guard(name, body, "input",
                               lambda: body.__setitem__("input", self.record(list(grad_outputs), f"{name}.input")))
                if self.section_ok("output"):
                    self.guard(name, body, "output",
                               lambda: body.__setitem__("output", self.record(list(grad_inputs), f"{name}.output")))
                self.add_entry(name, body)
            return None
        grad_fn.register_hook(hook)

    # ------------------------------------------------------------------ install / uninstall
    def install_api_hooks(self) -> None:
        if self._mode is not None:
            return
        for name, original in functional_apis().items():
            if inspect.isfunction(original):
                self._patch(F, name, "Functional")
        for name in TENSOR_OPERATORS:
            if getattr(torch.Tensor, name, None) is not None:
                self._patch(torch.Tensor, name, "Tensor")
        if torch.distributed.is_available():
            import torch.distributed as dist

            for name in DISTRIBUTED_APIS:
                if getattr(dist, name, None) is not None:
                    self._patch(dist, name, "Distributed", collective=True)
        self._install_phases()
        self._mode = _ApiMode(self)
        self._mode.__enter__()
        self.api_active = True

    # Optimizer steps and gradient clipping are phases of their own in construct.json: the APIs they call get
    # the parent "optimizer" or "clip_grad", as the reference records them.
    def _install_phases(self) -> None:
        import torch.nn.utils as nn_utils
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        for name in ("clip_grad_norm_", "clip_grad_value_"):
            if getattr(nn_utils, name, None) is not None:
                self._patch(nn_utils, name, "clip_grad", phase=True)
        self._handles.append(register_optimizer_step_pre_hook(lambda *_: self.enter_phase("optimizer")))
        self._handles.append(register_optimizer_step_post_hook(lambda *_: self.exit_phase("optimizer")))

    def enter_phase(self, phase: str) -> None:
        if self.api_active:
            self.writer.construct.setdefault(phase, None)
            self.module_stack.append(phase)

    def exit_phase(self, phase: str) -> None:
        if phase in self.module_stack:
            del self.module_stack[len(self.module_stack) - 1 - self.module_stack[::-1].index(phase):]

    def _patch(self, owner, name: str, prefix: str, collective: bool = False, phase: bool = False) -> None:
        """Replace owner.name by its wrapper until uninstall(). The wrapper object is made once per collector: a
        function compiled with torch.compile is guarded on the identity of the globals it calls, so a new wrapper
        at every start() would recompile it at every step."""
        original = getattr(owner, name)
        wrapper = self._wrappers.get((id(owner), name))
        if wrapper is None or wrapper.__wrapped__ is not original:
            make = self._phase_wrapper if phase else self._wrapper
            wrapper = self._wrappers[(id(owner), name)] = make(prefix, name, original, collective)
        self._patched.append((owner, name, original))
        setattr(owner, name, wrapper)

    def _phase_wrapper(self, phase, _name, original, _collective):
        collector = self

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            if torch.compiler.is_compiling():
                return original(*args, **kwargs)
            collector.enter_phase(phase)
            try:
                return original(*args, **kwargs)
            finally:
                collector.exit_phase(phase)
        return wrapper

    def _wrapper(self, prefix, name, original, collective=False):
        collector = self

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            if torch.compiler.is_compiling() or collector.busy or not collector.api_active:
                return original(*args, **kwargs)
            return collector.run_api(prefix, name, original, args, kwargs, collective=collective)
        return wrapper

    def uninstall(self) -> None:
        self.api_active = False
        self.module_active = False
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self._mode = None
        for owner, name, original in reversed(self._patched):
            setattr(owner, name, original)
        self._patched = []
        for handle in self._handles:
            handle.remove()
        self._handles = []

    # ------------------------------------------------------------------ modules
    def guard_compiled(self, models) -> None:
        guard_compiled(self, models, self._handles)

    def install_module_hooks(self, models) -> None:
        self.modules.install(models, self._handles)
        self.module_active = True

    def finish_modules(self) -> None:
        """Before stop(): the module backward entries still waiting are written, the hooks left on leaves go."""
        with self.shielded("stop"):
            self.modules.stop()
