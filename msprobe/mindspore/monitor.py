"""TrainerMon for MindSpore PyNative: the reference's drop-in training monitor (its constructor, set_monitor and config
keys), a thin adapter of msprobe.monitor.engine, the same engine, rows and files as the PyTorch TrainerMon.

Hooks, all outside the compiled graphs and none changing a value:
* cells: forward pre/post hooks on the model's cells (msprobe.mindspore.cells.walk_cells: each cell once, nothing
  inside an @ms.jit cell) record their inputs and outputs; the gradients of a call's outputs and of its arguments
  come from one CellBackwardHook bound to that call (msprobe.mindspore.collector.BackwardBinding, the dump
  collector's backward hook), so an argument's gradient is this call's contribution;
* parameters: Parameter.register_hook gives each parameter's gradient as backward computes it (before any
  reduction; summed over the step's micro-batches), from which the global gradient norm is taken too;
* the optimizer (an nn.Optimizer or mint.optim Cell: forward pre/post hooks, else its step() wrapped): the
  gradients it is given (after reduction), the parameters before and after, the moments it holds (Adam's
  moment1/moment2, AdamWeightDecay's moments1/moments2, mint's exp_avg/exp_avg_sq, momentum buffers...), the update
  ratio; the step boundary;
* the model's forward under a gradient computation starts a micro-step (a forward outside one, an evaluation, is not
  recorded); the loss is the 0-d tensor the model returns, else the one whose gradient value_and_grad / grad /
  GradOperation (TrainOneStepCell) takes (their PyNative forward, mindspore.ops.composite.base, is wrapped).

Statistics: msprobe.mindspore.monitor_stats (on an accelerator by MindSpore ops on the device, one transfer per
step; on the CPU by numpy on the tensor's memory)."""

from __future__ import annotations

import mindspore as ms
from mindspore import Tensor, mint, nn

from msprobe.collect.debugger import not_recording
from msprobe.mindspore import monitor_stats as stats
from msprobe.mindspore.cells import walk_cells
from msprobe.mindspore.collector import BackwardBinding, differentiable
from msprobe.monitor.slots import slots
from msprobe.monitor.trainer import HooksBase, TrainerMonBase, unrecorded

try:                              # MindSpore 2.9+
    from mindspore.graph.api import _pynative_executor
except ImportError:               # MindSpore before 2.9
    from mindspore.common.api import _pynative_executor

# None: statistics on the host when the device target is the CPU, else by ops on the device; True/False forces one
HOST_STATISTICS: bool | None = None

# optimizer class (or a base of it) -> (its first-moment ParameterTuple, its second-moment one), each parallel to
# optimizer.parameters; an optimizer not listed is read by the generic names below
# (mindspore.nn's optimizers; mint.optim's are read by the generic names)
MOMENTS = {
    "Adam": ("moment1", "moment2"), "AdamOffload": ("moment1", "moment2"), "AdaMax": ("moment1", "moment2"),
    "LazyAdam": ("moment1", "moment2"), "AdamWeightDecay": ("moments1", "moments2"), "Lamb": ("moments1", "moments2"),
    "Momentum": ("moments", None), "SGD": ("accum", None), "RMSProp": ("moment", "ms"), "Adagrad": (None, "accum"),
    "ProximalAdagrad": (None, "accum"), "Adadelta": (None, "accum"), "FTRL": (None, "moments"),
}
FIRST_MOMENTS = ("exp_avg", "moment1", "moments1", "momentum_buf", "momentum_buffer")
SECOND_MOMENTS = ("exp_avg_sq", "moment2", "moments2")


def is_tensor(value) -> bool:
    return isinstance(value, Tensor)


def requires_grad() -> bool:
    """Whether the forward running now is one a gradient will be taken of (PyNative)."""
    return bool(_pynative_executor.requires_grad())


class TrainerMon(TrainerMonBase):
    """The training monitor for MindSpore PyNative.

        monitor = TrainerMon("monitor_config.json", params_have_main_grad=False)
        monitor.set_monitor(model, optimizer=optimizer, grad_acc_steps=1)
    """

    framework = "mindspore"
    model_kind = "a mindspore.nn.Cell"

    def _is_model(self, model) -> bool:
        return isinstance(model, nn.Cell)

    def _is_optimizer(self, optimizer) -> bool:
        return isinstance(optimizer, nn.Cell) or super()._is_optimizer(optimizer)

    def _make_hooks(self, chunks: list, optimizer, grad_acc_steps: int):
        return _Hooks(self, chunks, optimizer, grad_acc_steps)

    def _rank(self) -> int:
        return _rank()


