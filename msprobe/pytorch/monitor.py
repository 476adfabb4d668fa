"""TrainerMon for PyTorch: the reference's drop-in training monitor (its constructor, set_monitor and config keys),
a thin adapter of msprobe.monitor.engine. Hooks: module taps (activations and their gradients, msprobe.pytorch.taps),
post-accumulate-grad hooks (weight gradients before reduction), the optimizer's step hooks (gradients after
reduction, moments, parameters, update ratio; the step boundary), the model's forward (micro-steps, the loss it
returns) and Tensor.backward (the loss a script computes outside the model). Statistics are taken on the device
(msprobe.pytorch.stats.stat_vector) and cross to the host once per step."""

from __future__ import annotations

import weakref

import torch

from msprobe.collect.debugger import not_recording
from msprobe.monitor.trainer import HooksBase, TrainerMonBase, unrecorded
from msprobe.pytorch.stats import host_values, local_part, stat_vector, stat_vectors
from msprobe.pytorch.taps import ModuleTaps, in_backward

# optimizer state -> the reference's group: first moments (Adam family, SGD/RMSprop momentum) as exp_avg, second
# moments (Adam family, RMSprop/Adadelta square averages, Adagrad's sum, Adamax's infinity norm) as exp_avg_sq
FIRST_MOMENTS = ("exp_avg", "momentum_buffer")
SECOND_MOMENTS = ("exp_avg_sq", "square_avg", "sum", "exp_inf")


class TrainerMon(TrainerMonBase):
    """The training monitor for PyTorch.

        monitor = TrainerMon("monitor_config.json", params_have_main_grad=False)
        monitor.set_monitor(model, optimizer=optimizer, grad_acc_steps=1)

    set_monitor takes a Module or a list of model chunks, and a torch optimizer or a wrapper with .step() and an
    inner .optimizer (Megatron's, DeepSpeed's). Without record_loss the loss is the 0-d tensor the model returns (or
    its 'loss' entry), else the 0-d tensor `.backward()` is called on."""

    framework = "pytorch"
    model_kind = "a torch.nn.Module"

    def _is_model(self, model) -> bool:
        return isinstance(model, torch.nn.Module)

    def _make_hooks(self, chunks: list, optimizer, grad_acc_steps: int):
        return _Hooks(self, chunks, optimizer, grad_acc_steps)

    def _rank(self) -> int:
        return _rank()


def _rank() -> int:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    return 0


def _inner_optimizer(optimizer):
    """The torch optimizer holding the states: the optimizer itself or a wrapper's .optimizer (Megatron, DeepSpeed)."""
    for _ in range(4):
        if isinstance(optimizer, torch.optim.Optimizer):
            return optimizer
        optimizer = getattr(optimizer, "optimizer", None)
    return None


class _Param:
    __slots__ = ("param", "name", "module", "vpp", "target", "hook")

    def __init__(self, param, name, module, vpp, target):
        self.param, self.name, self.module, self.vpp, self.target = param, name, module, vpp, target
        self.hook = None


