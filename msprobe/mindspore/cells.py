"""Cell entries (levels L0 and mix): forward pre/post hooks on every sub-cell of the model, a per-call
CellBackwardHook for the backward entry, Parameter hooks for `parameters_grad`, and the cell hierarchy of
construct.json.

A cell call is named `Cell.<path>.<Class>.forward.<n>` (its inputs are recorded before the call, and the entry is
written when the call returns, so a cell comes after its inner entries, as the reference writes them). Its backward
entry `...backward.<n>` comes from a CellBackwardHook made for that call: applied to the call's tensor arguments
(when one is floating point) and to its outputs, it reports the outputs' and the arguments' gradients once the
autograd engine ran through the cell. A backward pre-hook on the outputs marks where the cell's backward starts
(the parent of the entries inside it in construct.json) and, for a cell without a floating-point argument,
writes the entry with the outputs' gradients alone. `parameters_grad.<n>` holds the gradients of the cell's own
parameters, written when the last of them arrived.
"""

from __future__ import annotations

import sys
from collections import OrderedDict

from mindspore import Parameter

from msprobe.collect.guard import one_line
from msprobe.mindspore.collector import BackwardBinding, differentiable


def is_jit_cell(cell) -> bool:
    """The cell's construct is compiled by @ms.jit: its calls run as one graph."""
    construct = cell.__dict__.get("construct") or getattr(type(cell), "construct", None)
    return bool(getattr(getattr(construct, "__func__", construct), "__wrapped_by_jit__", False))


def walk_cells(model):
    """(path, cell, is_jit) of the model and its sub-cells, depth first, each cell once (the first path that
    reaches it); the sub-cells of a jit cell are not visited."""
    seen = set()
    todo = [("", model)]
    while todo:
        path, cell = todo.pop()
        if id(cell) in seen:
            continue
        seen.add(id(cell))
        jit = is_jit_cell(cell)
        yield path, cell, jit
        if jit:
            continue
        children = [(f"{path}.{name}" if path else name, child) for name, child in cell._cells.items() if child]
        todo.extend(reversed(children))


def _add_forward_hook(cell, hook):
    """`hook` as the cell's first forward hook (with kwargs, also called when the construct raises, with the
    output None, inside MindSpore's exception handler: the cell is closed). Cell.register_forward_hook ignores a cell with a
    custom `bprop` (it returns an empty handle), so such a cell gets the hook in its hook dict directly, as the
    reference does; the handle removes it either way."""
    if not cell.has_bprop:
        return cell.register_forward_hook(hook, with_kwargs=True, prepend=True, always_call=True)
    from mindspore.common.hook_handle import HookHandle

    handle = HookHandle(cell._forward_hook, extra_dict=[cell._forward_hook_with_kwargs,
                                                        cell._forward_hook_always_called])
    cell._forward_hook[handle.handle_id] = hook
    cell._forward_hook.move_to_end(handle.handle_id, last=False)
    cell._forward_hook_with_kwargs[handle.handle_id] = True
    cell._forward_hook_always_called[handle.handle_id] = True
    return handle


def _raised_in(cell):
    """The exception that the cell's call raised, when its forward hook runs in MindSpore's handler of it (the
    handler's frame, which belongs to the cell, is on its traceback); else None (a cell returning None)."""
    exc = sys.exc_info()[1]
    trace = exc.__traceback__ if exc is not None else None
    while trace is not None:
        if trace.tb_frame.f_locals.get("self") is cell:
            return exc
        trace = trace.tb_next
    return None


def own_parameters(cell) -> dict:
    """The cell's own parameters by the last part of their names (`weight`, `gamma`, `embedding_table`): a
    parameter tied to another cell's (`head.weight = emb.embedding_table`) keeps its own name, as the reference
    names it."""
    return {name.split(".")[-1]: p for name, p in cell.parameters_dict(recurse=False).items()}


class _GradEntry:
    """One parameters_grad entry: the gradients of a cell's parameters from one backward pass (a pass ends when all
    of them arrived, or when one of them arrives again: passes may deliver them in another order)."""

    def __init__(self, name: str):
        self.name = name
        self.body: dict = {}
        self.selected = True


