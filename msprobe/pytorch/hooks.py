"""The collector: API hooks (TorchFunctionMode plus thin wrappers), module hooks and entry recording.

Threads: torch's function-mode stack is per thread. The mode is on the stack of the thread that called start()
for the whole recording; any other thread gets it for the time of each module forward call and optimizer step it
runs (hooks on the models given to start() and on optimizers), so that the APIs of DataParallel replicas, thread
pools and worker threads running the model are recorded. The Python-level wrappers (functionals, Tensor operators, collectives) see
every thread. Plain torch calls another thread makes outside those are not seen: the log says so once per thread
when one of its calls reaches a wrapper there."""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import threading

import torch
import torch.nn.functional as F  # noqa: N812
from torch._guards import CompileContext
from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack, _pop_mode, _push_mode

from msprobe.collect.debugger import Patches
from msprobe.collect.guard import one_line
from msprobe.collect.recording import Recording
from msprobe.collect.stacks import stack_lines
from msprobe.pytorch.module_hooks import ModuleHooks, compiled_paths, guard_compiled
from msprobe.pytorch.stats import SeenTensors, tensor_record, value_record

_HERE = os.path.dirname(os.path.abspath(__file__))
_MAX_DEPTH = 64

# APIs that are counted (and appear in construct.json) but whose data is not dumped: shape/layout
# changes, casts and constructors ("low risk" in the reference's terms).
LOW_RISK = frozenset("""
squeeze unsqueeze reshape reshape_as view view_as flatten unflatten expand expand_as repeat repeat_interleave
tile transpose permute moveaxis movedim swapaxes swapdims chunk unsafe_chunk split split_with_sizes
unsafe_split unsafe_split_with_sizes tensor_split hsplit vsplit dsplit unbind stack cat concat concatenate
hstack vstack dstack column_stack row_stack align_as align_to atleast_1d atleast_2d atleast_3d ravel clamp
unfold type type_as to float double int long half bfloat16 byte char bool cfloat numpy empty empty_like zeros
zeros_like ones ones_like full full_like arange linspace logspace eye identity diag diagflat diag_embed triu
tril triu_indices tril_indices clone __bool__ stride
""".split())

# What `risk_level` CORE dumps at L1/mix (the reference's "core" APIs): matrix products, convolutions, linear, the
# normalisations, embeddings, attention, the fused optimizers and the collectives (Distributed.*, all of them).
# The reference's own list misses `linear` and `chain_matmul` (two names run together); here they are core.
CORE_RISK = frozenset("""
_fused_adamw_ _fused_adam_ matmul __matmul__ bmm addmm addmm_ addbmm addbmm_ baddbmm baddbmm_ mm mv addmv addmv_
addr addr_ conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d conv_tbc convolution
_convolution chain_matmul linear bilinear multi_dot vecdot batch_norm instance_norm layer_norm group_norm
local_response_norm _batch_norm_impl_index batch_norm_elemt batch_norm_stats batch_norm_update_stats
batch_norm_gather_stats batch_norm_gather_stats_with_counts batch_norm_backward_elemt batch_norm_backward_reduce
embedding embedding_bag multi_head_attention_forward scaled_dot_product_attention
""".split())


def risk_allows(config, prefix: str, name: str) -> bool:
    """Whether `risk_level` lets API `prefix.name` be dumped (counted it always is). A `scope` or `list` of the
    config decides alone, as with the reference: what the user names is dumped whatever its risk. FOCUS (the
    default) leaves out LOW_RISK, CORE keeps CORE_RISK and the collectives only, ALL keeps everything."""
    level = config.risk_level
    if level == "ALL" or config.scope or config.api_list:
        return True
    if level == "CORE":
        return name in CORE_RISK or prefix == "Distributed"
    return name not in LOW_RISK

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


def _first_grad_tensor(value, depth=0):
    """The first tensor of a call's result with a grad_fn (the node its backward hook goes on), or None."""
    if isinstance(value, torch.Tensor):
        return value if value.grad_fn is not None else None
    if depth < 4 and isinstance(value, (list, tuple)):
        for item in value:
            found = _first_grad_tensor(item, depth + 1)
            if found is not None:
                return found
    return None


def _first_grad_fn(value):
    tensor = _first_grad_tensor(value)
    return tensor.grad_fn if tensor is not None else None