class _Hooks(HooksBase):
    """The PyTorch side of one TrainerMon: the engine's adapter (to_host, apply, any_rank, structure) and every
    hook. Each hook body is guarded: a failure switches its part off (engine.fail) and training goes on."""

    framework = "pytorch"
    step_call = "optimizer.step()"
    skipped_example = "GradScaler found inf/NaN gradients"

    def __init__(self, monitor: TrainerMon, chunks: list, optimizer, grad_acc_steps: int):
        super().__init__(monitor, chunks, optimizer, _inner_optimizer(optimizer), grad_acc_steps)
        self.taps = ModuleTaps(self)
        self._handles: list = []               # module and parameter hooks of the config
        self._always: list = []                # the step boundary's hooks, on while the monitor is attached
        self._patched_backward = None
        self._params: list = []                # every named parameter of every chunk: _Param
        self._by_param: dict = {}
        self._names: dict = {}                 # id(module) -> (name, vpp)
        self._calls: dict = {}                 # (name, vpp, micro_step) -> call count: repeated calls
        self._cache: dict = {}                 # id(tensor) -> (weakref, version, handle): taken once per value
        self._struct: dict = {}
        self._eval = 0                         # depth of model calls under no_grad (evaluation: not recorded)
        self._loss_taken = -1                  # the micro-step whose loss is recorded
        self._backward_seen = False
        self._stepped_hooks = False            # the optimizer's own pre/post hooks (else step() is wrapped)
        self._old_params: list = []
        self._deferred: dict = {}              # buffer row -> gradient: grad_unreduced rows to fill
        self._norm_taken = False               # the global gradient norm of this step is recorded
        # with several processes a gradient may be reduced in place before the optimizer: taken at its hook
        self._reducing = torch.distributed.is_available() and torch.distributed.is_initialized() and \
            torch.distributed.get_world_size() > 1
        for vpp, chunk in enumerate(chunks):
            for name, module in chunk.named_modules():
                self._names.setdefault(id(module), (name, vpp))
            for name, param in chunk.named_parameters():
                if id(param) not in self._by_param:
                    owner = name.rpartition(".")[0]
                    entry = _Param(param, name, owner, vpp, False)
                    self._params.append(entry)
                    self._by_param[id(param)] = entry

    # ------------------------------------------------------------------ engine adapter
    def to_host(self, handles: list, numels: list):
        return host_values(handles, numels, self.engine.config.record_ops)

    def any_rank(self, flag: bool) -> bool:
        if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
            return flag
        device = next((p.param.device for p in self._params), torch.device("cpu"))
        if torch.distributed.get_backend() == "nccl" and device.type == "cpu":
            device = torch.device("cuda", torch.cuda.current_device())
        value = torch.tensor([1.0 if flag else 0.0], device=device)
        torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.MAX)
        return bool(value.item())

    def structure(self) -> dict:
        return self._struct

    def apply(self, config) -> None:
        """Install the module and parameter hooks `config` asks for (None: remove them)."""
        self._remove_config_hooks()
        self.config = config
        if config is None:
            return
        rank_ok = not config.module_ranks or self.engine.rank in config.module_ranks
        forward = config.activations and not config.backward_only and rank_ok
        backward = config.activations and not config.forward_only and rank_ok
        if forward or backward or config.print_struct:
            for vpp, chunk in enumerate(self.chunks):
                scripted = [n for n, m in chunk.named_modules() if isinstance(m, torch.jit.ScriptModule)]
                if scripted:
                    self.engine.warn_once(("scripted", vpp), "TorchScript modules take no hooks: the activations of "
                                          "%s and what is inside are not recorded", ", ".join(scripted) or "the model")
                for name, module in chunk.named_modules():
                    if self._names.get(id(module)) != (name, vpp):
                        continue       # a module reachable twice is tapped once, under its first name
                    if any(name == s or name.startswith(s + ".") or s == "" for s in scripted):
                        continue
                    if config.print_struct or config.xy_target(name, vpp):
                        self.taps.install(module, (name, vpp), forward or config.print_struct,
                                          backward or config.print_struct)
        for entry in self._params:
            entry.target = entry.param.requires_grad and config.param_target(entry.name, entry.vpp)
            if entry.target and config.wg_distribution:
                entry.hook = entry.param.register_post_accumulate_grad_hook(self._grad_hook(entry))
                self._handles.append(entry.hook)

    def _remove_config_hooks(self) -> None:
        self.taps.remove()
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._cache = {}

    def attach(self) -> None:
        """The hooks of the step boundary (on while the monitor is attached): the model chunks' forward, the
        optimizer's step and Tensor.backward."""
        root = self.chunks[0]
        self._always.append(root.register_forward_pre_hook(self._root_pre, with_kwargs=True, prepend=True))
        self._always.append(root.register_forward_hook(self._root_post, with_kwargs=True, always_call=True))
        for chunk in self.chunks[1:]:
            self._always.append(chunk.register_forward_hook(self._loss_post, with_kwargs=True))
        if isinstance(self.optimizer, torch.optim.Optimizer):
            self._always.append(self.optimizer.register_step_pre_hook(lambda *_: self._pre_step()))
            self._always.append(self.optimizer.register_step_post_hook(lambda *_: self._post_step()))
        else:
            self._wrap_step()
        self._patch_backward()

    def detach(self) -> None:
        self._remove_config_hooks()
        for handle in self._always:
            handle.remove()
        self._always = []
        if getattr(self.optimizer, "step", None) is getattr(self, "_wrapped_step", object()):
            try:
                del self.optimizer.step
            except AttributeError:
                pass
        if self._patched_backward is not None and torch.Tensor.backward is self._patched_backward:
            torch.Tensor.backward = self._patched_backward.__wrapped__
        self._patched_backward = None

    def _patch_backward(self) -> None:
        original = torch.Tensor.backward
        hooks = self

        def backward(self, gradient=None, *args, **kwargs):
            hooks._backward_seen = True
            engine = hooks.engine
            if gradient is None and engine is not None and engine.collecting and not hooks.explicit_loss and \
                    hooks._loss_taken != engine.micro_step and self.dim() == 0:
                with not_recording():
                    hooks._guard("loss", hooks.take_loss, self)
            result = original(self, gradient, *args, **kwargs)
            if engine is not None and engine.collecting and hooks.config is not None:
                with not_recording():
                    hooks._backward_done()
            return result
        backward.__wrapped__ = original
        self._patched_backward = backward
        torch.Tensor.backward = backward

    # ------------------------------------------------------------------ statistics
    def active(self) -> bool:
        engine = self.engine
        return engine is not None and engine.collecting and not self._eval

    def _vector(self, tensor):
        """The statistics of a tensor on its device, taken once per value within a step."""
        key = id(tensor)
        hit = self._cache.get(key)
        version = tensor._version
        if hit is not None and hit[0]() is tensor and hit[1] == version:
            return hit[2]
        handle = stat_vector(tensor, self.engine.config.record_ops, self.engine.config.eps)
        try:
            self._cache[key] = (weakref.ref(tensor), version, handle)
        except TypeError:
            pass
        return handle

    def _row(self, group: str, name: str, module: str, vpp: int, tensor, micro: int | None = None, key=None):
        engine = self.engine
        if tensor is not None:
            tensor = local_part(tensor)
        if tensor is None:
            engine.buffer.add(group, name, module, max(engine.micro_step, 0) if micro is None else micro, vpp,
                              key=key)
            return
        engine.buffer.add(group, name, module, max(engine.micro_step, 0) if micro is None else micro, vpp,
                          self._vector(tensor), tuple(tensor.shape), str(tensor.dtype), tensor.numel(), key)

    def _activations_failed(self) -> None:
        """Activations failed: the config's hooks come off."""
        self._remove_config_hooks()

    # ------------------------------------------------------------------ taps subscriber (activations)
    def tap_failed(self, exc: BaseException) -> None:
        """The taps' own code failed: activations are switched off (their hooks removed)."""
        self.engine.fail("activations", exc)
        self._remove_config_hooks()

    def _prefix(self, call) -> str:
        name, vpp = call.tap
        if call.data is None:
            key = (name, vpp, self.engine.micro_step)
            count = self._calls.get(key, 0)
            if call.recompute:
                # a checkpoint's recomputation, in backward: the calls of a module come back in the reverse order
                # of the checkpointed segments that made them, each standing for its first forward
                again = self._calls.get(key + ("again",), 0)
                self._calls[key + ("again",)] = again + 1
                count = max(count - 1 - again, 0)
            else:
                self._calls[key] = count + 1
            call.data = [f"{name}[{count}]" if count else name, max(self.engine.micro_step, 0), {}]
        return call.data[0]

    def inputs(self, call) -> None:
        if self.engine.ok("activations"):
            self._guard("activations", self._forward, call, "input", call.in_slots)

    def outputs(self, call) -> None:
        if self.engine.ok("activations"):
            self._guard("activations", self._forward, call, "output", call.out_slots)

    def _forward(self, call, side: str, slots: list) -> None:
        prefix = self._prefix(call)
        name, vpp = call.tap
        config = self.config
        if config.print_struct:
            self._describe(call, side, slots)
        if config.activations and not config.backward_only and config.xy_target(name, vpp) and \
                (not config.module_ranks or self.engine.rank in config.module_ranks):
            for label, tensor in slots:
                self._row("actv", f"{prefix}.{label}", name, vpp, tensor, call.data[1])

    def output_grad(self, call, position: int, grad) -> None:
        if self.engine.ok("activations"):
            self._guard("activations", self._output_grad, call, position, grad)

    def _output_grad(self, call, position: int, grad) -> None:
        self._prefix(call)
        call.data[2][position] = (self._vector(grad), tuple(grad.shape), str(grad.dtype), grad.numel())

    def input_grads(self, call, grads: list) -> None:
        if self.engine.ok("activations"):
            self._guard("activations", self._input_grads, call, grads)

    def _input_grads(self, call, grads: list) -> None:
        prefix = self._prefix(call)
        name, vpp = call.tap
        config = self.config
        if config.print_struct:
            self._describe(call, "input_grad", [(label, g) for (label, _), g in zip(call.in_slots, grads)])
            self._describe(call, "output_grad", [(label, call.data[2].get(i))
                                                 for i, (label, _) in enumerate(call.out_slots)])
        if not (config.activations and not config.forward_only and config.xy_target(name, vpp)):
            return
        buffer = self.engine.buffer
        micro = call.data[1]
        for (label, _), grad in zip(call.in_slots, grads):
            self._row("actv_grad", f"{prefix}.{label}", name, vpp, grad, micro)
        arrived = call.data[2]
        for position, (label, _) in enumerate(call.out_slots):
            got = arrived.get(position)
            if got is None:
                buffer.add("actv_grad", f"{prefix}.{label}", name, micro, vpp)
            else:
                buffer.add("actv_grad", f"{prefix}.{label}", name, micro, vpp, *got)

    def _describe(self, call, side: str, values: list) -> None:
        """print_struct: what a module's call takes and returns (its first call in the step)."""
        entry = self._struct.setdefault(f"{call.tap[1]}:{call.data[0]}", {})
        if side in entry:
            return
        described = {"config": f"tuple[{len(values)}]"}
        for label, value in values:
            if isinstance(value, torch.Tensor):
                value = (None, tuple(value.shape), value.dtype)
            described[label] = f"size={tuple(value[1])}, dtype={value[2]}" if value is not None else "None"
        entry[side] = described

    # ------------------------------------------------------------------ the model's forward: micro-steps, loss
    @unrecorded
    def _root_pre(self, module, args, kwargs):
        engine = self.engine
        if engine is None or torch.compiler.is_compiling() or in_backward():
            return None
        if not torch.is_grad_enabled():
            self._eval += 1           # an evaluation pass: not recorded, not a micro-step
            return None
        self._begin_micro_step(engine.micro_step + 1 >= self.grad_acc_steps and self._backward_seen)
        return None

    @unrecorded
    def _root_post(self, module, args, kwargs, out):
        if self._eval:
            if not torch.is_grad_enabled():
                self._eval -= 1
            return None
        return self._loss_post(module, args, kwargs, out)

    def _loss_post(self, module, args, kwargs, out):
        if out is None or self.explicit_loss or not self.active() or in_backward():
            return None
        self._guard("loss", lambda: self.take_loss(_loss_of(out)))
        return None

    def settle(self) -> None:
        """Rows still pending (monitor.generate_*_metrics mid-step): the deferred gradients before reduction."""
        if self._deferred:
            self._guard("gradients", self._fill_deferred)

    def take_loss(self, loss) -> None:
        engine = self.engine
        if engine is None or not engine.collecting or not engine.ok("loss") or \
                not isinstance(loss, torch.Tensor) or loss.dim() != 0:
            return      # no loss found (None), or not a scalar
        micro = max(engine.micro_step, 0)
        self._loss_taken = engine.micro_step
        engine.buffer.add("loss", "loss", "", micro, 0, stat_vector(loss, engine.config.record_ops,
                                                                      engine.config.eps), (), str(loss.dtype), 1,
                          key=("loss", micro))

    # ------------------------------------------------------------------ gradients, optimizer
    def _grad_hook(self, entry: _Param):
        def hook(param):
            engine = self.engine
            if engine.collecting and engine.micro_step + 1 >= self.grad_acc_steps and engine.ok("gradients"):
                with not_recording():
                    self._guard("gradients", self._unreduced, entry)
        return hook

    def _grad(self, param):
        if self.monitor.params_have_main_grad:
            grad = getattr(param, "main_grad", None)
            if grad is not None:
                return grad
        return param.grad

    def _unreduced(self, entry: _Param) -> None:
        """A gradient before reduction, as autograd accumulated it. With several processes it is taken here, before
        DDP's reducer (a node post-hook, run after this tensor hook) reads it. With one process nothing touches it
        before the backward returns: the rows are filled then, every gradient of the backward taken together
        (_backward_done). A sharded parameter's (FSDP2) gradient is reduced inside FSDP's own backward hook, before
        this one: not recorded."""
        if local_part(entry.param) is not entry.param:
            self.engine.warn_once("sharded", "FSDP2/DTensor parameters: gradients before reduction are not recorded "
                                  "(FSDP reduces them in its own backward hook); after reduction, moments and "
                                  "parameters are this rank's shards")
            return
        grad = self._grad(entry.param)
        if grad is None or self._reducing:
            self._row("grad_unreduced", entry.name, entry.module, entry.vpp, grad, key=("grad_unreduced", id(entry)))
            return
        at = self.engine.buffer.add("grad_unreduced", entry.name, entry.module, max(self.engine.micro_step, 0),
                                    entry.vpp, key=("grad_unreduced", id(entry)))
        self._deferred[at] = grad

    def _backward_done(self) -> None:
        """The script's `.backward()` returned (DDP's reduction included), before it can clip or scale the gradients
        in place: the deferred gradients before reduction are taken together, and after the last micro-batch the
        global gradient norm (the norm clipping would see)."""
        engine = self.engine
        if self._deferred:
            self._guard("gradients", self._fill_deferred)
        if engine.micro_step + 1 >= self.grad_acc_steps and engine.ok("gradient norm"):
            self._guard("gradient norm", self._grad_norm)

    def _vectors(self, tensors: list) -> list:
        """Statistics of many tensors at once (stat_vectors), each value taken once per step (the cache)."""
        handles = [None] * len(tensors)
        missing = []
        for i, tensor in enumerate(tensors):
            hit = self._cache.get(id(tensor))
            if hit is not None and hit[0]() is tensor and hit[1] == tensor._version:
                handles[i] = hit[2]
            else:
                missing.append(i)
        if missing:
            config = self.engine.config
            for i, handle in zip(missing, stat_vectors([tensors[i] for i in missing], config.record_ops, config.eps)):
                handles[i] = handle
                try:
                    self._cache[id(tensors[i])] = (weakref.ref(tensors[i]), tensors[i]._version, handle)
                except TypeError:
                    pass
        return handles

    def _rows(self, group: str, items: list) -> None:
        """Rows of (entry, tensor or None) pairs, their statistics taken together."""
        # the tensors themselves (stat_vectors detaches): a detached view is another object, which the cache of
        # the values taken in this step would not know
        present = [(entry, local_part(tensor)) for entry, tensor in items if tensor is not None]
        handles = iter(self._vectors([tensor for _, tensor in present]))
        tensors = {id(entry): tensor for entry, tensor in present}
        buffer = self.engine.buffer
        micro = max(self.engine.micro_step, 0)
        for entry, tensor in items:
            if tensor is None:
                buffer.add(group, entry.name, entry.module, micro, entry.vpp)
            else:
                tensor = tensors[id(entry)]
                buffer.add(group, entry.name, entry.module, micro, entry.vpp, next(handles), tuple(tensor.shape),
                           str(tensor.dtype), tensor.numel())

    def _params_rows(self, group: str) -> None:
        self._rows(group, [(entry, entry.param) for entry in self._params if entry.target])

    @unrecorded
    def _pre_step(self, grads=None) -> None:
        engine = self.engine
        if engine is None or not engine.collecting:
            return
        self._guard("activations", self.taps.flush)
        config = self.config
        if config is None:
            return
        if config.wg_distribution and engine.ok("gradients"):
            self._guard("gradients", self._reduced)
        if not self._norm_taken and engine.ok("gradient norm"):       # no .backward() of the script's was seen
            self._guard("gradient norm", self._grad_norm)
        if config.ur_distribution and engine.ok("update ratio"):
            self._guard("update ratio", self._keep_params)

    def _reduced(self) -> None:
        self._fill_deferred()
        self._rows("grad_reduced", [(entry, self._grad(entry.param)) for entry in self._params if entry.target])

    def _fill_deferred(self) -> None:
        """The deferred grad_unreduced rows, taken together (a gradient left as it was is taken once for
        grad_reduced too: the cache)."""
        deferred, self._deferred = self._deferred, {}
        if not deferred:
            return
        buffer = self.engine.buffer
        grads = list(deferred.values())
        for at, grad, handle in zip(deferred, grads, self._vectors(grads)):
            buffer.handle[at], buffer.shape[at] = handle, tuple(grad.shape)
            buffer.dtype[at], buffer.numel[at] = str(grad.dtype), grad.numel()

    def _grad_norm(self) -> None:
        grads = [g for g in (self._grad(e.param) for e in self._params) if g is not None]
        if not grads:
            return
        norms = torch._foreach_norm([local_part(g.detach()) for g in grads])
        total = torch.linalg.vector_norm(torch.stack([n if n.dtype == torch.float32 else n.float() for n in norms]))
        self._row("grad_norm", "total", "", 0, total, key="grad_norm")
        self._norm_taken = True

    def _keep_params(self) -> None:
        self._old_params = [(e, local_part(e.param.detach()).clone()) for e in self._params if e.target]


    def _moments(self) -> None:
        optimizer = self.inner
        if optimizer is None:
            self.engine.warn_once("no states", "the optimizer (%s) holds no torch optimizer: its moments are not "
                                  "recorded", type(self.optimizer).__name__)
            return
        rows = {"exp_avg": [], "exp_avg_sq": []}
        for group in optimizer.param_groups:
            for param in group["params"]:
                entry = self._by_param.get(id(param))
                state = optimizer.state.get(param)
                if entry is None or not entry.target or not state:
                    continue
                for names, kind in ((FIRST_MOMENTS, "exp_avg"), (SECOND_MOMENTS, "exp_avg_sq")):
                    value = next((state[n] for n in names if isinstance(state.get(n), torch.Tensor)), None)
                    if value is not None:
                        rows[kind].append((entry, value))
        for kind, found in rows.items():
            self._rows(kind, found)

    def _update_ratio(self) -> None:
        """Statistics of dw / max(|w before|, |w after|): its norm is the update ratio |dw|/|w| (bounded by 2,
        defined for a weight that starts at zero)."""
        tiny = torch.finfo(torch.float32).tiny
        items = []
        for entry, old in self._old_params:
            new = local_part(entry.param.detach())
            delta = new.float() - old.float()
            scale = torch.maximum(torch.linalg.vector_norm(old.float()), torch.linalg.vector_norm(new.float()))
            items.append((entry, delta.div_(scale.clamp_min(tiny))))
        self._rows("update_ratio", items)

    def _end_step(self) -> None:
        self._guard("activations", self.taps.flush)
        if self._deferred:
            self._guard("gradients", self._fill_deferred)
        self._cache = {}
        self._calls = {}
        self._deferred = {}
        self._norm_taken = False
        self._loss_taken = -1
        self._backward_seen = False
        self._close_step()


def _loss_of(out):
    """The loss a model returns: a 0-d floating tensor requiring grad, alone, as the only such item of a tuple or
    list, or as the 'loss' entry (or attribute) of a dict-like output (Hugging Face's ModelOutput)."""
    if isinstance(out, torch.Tensor):
        return out if out.dim() == 0 and out.is_floating_point() and out.requires_grad else None
    if isinstance(out, dict) or hasattr(out, "loss"):
        loss = out.get("loss") if isinstance(out, dict) else getattr(out, "loss", None)
        return _loss_of(loss) if isinstance(loss, torch.Tensor) else None
    if isinstance(out, (tuple, list)):
        found = [o for o in out if isinstance(o, torch.Tensor) and _loss_of(o) is not None]
        return found[0] if len(found) == 1 else None
    return None