def _rank() -> int:
    try:
        from mindspore.communication import GlobalComm, get_rank

        return int(get_rank()) if GlobalComm.INITED else 0
    except Exception:  # noqa: BLE001 - no communication package or not initialised: one process
        return 0


def _inner_optimizer(optimizer):
    """The optimizer holding the parameters and states: an nn.Optimizer / mint.optim Cell, or a wrapper's
    .optimizer."""
    for _ in range(4):
        if isinstance(optimizer, nn.Cell) and getattr(optimizer, "parameters", None) is not None:
            return optimizer
        optimizer = getattr(optimizer, "optimizer", None)
    return None


def _loss_of(out):
    """The loss in a model's or a gradient function's output: a 0-d floating tensor, the first item of a tuple or
    list (value_and_grad(has_aux=True): (loss, aux...)), or a dict's 'loss' entry."""
    if isinstance(out, dict):
        out = out.get("loss")
    elif isinstance(out, (tuple, list)) and out:
        out = out[0]
    if stats.is_float(out) and out.ndim == 0:
        return out
    return None


def _owners(model) -> dict:
    """id(parameter) -> the path of the cell holding it (its row's module: MindSpore names a parameter by its own
    name, which need not be that path, e.g. inside a TrainOneStepCell)."""
    found: dict = {}
    held: dict = {}             # in a ParameterTuple attribute (TrainOneStepCell.weights): a cell's second choice
    for path, cell in model.cells_and_names():
        for key, param in getattr(cell, "_params", {}).items():
            (held if "." in key else found).setdefault(id(param), path)
    return {**held, **found}


class _Param:
    __slots__ = ("param", "name", "module", "vpp", "target")

    def __init__(self, param, name: str, module: str, vpp: int):
        self.param, self.name, self.module, self.vpp, self.target = param, name, module, vpp, False


class _Call:
    """One call of a tapped cell, from its forward pre-hook to its backward hook."""

    __slots__ = ("prefix", "name", "vpp", "micro", "in_slots", "out_slots", "binding", "generation", "forward",
                 "backward", "arg_labels", "out_labels")

    def __init__(self, prefix, name, vpp, micro, generation, forward, backward):
        self.prefix, self.name, self.vpp, self.micro = prefix, name, vpp, micro
        self.generation, self.forward, self.backward = generation, forward, backward
        self.in_slots: list = []
        self.out_slots: list = []
        self.binding = None
        self.arg_labels: list = []      # the label of each tensor positional argument (the backward hook's order)
        self.out_labels: list = []      # the label of each tensor of the result the backward hook took


def _result_labels(output) -> list:
    """The labels of the tensors of a call's result a backward hook is applied to (collector.hookable's order)."""
    if isinstance(output, Tensor):
        return ["output"]
    if isinstance(output, (tuple, list)):
        single = len(output) == 1
        return [("output" if single else f"output_{i}") for i, v in enumerate(output) if isinstance(v, Tensor)]
    if isinstance(output, dict):
        return [f"output_{k}" for k, v in output.items() if isinstance(v, Tensor)]
    return []