# calls that hand out a tensor's memory to code that may write it without torch (numpy, DLPack, a pointer)
_EXPOSING = frozenset({"numpy", "__array__", "__dlpack__", "data_ptr", "untyped_storage", "storage",
                       "_typed_storage"})


_READERS = frozenset({"is_complex", "is_floating_point", "is_contiguous", "item", "size", "dim", "numel", "stride",
                      "element_size", "__len__"})


def _reads_only(func) -> bool:
    """An unrecorded call that writes nothing and hands out no alias to write through behind torch: a tensor's
    attribute getter (`.grad`, `.shape`, `.dtype`; not `.data`, whose alias has a version counter of its own) or
    one of _READERS."""
    name = getattr(func, "__name__", None)
    if name == "__get__":
        return getattr(getattr(func, "__self__", None), "__name__", "data") != "data"
    return name in _READERS


def _returns_an_input(out, args, kwargs) -> bool:
    """The call's first output tensor is one of its argument tensors itself (`F.dropout(x, p=0)` in training,
    `x.contiguous()` of a contiguous x): it made no autograd node, and a hook on that tensor's grad_fn would
    record the backward of the op that produced the argument. Such a call has no backward entry (as the
    reference)."""
    first = _first_grad_tensor(out)
    return first is not None and any(first is value for value in (*args, *kwargs.values()))


_RTRUEDIV = torch.Tensor.__rtruediv__
_RDIV = torch.Tensor.__rdiv__
_NO_TORCH_FUNCTION = torch._C.DisableTorchFunction


class _ApiMode(TorchFunctionMode):
    def __init__(self, collector):
        super().__init__()
        self.collector = collector

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        col = self.collector
        # the compiler traces what the user's code does, nothing else
        if col._tls.busy or not col.api_active or torch.compiler.is_compiling():
            return func(*args, **kwargs)
        if func is _RTRUEDIV or func is _RDIV:
            # torch implements `other / tensor` as `tensor.reciprocal() * other`; record those two calls
            inverse = col.run_api("Tensor", "reciprocal", torch.Tensor.reciprocal, (args[0],), {})
            return col.run_api("Tensor", "__mul__", torch.Tensor.__mul__, (inverse, args[1]), {})
        try:
            prefix, name = api_table()[func]
        except (KeyError, TypeError):
            # not recorded (indexing, torch._foreach_mul_ ...): what it is given may change (SeenTensors)
            if not _reads_only(func):
                col.seen.touched((*args, *kwargs.values()), getattr(func, "__name__", None) in _EXPOSING)
            return func(*args, **kwargs)
        return col.run_api(prefix, name, func, args, kwargs)


def _remove_mode(mode) -> bool:
    """Take `mode` off this thread's torch function-mode stack wherever it is (modes pushed after it stay, in
    their order); whether it was there."""
    if not any(m is mode for m in _get_current_function_mode_stack()):
        return False
    above = []
    while True:
        top = _pop_mode()
        if top is mode:
            break
        above.append(top)
    for other in reversed(above):
        _push_mode(other)
    return True


class _ThreadState(threading.local):
    """The collector's per-thread state; the class attributes are each thread's starting values."""

    busy = False            # our own work, or inside a recorded call: nothing is recorded
    remember = False        # the records made now are kept for the calls that take the same tensors (SeenTensors)