class CellHooks:
    def __init__(self, collector):
        self.col = collector
        self.hooked: list = []          # (cell, pre-hook, post-hook)
        self.handles: list = []
        self.jit_cells: list = []       # paths of the @ms.jit cells with sub-cells (run inside their graph)
        self.jit_ids: set = set()       # ids of the @ms.jit cells hooked here (their own calls)
        self.graph = None               # the GraphRoute that taps the cells inside them (CPU)
        self.indexed = False            # models given as a list: cell names start with the model's index
        self.param_handles: dict = {}   # (cell prefix, short name) -> handle, for this step
        self.reset()

    def reset(self) -> None:
        self.counts: dict = {}
        self.calls: dict = {}           # cell prefix -> [(index, forward position)] of its calls not returned
        self.stack: list = []
        self.queue: OrderedDict = OrderedDict()
        self.bindings: dict = {}
        self.pending: dict = {}         # forward name -> (body, stack) of a call that has not returned
        self.grad_index: dict = {}      # cell prefix -> index of its latest parameters_grad entry
        self.grads: dict = {}           # cell prefix -> _GradEntry waiting for more gradients
        self.remove_param_hooks()

    # ------------------------------------------------------------------ construct.json
    def current_parent(self):
        return self.stack[-1] if self.stack else None

    backward_parent = current_parent

    def _enter(self, name: str) -> None:
        """A cell's forward (or backward) starts: its parent is the cell on top of the stack."""
        if self.col.config.level != "L1":
            self.col.writer.add_construct(name, self.stack[-1] if self.stack else self._find_last(name))
        self.queue[name] = True
        self.stack.append(name)

    def _leave(self, name: str) -> None:
        self.queue.pop(name, None)
        if self.stack:
            self.stack.pop()

    def _find_last(self, name: str):
        """With an empty stack, the parent is the latest open cell whose path is this cell's path without its last
        part (the reference's rule)."""
        parts = name.split(".")
        if len(parts) < 5:
            return None
        wanted = ".".join(parts[:-4])
        if wanted == "Cell":
            return None
        for candidate in reversed(self.queue):
            if ".".join(candidate.split(".")[:-3]) == wanted:
                return candidate
        return None

    # ------------------------------------------------------------------ install
    def install(self, models) -> None:
        for index, model in enumerate(models):
            lead = f"{index}." if self.indexed else ""
            for path, cell, jit in walk_cells(model):
                if cell is model:
                    continue
                if jit:
                    self.jit_ids.add(id(cell))
                    if any(cell._cells.values()):
                        self.jit_cells.append(f"{lead}{path}")
                prefix = f"Cell.{lead}{path}.{type(cell).__name__}."
                self.hooked.append((cell, self._pre_hook(prefix, jit), self._post_hook(prefix, jit)))
        self.resume()

    def resume(self) -> None:
        for cell, pre, post in self.hooked:
            self.handles.append(cell.register_forward_pre_hook(pre, with_kwargs=True))
            self.handles.append(_add_forward_hook(cell, post))

    def suspend(self) -> None:
        """No hook of ours on any cell (while a graph compiles: the compiler would parse them)."""
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def uninstall(self) -> None:
        self.suspend()
        self.hooked = []
        self.jit_cells = []
        self.jit_ids = set()
        self.remove_param_hooks()

    def remove_param_hooks(self) -> None:
        for handle in self.param_handles.values():
            handle.remove()
        self.param_handles = {}

    def flush(self) -> None:
        """At stop(): the calls that never returned (inputs only) and the parameters_grad entries still waiting."""
        writer = self.col.writer
        for name, (body, stack) in self.pending.items():
            body.setdefault("dump_error", "the call did not return before stop()")
            writer.add(name, body, stack)
        self.pending = {}
        for entry in self.grads.values():
            if entry.selected:
                writer.add(entry.name, entry.body)
        self.grads = {}

    # ------------------------------------------------------------------ forward
    def _shielded(self, what: str, work):
        """A cell hook: only while recording and not inside a recorded call, as the collector's own work, never
        raising (a failure is logged once per kind)."""
        col = self.col

        def hook(*args):
            if not col.cells_active or col.depth:
                return None
            col.enter()
            try:
                return work(*args)
            except Exception as exc:  # noqa: BLE001 - the user's training must go on
                col.errors.once((type(exc).__name__, what), "a cell %s failed (%s); its entry is incomplete and "
                                "training continues", what, one_line(exc))
                return None
            finally:
                col.leave()
        return hook

    def _pre_hook(self, prefix: str, jit: bool = False):
        col = self.col

        def work(cell, args, kwargs):
            index = col.count(self.counts, prefix)
            seq = col.next_seq()
            self.calls.setdefault(prefix, []).append((index, seq))     # the post-hook of this call reads it back
            forward = f"{prefix}forward.{index}"
            self._enter(forward)
            if col.selected(forward) and col.direction_ok("forward"):
                body: dict = {}
                col.record_inputs(forward, body, args, kwargs)
                stack = col.stack(forward, body)
                if col.section_ok("output"):
                    self.pending[forward] = (body, stack)      # written when the call returns
                else:
                    self._add_parameters(forward, body, cell)
                    col.writer.add(forward, body, stack)
            hooked = None
            if col.grads_wanted() and differentiable(args):
                binding = self._binding(prefix, index, cell, seq, jit)
                self.bindings[forward] = binding
                hooked = binding.inputs(tuple(args)), kwargs
            if jit:                     # the taps inside its graph report to this call from here on
                self.graph.window("forward", prefix, index, self.stack)
            return hooked
        return self._shielded("pre-hook", work)

    def _post_hook(self, prefix: str, jit: bool = False):
        col = self.col

        def work(cell, args, kwargs, output):
            calls = self.calls.get(prefix)
            if not calls:
                return None             # its pre-hook did not run (the cell was called before recording started)
            index, seq = calls.pop()   # this call's own (the innermost open call of a recursive cell)
            forward = f"{prefix}forward.{index}"
            if jit:                     # the entries of the cells inside it come before its own
                self.graph.window_closed()
            self._leave(forward)
            raised = _raised_in(cell) if output is None else None
            waiting = self.pending.pop(forward, None)
            if waiting is not None:
                body, stack = waiting
                if raised is not None:      # the construct raised: the entry keeps its inputs and says so
                    body["dump_error"] = f"the call raised {one_line(raised)}"
                else:
                    col.record_outputs(forward, body, output)
                self._add_parameters(forward, body, cell)
                col.writer.add(forward, body, stack)
            binding = self.bindings.pop(forward, None)
            if raised is not None or not col.grads_wanted():
                return None
            self._hook_params(prefix, cell)
            if binding is None:
                binding = self._pre_binding(prefix, index, cell, seq, jit)
            return binding.outputs(output)
        return self._shielded("hook", work)

    def _add_parameters(self, name: str, body: dict, cell) -> None:
        col = self.col
        if not col.section_ok("input"):
            return
        params = own_parameters(cell)
        if params:
            col.guard(name, body, "parameters", lambda: body.__setitem__(
                "parameters", {k: col.recorder.record(p, f"{name}.parameters.{k}") for k, p in params.items()}))

    # ------------------------------------------------------------------ backward
    def _binding(self, prefix: str, index: int, cell, seq: int, jit: bool) -> BackwardBinding:
        """The backward hook at the call's arguments and outputs: the cell's backward starts when the outputs'
        gradients arrive (the parent of the entries inside it); its entry is written, and its backward ends, when
        the arguments' gradients are computed. A jit cell's backward window (graph_mode.py) is open in between."""
        col = self.col
        name = f"{prefix}backward.{index}"

        def start(_grad_outputs, _):
            col.settle_waiting(seq)
            self._enter(name)
            if jit:
                self.graph.window("backward", prefix, index, self.stack)

        def write(grad_outputs, grad_inputs):
            col.settle_waiting(seq)
            if jit:
                self.graph.window_closed()
            self._write_backward(name, grad_outputs, grad_inputs)
            self._leave(name)
        return BackwardBinding(col, name, col.backward_callback(name, write), True, cell,
                               col.backward_callback(name, start))

    def _pre_binding(self, prefix: str, index: int, cell, seq: int, jit: bool) -> BackwardBinding:
        """For a call without a floating-point argument, the pre-hook at its outputs: the cell's entry, with the
        outputs' gradients alone (written before its backward runs: a jit cell's backward window stays open until
        the next window or stop())."""
        col = self.col
        name = f"{prefix}backward.{index}"

        def write(grad_outputs, _):
            col.settle_waiting(seq)
            self._enter(name)
            self._write_backward(name, grad_outputs, ())
            if jit:
                self.graph.window("backward", prefix, index, self.stack)
            self._leave(name)
        return BackwardBinding(col, name, col.backward_callback(name, write), False, cell)

    def _write_backward(self, name: str, grad_outputs, grad_inputs) -> None:
        col = self.col
        if not col.selected(name):
            return
        body: dict = {}
        col.record_backward(name, body, grad_outputs, grad_inputs)
        col.writer.add(name, body)

    def _hook_params(self, prefix: str, cell) -> None:
        """Gradient hooks on the cell's own parameters, once per step, from its first call (a cell not called in
        the step gets no parameters_grad entry)."""
        owner = prefix[:-1]
        for short, param in own_parameters(cell).items():
            key = (owner, short)
            if key in self.param_handles or not isinstance(param, Parameter) or not param.requires_grad:
                continue
            self.param_handles[key] = param.register_hook(self._grad_hook(owner, short))

    def _grad_hook(self, owner: str, short: str):
        col = self.col

        def write(grad):
            entry = self.grads.get(owner)
            if entry is not None and short in entry.body:       # this parameter again: a new backward pass
                if entry.selected:
                    col.writer.add(entry.name, entry.body)
                entry = None
            if entry is None:
                index = self.grad_index[owner] = self.grad_index.get(owner, -1) + 1
                entry = self.grads[owner] = _GradEntry(f"{owner}.parameters_grad.{index}")
                entry.selected = col.selected(entry.name)
            name = entry.name
            try:
                entry.body[short] = [col.recorder.record(grad, f"{name}.{short}")] if entry.selected else []
            except Exception as exc:  # noqa: BLE001 - the user's training must go on
                entry.body[short] = [{"dump_error": col.errors.failed("gradient", name, exc)}]
            hooked = sum(1 for (cell_prefix, _) in self.param_handles if cell_prefix == owner)
            if len(entry.body) >= hooked:          # where its last gradient arrived, as the reference
                if entry.selected:
                    col.writer.add(entry.name, entry.body)
                del self.grads[owner]
        callback = col.backward_callback(f"{owner}.parameters_grad", write)

        def hook(grad):
            callback(grad)
            return None
        return hook