class _Hooks(HooksBase):
    """The MindSpore side of one TrainerMon: the engine's adapter (to_host, apply, any_rank, structure) and every
    hook. Each hook body is guarded: a failure switches its part off (engine.fail) and training goes on."""

    framework = "mindspore"
    step_call = "an optimizer call"
    skipped_example = "a loss scale overflow"

    def __init__(self, monitor: TrainerMon, chunks: list, optimizer, grad_acc_steps: int):
        super().__init__(monitor, chunks, optimizer, _inner_optimizer(optimizer), grad_acc_steps)
        self.host = stats.on_host() if HOST_STATISTICS is None else HOST_STATISTICS
        self.bindings: list = []                # the step's backward hooks (BackwardBinding keeps itself here)
        self._handles: list = []                # the config's cell and parameter hooks
        self._always: list = []                 # the step boundary's hooks, on while the monitor is attached
        self._patched: list = []                # (module, attribute, original)
        self.attached = False
        self.graph_mode = False                 # GRAPH_MODE at set_monitor: no hook at all
        self._compiling = 0                     # jit compilations under way (our hooks are off meanwhile)
        self._jit_holders: dict = {}            # id(jit cell) -> whether it holds tapped cells
        self._stack: dict = {}                  # id(cell) -> [_Call] of its calls not returned
        self._calls: dict = {}                  # (name, vpp, micro_step) -> calls so far: repeated calls
        self._grads: dict = {}                  # id(param) -> its gradient of this step (summed over micro-steps)
        self._grads_taken = False               # grad_unreduced and grad_norm of this step are recorded
        self._old_params: list = []
        self._loss_taken = -1
        self._generation = 0
        self._struct: dict = {}
        optimizer_cells = set()
        for holder in (optimizer, self.inner):
            if isinstance(holder, nn.Cell):
                optimizer_cells.update(id(cell) for _, cell in holder.cells_and_names())
        self._cells: list = []                  # (cell, name, vpp) of every cell that can be tapped
        self._names: dict = {}                  # id(cell) -> (name, vpp)
        for vpp, chunk in enumerate(chunks):
            for path, cell, _ in walk_cells(chunk):
                if id(cell) in optimizer_cells or id(cell) in self._names:
                    continue
                self._names[id(cell)] = (path, vpp)
                self._cells.append((cell, path, vpp))
        # the optimizer's own state (its step, learning rate, moments: Parameters of a TrainOneStepCell given as
        # the model) is not the model's
        trained = {id(p) for p in (getattr(self.inner, "parameters", None) or ())}
        state = {id(p) for holder in (optimizer, self.inner) if isinstance(holder, nn.Cell)
                 for p in holder.get_parameters() if id(p) not in trained}
        self._params: list = []
        self._by_param: dict = {}
        for vpp, chunk in enumerate(chunks):
            owners = _owners(chunk)
            for name, param in chunk.parameters_and_names():
                if id(param) not in self._by_param and id(param) not in state:
                    entry = _Param(param, name, owners.get(id(param), name.rpartition(".")[0]), vpp)
                    self._params.append(entry)
                    self._by_param[id(param)] = entry
        # the forward that starts a micro-step: the model's, or a train-step wrapper's network (TrainOneStepCell
        # runs the optimizer inside its own call)
        root = chunks[0]
        if id(root) in optimizer_cells or any(id(c) in optimizer_cells for _, c in root.cells_and_names()):
            root = getattr(root, "network", None) if isinstance(getattr(root, "network", None), nn.Cell) else None
        self.root = root

    # ------------------------------------------------------------------ engine adapter
    def to_host(self, handles: list, numels: list):
        ops_ = self.engine.config.record_ops
        return stats.host_values(handles, numels, ops_) if self.host else stats.device_values(handles, numels, ops_)

    def any_rank(self, flag: bool) -> bool:
        from mindspore.communication import GlobalComm

        if not GlobalComm.INITED:
            return flag
        from mindspore.communication.comm_func import all_reduce
        from mindspore.communication.management import get_group_size

        if get_group_size() <= 1:
            return flag
        from mindspore.ops import ReduceOp

        out = all_reduce(Tensor([1.0 if flag else 0.0], ms.float32), op=ReduceOp.MAX)
        out = out[0] if isinstance(out, tuple) else out
        return bool(out.asnumpy()[0] > 0)

    def structure(self) -> dict:
        return self._struct

    def apply(self, config) -> None:
        """Install the cell and parameter hooks `config` asks for (None: remove them)."""
        self._remove_config_hooks()
        self._stack = {}
        self.config = config
        if config is not None and not self.graph_mode:
            self._install(config)

    def _install(self, config) -> None:
        rank_ok = not config.module_ranks or self.engine.rank in config.module_ranks
        forward = config.activations and not config.backward_only and rank_ok
        backward = config.activations and not config.forward_only and rank_ok
        if forward or backward or config.print_struct:
            for cell, name, vpp in self._cells:
                if not (config.print_struct or config.xy_target(name, vpp)):
                    continue
                if cell.has_bprop:
                    self.engine.warn_once(("bprop", name), "cell %s has its own bprop, which takes no hooks: its "
                                          "activations are not recorded", name or type(cell).__name__)
                    continue
                self._tap(cell, name, vpp, forward or config.print_struct, backward or config.print_struct)
        for entry in self._params:
            param = entry.param
            entry.target = param.requires_grad and config.param_target(entry.name, entry.vpp)
            if param.requires_grad:
                self._handles.append(param.register_hook(self._grad_hook(entry)))

    def _remove_config_hooks(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def attach(self) -> None:
        """The hooks of the step boundary (on while the monitor is attached): the model's forward, the optimizer,
        the gradient functions' forward and backward; the compiler of @ms.jit functions made blind to every hook.
        In GRAPH_MODE nothing (the compiler would parse the hooks into the graph, and none of them could run)."""
        if ms.get_context("mode") == ms.GRAPH_MODE:
            self.graph_mode = True
            self.engine.warn_once("graph mode", "MindSpore runs in GRAPH_MODE, where the model and the optimizer run "
                                  "as compiled graphs and no hook can: the monitor records nothing (it needs "
                                  "ms.set_context(mode=ms.PYNATIVE_MODE) before set_monitor)")
            return
        self.attached = True
        self._boundary_hooks()
        if not isinstance(self.optimizer, nn.Cell):
            self._wrap_step()
        self._patch_grad_functions()
        self._patch_jit_compile()

    def _boundary_hooks(self) -> None:
        if self.root is not None:
            self._always.append(self.root.register_forward_pre_hook(self._root_pre))
            self._always.append(self.root.register_forward_hook(self._root_post))
        if isinstance(self.optimizer, nn.Cell):
            self._always.append(self.optimizer.register_forward_pre_hook(self._optimizer_pre, with_kwargs=True))
            self._always.append(self.optimizer.register_forward_hook(self._optimizer_post))

    def _patch_jit_compile(self) -> None:
        """An @ms.jit function (or a jit cell holding tapped cells) compiles the Python of every cell it calls, their
        hooks included, and cannot (a hook's try statement is no graph syntax): while it compiles no hook of ours
        is in place. Its graph then runs without them: nothing inside it is recorded (one warning)."""
        try:
            from mindspore.graph.api import _JitExecutor as executor
        except ImportError:
            try:
                from mindspore.common.api import _JitExecutor as executor
            except ImportError:
                return
        original = executor.compile
        hooks = self

        def compile(executor_self, *args, **kwargs):  # noqa: A001 - the patched method's name
            if not hooks.attached or not hooks._blinds(executor_self):
                return original(executor_self, *args, **kwargs)
            hooks._compiling += 1
            if hooks._compiling == 1:
                hooks._suspend()
            try:
                return original(executor_self, *args, **kwargs)
            finally:
                hooks._compiling -= 1
                if hooks._compiling == 0 and hooks.attached:
                    hooks._resume()
        compile._msprobe_monitor = self
        self._patched.append((executor, "compile", original))
        executor.compile = compile

    def _blinds(self, executor) -> bool:
        """Whether this jit graph would see hooks of ours: a jit function (it may call the model), or a jit cell
        holding tapped cells (not a jit cell of the model, whose insides are not tapped, nor the optimizer's
        construct)."""
        obj = getattr(executor, "obj", None)
        if obj is None:
            name = getattr(getattr(executor, "fn", None), "__name__", "a function")
            self.engine.warn_once(("jit", name), "@ms.jit function %s: what it runs is one compiled graph, where no "
                                  "hook of the monitor can run; a step taken inside it is not recorded (run the "
                                  "training step without @ms.jit to monitor it)", name)
            return True
        found = self._jit_holders.get(id(obj))
        if found is None:
            found = isinstance(obj, nn.Cell) and any(id(c) in self._names for _, c in obj.cells_and_names()
                                                    if c is not obj)
            self._jit_holders[id(obj)] = found
        return found

    def _suspend(self) -> None:
        """No hook of ours on any cell or parameter (while a graph compiles); the calls under way are kept."""
        try:
            for handle in self._handles + self._always:
                handle.remove()
        finally:
            self._handles, self._always = [], []

    def _resume(self) -> None:
        try:
            self._boundary_hooks()
            if self.config is not None:
                self._install(self.config)
        except Exception as exc:  # noqa: BLE001 - the user's training must go on
            self.engine.fail("installing the hooks", exc, "the monitor records nothing more")
            self._suspend()

    def detach(self) -> None:
        self.attached = False
        self._remove_config_hooks()
        self._stack = {}
        for handle in self._always:
            handle.remove()
        self._always = []
        if self._wrapped_step is not None and getattr(self.optimizer, "step", None) is self._wrapped_step:
            try:
                del self.optimizer.step
            except AttributeError:
                pass
        self._wrapped_step = None
        for module, attribute, original in reversed(self._patched):
            if getattr(getattr(module, attribute, None), "_msprobe_monitor", None) is self:
                setattr(module, attribute, original)
        self._patched = []
        _release(self.bindings)
        self.bindings = []

    def _patch_grad_functions(self) -> None:
        """value_and_grad, grad and GradOperation (TrainOneStepCell) run their forward and backward in PyNative
        through two functions of mindspore.ops.composite.base: their forward's output holds the loss, the end of
        their backward is where the micro-batch's gradients are complete."""
        try:
            from mindspore.ops.composite import base
        except ImportError:
            return
        forward = getattr(base, "_pynative_func_grad_forward", None)
        backward = getattr(base, "_pynative_func_grad_backward", None)
        if callable(forward):
            def grad_forward(*args, **kwargs):
                out = forward(*args, **kwargs)
                if self.engine is not None and self.engine.collecting and not self.explicit_loss and \
                        self._loss_taken != self.engine.micro_step:
                    with not_recording():
                        self._guard("loss", self.take_loss, _loss_of(out))
                return out
            grad_forward._msprobe_monitor = self
            self._patched.append((base, "_pynative_func_grad_forward", forward))
            base._pynative_func_grad_forward = grad_forward
        if callable(backward):
            def grad_backward(*args, **kwargs):
                out = backward(*args, **kwargs)
                if self.engine is not None and self.engine.collecting and self.config is not None:
                    with not_recording():
                        self._guard("gradients", self._backward_done)
                return out
            grad_backward._msprobe_monitor = self
            self._patched.append((base, "_pynative_func_grad_backward", backward))
            base._pynative_func_grad_backward = grad_backward

    # ------------------------------------------------------------------ statistics and rows
    def active(self) -> bool:
        engine = self.engine
        return engine is not None and engine.collecting and self.config is not None

    def _vector(self, tensor):
        config = self.engine.config
        if self.host:
            return stats.host_vector(tensor, config.record_ops, config.eps)
        return stats.device_vector(tensor, config.record_ops, config.eps)

    def _row(self, group: str, name: str, module: str, vpp: int, tensor, micro: int | None = None, key=None):
        engine = self.engine
        micro = max(engine.micro_step, 0) if micro is None else micro
        if not isinstance(tensor, Tensor):
            engine.buffer.add(group, name, module, micro, vpp, key=key)
            return
        engine.buffer.add(group, name, module, micro, vpp, self._vector(tensor), tuple(tensor.shape),
                          str(tensor.dtype), int(tensor.size), key)

    def _row_of_array(self, group: str, name: str, module: str, vpp: int, array, dtype: str, key=None) -> None:
        """A row of a value computed on the host (the CPU's statistics)."""
        config = self.engine.config
        self.engine.buffer.add(group, name, module, 0, vpp, stats.array_stat_vector(array, config.record_ops,
                                                                                   config.eps),
                               tuple(array.shape), dtype, int(array.size), key)

    def _activations_failed(self) -> None:
        """Activations failed: their cell hooks come off (the parameter hooks stay)."""
        for calls in self._stack.values():
            for call in calls:
                _half_bound(call)
        keep = []
        for handle in self._handles:
            if getattr(handle, "_msprobe_tap", False):
                handle.remove()
            else:
                keep.append(handle)
        self._handles = keep
        self._stack = {}

    def settle(self) -> None:
        """Rows still pending (monitor.generate_*_metrics mid-step): the gradients before reduction so far."""
        if self.active() and self._grads and not self._grads_taken and \
                self.engine.micro_step + 1 >= self.grad_acc_steps:
            self._guard("gradients", self._take_unreduced)

    def take_loss(self, loss) -> None:
        engine = self.engine
        if engine is None or not engine.collecting or not engine.ok("loss") or not stats.is_float(loss) or \
                loss.ndim != 0:
            return      # no loss found, or not a scalar
        micro = max(engine.micro_step, 0)
        self._loss_taken = engine.micro_step
        engine.buffer.add("loss", "loss", "", micro, 0, self._vector(loss), (), str(loss.dtype), 1,
                          key=("loss", micro))

    # ------------------------------------------------------------------ cells (activations)
    def _tap(self, cell, name: str, vpp: int, forward: bool, backward: bool) -> None:
        hooks = self

        @unrecorded
        def pre(cell, args, kwargs):
            if not hooks.active() or not requires_grad() or not hooks.engine.ok("activations"):
                return None
            try:
                return hooks._cell_pre(cell, name, vpp, forward, backward, args, kwargs)
            except Exception as exc:  # noqa: BLE001 - the user's training must go on
                hooks._guard("activations", _raise, exc)
                return None

        @unrecorded
        def post(cell, args, kwargs, output):
            calls = hooks._stack.get(id(cell))
            if not calls:
                return None
            call = calls.pop()
            try:
                return hooks._cell_post(cell, call, output)
            except Exception as exc:  # noqa: BLE001 - the user's training must go on
                _half_bound(call)
                hooks._guard("activations", _raise, exc)
                return None
        for handle in (cell.register_forward_pre_hook(pre, with_kwargs=True),
                       cell.register_forward_hook(post, with_kwargs=True, always_call=True)):
            handle._msprobe_tap = True
            self._handles.append(handle)

    def _cell_pre(self, cell, name: str, vpp: int, forward: bool, backward: bool, args, kwargs):
        engine = self.engine
        micro = max(engine.micro_step, 0)
        key = (name, vpp, micro)
        count = self._calls.get(key, 0)
        self._calls[key] = count + 1
        prefix = f"{name}[{count}]" if count else name
        config = self.config
        call = _Call(prefix, name, vpp, micro, self._generation, forward and config.activations and
                     not config.backward_only and config.xy_target(name, vpp),
                     backward and config.activations and not config.forward_only and config.xy_target(name, vpp))
        call.in_slots = slots(list(args), "input", is_tensor, kwargs)
        if config.print_struct:
            self._describe(call, "input", call.in_slots)
        if call.forward:
            for label, tensor in call.in_slots:
                self._row("actv", f"{prefix}.{label}", name, vpp, tensor, micro)
        changed = None
        if backward and differentiable(args):
            single = len(args) == 1
            call.arg_labels = [("input" if single else f"input_{i}") for i, v in enumerate(args) if is_tensor(v)]
            call.binding = BackwardBinding(self, prefix, self._grads_of(call), True, cell)
            changed = (call.binding.inputs(tuple(args)), kwargs)
        elif not backward:
            call.in_slots = [(label, None) for label, _ in call.in_slots]
        self._stack.setdefault(id(cell), []).append(call)
        return changed

    def _cell_post(self, cell, call: _Call, output):
        if output is None:
            _half_bound(call)
            return None                 # nothing returned, or the construct raised
        out_values = list(output) if isinstance(output, (tuple, list)) else [output]
        call.out_slots = slots(out_values, "output", is_tensor)
        try:
            if self.config.print_struct:
                self._describe(call, "output", call.out_slots)
            if call.forward:
                for label, tensor in call.out_slots:
                    self._row("actv", f"{call.prefix}.{label}", call.name, call.vpp, tensor, call.micro)
        except Exception as exc:  # noqa: BLE001 - the backward hook below still completes the call
            self._guard("activations", _raise, exc)
        # keep the labels, not the tensors: a pending call must not hold activations
        call.in_slots = [(label, None) for label, _ in call.in_slots]
        call.out_slots = [(label, None) for label, _ in call.out_slots]
        if call.binding is None:
            if not (call.backward or self.config.print_struct) or not requires_grad():
                return None
            call.binding = BackwardBinding(self, call.prefix, self._grads_of(call), False, cell)
        call.out_labels = _result_labels(output)
        return call.binding.outputs(output)

    def _grads_of(self, call: _Call):
        """The backward hook's callback of a call: the gradients of its outputs and of its tensor arguments."""
        @unrecorded
        def on_grads(grad_outputs, grad_inputs):
            if call.generation != self._generation or not self.active() or not self.engine.ok("activations"):
                return
            self._guard("activations", self._call_grads, call, grad_outputs, grad_inputs)
        return on_grads

    def _call_grads(self, call: _Call, grad_outputs, grad_inputs) -> None:
        ins = dict(zip(call.arg_labels, grad_inputs or ()))
        outs = dict(zip(call.out_labels, grad_outputs or ()))
        if self.config.print_struct:
            self._describe(call, "input_grad", [(label, ins.get(label)) for label, _ in call.in_slots])
            self._describe(call, "output_grad", [(label, outs.get(label)) for label, _ in call.out_slots])
        if not call.backward:
            return
        for side, found in (("in", ins), ("out", outs)):
            for label, _ in (call.in_slots if side == "in" else call.out_slots):
                self._row("actv_grad", f"{call.prefix}.{label}", call.name, call.vpp, found.get(label), call.micro)

    def _describe(self, call: _Call, side: str, values: list) -> None:
        """print_struct: what a cell's call takes and returns (its first call in the step)."""
        entry = self._struct.setdefault(f"{call.vpp}:{call.prefix}", {})
        if side in entry:
            return
        described = {"config": f"tuple[{len(values)}]"}
        for label, value in values:
            described[label] = f"size={tuple(value.shape)}, dtype={value.dtype}" if is_tensor(value) else "None"
        entry[side] = described

    # ------------------------------------------------------------------ the model's forward: micro-steps, loss
    @unrecorded
    def _root_pre(self, cell, args):
        engine = self.engine
        if engine is None or not requires_grad():
            return None                 # an evaluation: not a micro-step
        self._begin_micro_step(engine.micro_step + 1 >= self.grad_acc_steps)
        return None

    @unrecorded
    def _root_post(self, cell, args, output):
        if self.engine is not None and self.engine.collecting and not self.explicit_loss and requires_grad() and \
                self._loss_taken != self.engine.micro_step:
            self._guard("loss", self.take_loss, _loss_of(output))
        return None

    # ------------------------------------------------------------------ gradients, optimizer
    def _grad_hook(self, entry: _Param):
        key = id(entry.param)

        @unrecorded
        def hook(grad):
            if self.config is not None and self.engine.collecting:
                try:
                    self._gradient(key, grad)
                except Exception as exc:  # noqa: BLE001 - the user's training must go on
                    self.engine.fail("gradients", exc)
            return None
        return hook

    def _gradient(self, key: int, grad) -> None:
        """A parameter's gradient of this backward: kept for the step (summed over its micro-steps)."""
        have = self._grads.get(key)
        self._grads[key] = grad if have is None else mint.add(have, grad)

    def _backward_done(self) -> None:
        """A gradient function returned: after the step's last micro-batch, its gradients before reduction are
        taken (before the script can clip or scale them), and the global gradient norm."""
        if self.engine.micro_step + 1 >= self.grad_acc_steps and self._grads and not self._grads_taken:
            self._take_unreduced()

    def _take_unreduced(self) -> None:
        self._grads_taken = True
        engine = self.engine
        grads = [(self._by_param.get(key), grad) for key, grad in self._grads.items()]
        if self.config.wg_distribution and engine.ok("gradients"):
            for entry, grad in grads:
                if entry is not None and entry.target:
                    self._row("grad_unreduced", entry.name, entry.module, entry.vpp, grad, 0,
                              ("grad_unreduced", id(entry)))
        if engine.ok("gradient norm"):
            self._guard("gradient norm", self._grad_norm, [grad for _, grad in grads])

    def _grad_norm(self, grads: list) -> None:
        if not grads:
            return
        if self.host:
            norm = stats.host_norm(grads)
            self._row_of_array("grad_norm", "total", "", 0, norm, "Float32", ("grad_norm",))
        else:
            self._row("grad_norm", "total", "", 0, stats.device_norm(grads), 0, ("grad_norm",))

    def _optimizer_gradients(self, args, kwargs) -> list | None:
        """The gradients an optimizer Cell is called with, parallel to its parameters."""
        grads = args[0] if args else kwargs.get("gradients", kwargs.get("grads"))
        if isinstance(grads, Tensor):
            grads = (grads,)
        return list(grads) if isinstance(grads, (tuple, list)) else None

    def _optimizer_pre(self, cell, args, kwargs):
        self._pre_step(self._optimizer_gradients(args, kwargs))
        return None

    def _optimizer_post(self, cell, args, output):
        self._post_step()
        return None

    @unrecorded
    def _pre_step(self, grads) -> None:
        engine = self.engine
        if engine is None or not self.active():
            return
        if self._grads and not self._grads_taken:
            self._guard("gradients", self._take_unreduced)
        config = self.config
        if config.wg_distribution and engine.ok("gradients"):
            self._guard("gradients", self._reduced, grads)
        if config.ur_distribution and engine.ok("update ratio"):
            self._guard("update ratio", self._keep_params)

    def _optimizer_params(self) -> list:
        params = getattr(self.inner, "parameters", None) if self.inner is not None else None
        return list(params) if params is not None else [entry.param for entry in self._params]

    def _reduced(self, grads) -> None:
        params = self._optimizer_params()
        if grads is None or len(grads) != len(params):
            # no gradients given to the optimizer (a step() of its own): the parameters' main_grad or grad
            found = []
            for param in params:
                grad = getattr(param, "main_grad", None) if self.monitor.params_have_main_grad else None
                found.append(grad if grad is not None else getattr(param, "grad", None))
            grads = found
        for param, grad in zip(params, grads):
            entry = self._by_param.get(id(param))
            if entry is not None and entry.target:
                self._row("grad_reduced", entry.name, entry.module, entry.vpp, grad, 0)

    def _params_rows(self, group: str) -> None:
        for entry in self._params:
            if entry.target:
                self._row(group, entry.name, entry.module, entry.vpp, entry.param, 0)

    def _keep_params(self) -> None:
        if self.host:
            self._old_params = [(e, e.param.asnumpy().copy()) for e in self._params if e.target]   # a view
        else:
            self._old_params = [(e, e.param.copy()) for e in self._params if e.target]

    def _moments(self) -> None:
        optimizer = self.inner
        if optimizer is None:
            self.engine.warn_once("no states", "the optimizer (%s) holds no MindSpore optimizer: its moments are "
                                  "not recorded", type(self.optimizer).__name__)
            return
        params = self._optimizer_params()
        for group, attribute in zip(("exp_avg", "exp_avg_sq"), _moment_attributes(optimizer)):
            states = getattr(optimizer, attribute, None) if attribute else None
            if states is None:
                continue
            states = list(states)
            if len(states) != len(params):
                self.engine.warn_once(("states", attribute), "the optimizer's %s does not match its parameters: "
                                      "not recorded", attribute)
                continue
            for param, state in zip(params, states):
                entry = self._by_param.get(id(param))
                if entry is not None and entry.target and isinstance(state, Tensor):
                    self._row(group, entry.name, entry.module, entry.vpp, state, 0)

    def _update_ratio(self) -> None:
        """Statistics of dw / max(|w before|, |w after|): its norm is the update ratio |dw|/|w| (bounded by 2,
        defined for a weight that starts at zero)."""
        for entry, old in self._old_params:
            if self.host:
                ratio = stats.host_update_ratio(old, entry.param.asnumpy())
                self._row_of_array("update_ratio", entry.name, entry.module, entry.vpp, ratio, "Float32")
            else:
                self._row("update_ratio", entry.name, entry.module, entry.vpp,
                          stats.device_update_ratio(old, entry.param), 0)

    def _end_step(self) -> None:
        if self._grads and not self._grads_taken and self.active():
            self._guard("gradients", self._take_unreduced)
        self._generation += 1
        _release(self.bindings)
        self.bindings = []
        self._stack = {}
        self._calls = {}
        self._grads = {}
        self._grads_taken = False
        self._loss_taken = -1
        self._close_step()


def _moment_attributes(optimizer) -> tuple:
    """(first-moment attribute, second-moment attribute) of an optimizer, None where it has none."""
    for klass in type(optimizer).__mro__:
        found = MOMENTS.get(klass.__name__) if klass.__module__.startswith("mindspore.nn.") else None
        if found is None:
            continue
        first, second = found
        if klass.__name__ in ("SGD", "RMSProp") and not _momentum(optimizer):
            first = None            # without momentum the buffer stays zero
        return first, second
    first = next((name for name in FIRST_MOMENTS if getattr(optimizer, name, None) is not None), None)
    second = next((name for name in SECOND_MOMENTS if getattr(optimizer, name, None) is not None), None)
    return first, second


def _momentum(optimizer) -> bool:
    value = getattr(optimizer, "momentum", 0.0)
    try:
        return float(value.asnumpy()) != 0.0 if isinstance(value, Tensor) else float(value) != 0.0
    except (TypeError, ValueError):
        return True


def _raise(exc):
    raise exc


def _half_bound(call: _Call) -> None:
    """A call whose backward hook was applied to its arguments and will not be to its result (the call raised, or
    returned nothing to hook, or its taps came off): the hook then takes its first gradients as the arguments'."""
    if call.binding is not None and call.binding.kernel is not None:
        call.binding.outputs_hooked = False


def _release(bindings: list) -> None:
    """The step's backward hooks, done: each CellBackwardHook holds its hook function on the C++ side, which holds
    the binding and so the kernel again, a cycle the garbage collector cannot see; dropping the kernels ends it."""
    for binding in bindings:
        binding.kernel = binding.pre_kernel = None