class Collector(Recording):
    """Records the entries of one process into the debugger's StepWriter according to a DumpConfig."""

    def __init__(self, config, writer, errors):
        self.config = config
        self.writer = writer
        self.errors = errors
        self._tls = _ThreadState()
        self._count_lock = threading.Lock()
        self._risks: dict = {}        # "prefix.name" -> whether risk_level lets it be dumped (the config is fixed)
        self.api_active = False
        self.module_active = False
        self.generation = 0
        self.session = 0              # one per install: the threads holding the mode know which recording it is
        self._mode = _ApiMode(self)
        self._owner = None            # the thread whose stack holds the mode for the whole recording
        self._patches = Patches(errors)
        self._handles: list = []
        self._wrappers: dict = {}     # one wrapper per patched function for the collector's life (see _patch)
        self.modules = ModuleHooks(self)
        self.seen = SeenTensors()     # statistics of the tensors recorded and not changed since
        self.reset_counters()

    # ------------------------------------------------------------------ state
    @property
    def busy(self) -> bool:
        return self._tls.busy

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
        self.stack_cache: dict = {}       # formatted stacks per chain of (code, line) positions
        self._phases_seen: set = set()    # phases already in this step's construct.json
        self.seen.clear()
        self.modules.reset()
        self.generation += 1

    def thread_stack(self) -> list:
        """This thread's stack of module forward calls and phases (the parents in construct.json)."""
        tls = self._tls
        try:
            if tls.generation == self.generation:
                return tls.stack
        except AttributeError:
            pass
        tls.generation = self.generation
        tls.stack = []
        return tls.stack

    def parent(self):
        stack = self.thread_stack()
        return stack[-1] if stack else None

    def count(self, counts: dict, key: str) -> int:
        """The next call index of `key` (thread-safe)."""
        with self._count_lock:
            index = counts.get(key, 0)
            counts[key] = index + 1
        return index

    # ------------------------------------------------------------------ recording (collect.recording)
    def enclosing(self):
        return self.thread_stack()

    def record(self, value, prefix: str, depth: int = 0):
        if isinstance(value, torch.Tensor):
            return self.tensor_leaf(value, prefix)
        if depth >= _MAX_DEPTH:
            return None
        if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
            return [self.record(v, f"{prefix}.{i}", depth + 1) for i, v in enumerate(value)]
        if isinstance(value, torch.Size):
            return {"type": "torch.Size", "value": list(value)}
        if isinstance(value, dict):
            return {str(k): self.record(v, f"{prefix}.{k}", depth + 1) for k, v in value.items()}
        return value_record(value)

    def tensor_leaf(self, tensor: torch.Tensor, name: str) -> dict:
        """A tensor's record; what fails (statistics, its file) leaves a one-line dump_error in this record only.
        Computed with __torch_function__ off: no mode sees our own calls (even a tensor's properties would go
        through it), and no tensor subclass of the user's runs code for them."""
        with torch._C.DisableTorchFunction():
            return self._tensor_leaf(tensor, name)

    def _tensor_leaf(self, tensor: torch.Tensor, name: str) -> dict:
        record = tensor_record(tensor, self.config.summary_mode, self.seen, self._tls.remember)
        if "dump_error" in record:
            self.errors.once(("statistics", record["dtype"], str(tensor.layout)), "a %s tensor (%s) at %s: %s; "
                             "its record says so (dump_error) and training continues", record["dtype"],
                             str(tensor.layout).replace("torch.", ""), name, record["dump_error"])
        if self.config.task == "tensor":
            try:
                record["data_name"] = self.writer.save_tensor(name, tensor)
            except Exception as exc:  # noqa: BLE001 - the user's training must go on
                reason = self.errors.failed("tensor file", name, exc, "its record has no data_name (dump_error) "
                                            "and training continues")
                record["dump_error"] = f"{record['dump_error']}; {reason}" if "dump_error" in record else reason
        return record

    def record_leaf(self, value, name: str):
        """record() of one leaf whose failure must stay inside its own record (a parameter gradient)."""
        try:
            return self.record(value, name)
        except Exception as exc:  # noqa: BLE001 - the user's training must go on
            reason = self.errors.failed("value", name, exc)
            if isinstance(value, torch.Tensor):
                return {"type": "torch.Tensor", "dtype": str(value.dtype), "shape": list(value.shape),
                        "Max": None, "Min": None, "Mean": None, "Norm": None, "dump_error": reason}
            return {"type": type(value).__name__, "value": None, "dump_error": reason}

    @contextlib.contextmanager
    def _remembering(self):
        """The records made inside are remembered for the calls that take the same tensors unchanged (SeenTensors),
        while the API hooks see every torch call that could change them."""
        tls = self._tls
        tls.remember = self.api_active
        try:
            yield
        finally:
            tls.remember = False

    def record_inputs(self, name: str, body: dict, args, kwargs) -> None:
        """A call's arguments (a parameter taken by the forward and again by the optimizer is reduced once)."""
        with self._remembering():
            super().record_inputs(name, body, args, kwargs)

    def record_outputs(self, name: str, body: dict, out) -> None:
        """A call's outputs (an API's, a module's)."""
        with self._remembering():
            super().record_outputs(name, body, out)

    def record_backward(self, name: str, body: dict, grad_outputs, grad_inputs) -> None:
        with self._remembering():
            super().record_backward(name, body, grad_outputs, grad_inputs)

    def log_once(self, key, message: str, *args) -> None:
        self.errors.once(key, message, *args)

    @contextlib.contextmanager
    def shielded(self, what: str):
        """Our own work inside a hook: never recorded (busy), and an error is logged once and swallowed, so that
        it never reaches the user's training step."""
        with self.working():
            try:
                yield
            except Exception as exc:  # noqa: BLE001 - the user's training must go on
                self.errors.once((type(exc).__name__, "hook"), "a hook failed in %s (%s); what it was recording is "
                                 "skipped and training continues", what, one_line(exc))

    def stack_lines(self) -> tuple:
        return stack_lines(self.stack_cache, _HERE)

    def add_entry(self, name: str, body: dict, stack=None) -> None:
        self.writer.add(name, body, stack)

    # ------------------------------------------------------------------ APIs
    def run_api(self, prefix: str, name: str, func, args, kwargs, collective: bool = False):
        if CompileContext.try_get() is not None:     # torch.compile's own machinery at work (not its tracing)
            return func(*args, **kwargs)
        key = f"{prefix}.{name}"
        index = self.count(self.api_counts, key)
        forward = f"{key}.{index}.forward"
        parent = self.parent()
        if self.config.level == "mix":
            self.writer.add_construct(forward, parent)
        risk_ok = self._risks.get(key)
        if risk_ok is None:
            risk_ok = self._risks[key] = risk_allows(self.config, prefix, name)
        forward_ok = risk_ok and self.selected(forward) and self.direction_ok("forward")
        dump_backward = risk_ok and self.selected(f"{key}.{index}.backward")
        tls = self._tls
        previous = tls.busy            # Collector.working(), inline: the APIs called inside are not recorded
        tls.busy = True
        try:
            body: dict = {}
            stack = None
            with _NO_TORCH_FUNCTION():          # our own work: no mode or tensor subclass runs for it
                if forward_ok:
                    self.record_inputs(forward, body, args, kwargs)
                    stack = self.guard(forward, body, "stack", self.stack_lines)
                watched = self.seen.watch((*args, *kwargs.values()) if kwargs else args)
            try:
                out = func(*args, **kwargs)
            except BaseException as exc:
                with _NO_TORCH_FUNCTION():
                    self.seen.touched((*args, *kwargs.values()))
                    if forward_ok:          # the call that failed is often what the user is looking for
                        body["dump_error"] = f"the call raised {one_line(exc)}"
                        self.add_entry(forward, body, stack)
                raise
            with _NO_TORCH_FUNCTION():
                if collective:
                    self.seen.forget()
                elif name in _EXPOSING:
                    self.seen.touched((*args, *kwargs.values()), exposed=True)
                else:
                    self.seen.after(watched, "batch_norm" in name or "instance_norm" in name)
                if forward_ok:
                    self.record_outputs(forward, body, (*args, *kwargs.values()) if collective else out)
                if dump_backward and not collective and self.direction_ok("backward") and torch.is_grad_enabled() \
                        and not _returns_an_input(out, args, kwargs):
                    self.guard(forward, body, "backward hook",
                               lambda: self._hook_api_backward(f"{key}.{index}.backward", parent, out))
                if forward_ok:
                    self.add_entry(forward, body, stack)
            return out
        finally:
            tls.busy = previous

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
                    self.writer.add_construct(name, parent_bw)
                self.record_backward(name, body, grad_outputs, grad_inputs)
                self.add_entry(name, body)
            return None
        grad_fn.register_hook(hook)

    # ------------------------------------------------------------------ install / uninstall
    def install_api_hooks(self, models=()) -> None:
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
        self._install_thread_scopes(models)
        self.api_active = True
        self._owner = threading.get_ident()
        self._enter_mode(scoped=False)

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
        self.seen.clear()         # an optimizer may write through code torch does not see (a C++ extension)
        if self.api_active:
            self._enter_mode(scoped=True)
            if phase not in self._phases_seen:
                self._phases_seen.add(phase)
                self.writer.add_construct(phase, None)
            self.thread_stack().append(phase)

    def exit_phase(self, phase: str) -> None:
        self.seen.clear()
        stack = self.thread_stack()
        if phase in stack:
            del stack[len(stack) - 1 - stack[::-1].index(phase):]
            self._leave_mode()

    # ------------------------------------------------------------------ threads
    def _install_thread_scopes(self, models) -> None:
        """The forward calls of the models given to start() run, in any thread, with the mode on that thread's
        stack (see the module doc). Not on a compiled or TorchScript root: nothing inside those is recorded."""
        def enter(_module, _args):
            if not torch.compiler.is_compiling():
                self._enter_mode(scoped=True)

        def leave(_module, _args, _out):
            if not torch.compiler.is_compiling():
                self._leave_mode()

        for model in models:
            if isinstance(model, torch.jit.ScriptModule) or "" in compiled_paths(model):
                continue
            self._handles.append(model.register_forward_pre_hook(enter))
            self._handles.append(model.register_forward_hook(leave, always_call=True))

    def _enter_mode(self, scoped: bool) -> None:
        """Put the mode on this thread's stack: for the recording (the thread of start()) or for one scope."""
        tls = self._tls
        if getattr(tls, "mode_session", None) == self.session:
            if getattr(tls, "scopes", 0):
                tls.scopes += 1
            return
        if not self.api_active and scoped:
            return
        self.tidy_thread()
        _push_mode(self._mode)
        tls.mode_session = self.session
        tls.scopes = 1 if scoped else 0
        if scoped:
            thread = threading.current_thread().name
            self.errors.once(("thread", threading.get_ident(), thread), "thread '%s' runs torch while recording: its "
                             "APIs are recorded inside module forward calls and optimizer steps (torch's function "
                             "mode is per thread; its other plain torch calls are not seen)", thread)

    def _leave_mode(self) -> None:
        tls = self._tls
        if getattr(tls, "mode_session", None) != self.session or not getattr(tls, "scopes", 0):
            return
        tls.scopes -= 1
        if not tls.scopes:
            _remove_mode(self._mode)
            tls.mode_session = None

    def tidy_thread(self) -> None:
        """Take off this thread's stack the mode of an earlier recording that was stopped from another thread."""
        tls = self._tls
        session = getattr(tls, "mode_session", None)
        if session is not None and (session != self.session or not self.api_active):
            _remove_mode(self._mode)
            tls.mode_session = None
            tls.scopes = 0

    def note_thread(self) -> None:
        """A wrapper ran in a thread that does not hold the mode: say once that its plain torch calls are unseen."""
        if getattr(self._tls, "mode_session", None) != self.session:
            thread = threading.current_thread().name
            self.errors.once(("unseen thread", threading.get_ident(), thread), "thread '%s' calls torch outside "
                             "module forward calls while recording: its functionals and Tensor operators are "
                             "recorded, its other torch functions and Tensor methods there are not seen (torch's "
                             "function mode is per thread)", thread)

    def _patch(self, owner, name: str, prefix: str, collective: bool = False, phase: bool = False) -> None:
        """Replace owner.name by its wrapper until uninstall(). The wrapper object is made once per collector: a
        function compiled with torch.compile is guarded on the identity of the globals it calls, so a new wrapper
        at every start() would recompile it at every step."""
        original = getattr(owner, name)
        wrapper = self._wrappers.get((id(owner), name))
        if wrapper is None or wrapper.__wrapped__ is not original:
            make = self._phase_wrapper if phase else self._wrapper
            wrapper = self._wrappers[(id(owner), name)] = make(prefix, name, original, collective)
        self._patches.set(owner, name, wrapper)

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
            if collector._tls.busy or not collector.api_active or torch.compiler.is_compiling():
                return original(*args, **kwargs)
            if threading.get_ident() != collector._owner:
                collector.note_thread()
            return collector.run_api(prefix, name, original, args, kwargs, collective=collective)
        return wrapper

    def uninstall(self) -> None:
        """Remove every hook and patch of this recording; from any thread. The mode leaves the stack of the calling
        thread; a thread that holds it still (stopped from another thread) drops it at its next start(), stop() or
        step(), and until then the mode passes every call through."""
        self.api_active = False
        self.module_active = False
        self._patches.restore()
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self.tidy_thread()

    def begin(self) -> None:
        """A new recording (start()): a new session for the per-thread mode bookkeeping; nothing seen before (the
        code between stop() and start() runs unseen)."""
        self.session += 1
        self.seen.clear()

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
