"""Cell entries (levels L0 and mix): forward pre/post hooks on every sub-cell of the model, a per-call
CellBackwardHook for the backward entry, Parameter hooks for `parameters_grad`, and the cell hierarchy of
construct.json.

A cell call is named `Cell.<path>.<Class>.forward.<n>` (its inputs recorded before the call; the entry is placed
when the call returns, so cells come after their inner entries, as the reference writes them). Its backward
entry `...backward.<n>` comes from a CellBackwardHook made for that call: applied to the call's tensor arguments
(when one is floating point) and to its outputs, it reports the outputs' and the arguments' gradients once the
autograd engine ran through the cell; a backward pre-hook on the outputs marks where the cell's backward starts
(the parent of the entries inside it in construct.json) and, for a cell without a floating-point argument,
writes the entry with the outputs' gradients alone.
"""

from __future__ import annotations

from collections import OrderedDict

from mindspore import Parameter
from mindspore.common.api import _pynative_executor

from msprobe.mindspore.collector import BackwardBinding, differentiable


def is_jit_cell(cell) -> bool:
    """The cell's construct is compiled by @ms.jit: its calls run as one graph."""
    construct = cell.__dict__.get("construct") or getattr(type(cell), "construct", None)
    return bool(getattr(getattr(construct, "__func__", construct), "__wrapped_by_jit__", False))


def walk_cells(model, prefix: str = ""):
    """(path, cell, is_jit) of the model and its sub-cells, depth first, each cell once (the first path that
    reaches it); the sub-cells of a jit cell are not visited."""
    seen = set()
    todo = [(prefix, model)]
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


class CellHooks:
    def __init__(self, collector):
        self.col = collector
        self.hooked: list = []          # (cell, pre-hook, post-hook)
        self.handles: list = []
        self.param_handles: dict = {}
        self.jit_cells: list = []
        self.reset()

    def reset(self) -> None:
        self.counts: dict = {}
        self.stack: list = []
        self.queue: OrderedDict = OrderedDict()
        self.bindings: dict = {}
        self.grad_index: dict = {}
        self.grad_entries: dict = {}
        self.entries: dict = {}
        for handle in self.param_handles.values():
            handle.remove()
        self.param_handles = {}

    # ------------------------------------------------------------------ construct.json
    def current_parent(self):
        return self.stack[-1] if self.stack else None

    backward_parent = current_parent

    def _enter(self, name: str) -> None:
        """A cell's forward (or backward) starts: its parent is the cell on top of the stack."""
        if self.col.config.level != "L1":
            self.col.writer.construct[name] = self.stack[-1] if self.stack else self._find_last(name)
        self.queue[name] = True
        self.stack.append(name)

    def _leave(self, name: str) -> None:
        self.queue.pop(name, None)
        if self.stack:
            self.stack.pop()

    def _find_last(self, name: str):
        """With an empty stack (another thread), the parent is the latest open cell whose path is this cell's
        path without its last part."""
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
            lead = f"{index}." if len(models) > 1 else ""
            for path, cell, jit in walk_cells(model):
                if cell is model:
                    continue
                if jit:
                    self.jit_cells.append(f"{lead}{path}")
                    continue
                prefix = f"Cell.{lead}{path}.{type(cell).__name__}."
                self.hooked.append((cell, self._pre_hook(prefix), self._post_hook(prefix)))
        self.resume()

    def resume(self) -> None:
        for cell, pre, post in self.hooked:
            self.handles.append(cell.register_forward_pre_hook(pre, with_kwargs=True))
            self.handles.append(cell.register_forward_hook(post, with_kwargs=True, prepend=True))

    def suspend(self) -> None:
        """No hook of ours on any cell (while a graph compiles: the compiler would parse them)."""
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def uninstall(self) -> None:
        self.suspend()
        self.hooked = []
        for handle in self.param_handles.values():
            handle.remove()
        self.param_handles = {}

    # ------------------------------------------------------------------ forward
    def _pre_hook(self, prefix: str):
        col = self.col

        def hook(cell, args, kwargs):
            if not col.cells_active or col.depth:
                return None
            col.enter()
            try:
                index = self.counts[prefix] = self.counts.get(prefix, -1) + 1
                forward = f"{prefix}forward.{index}"
                self._enter(forward)
                body: dict = {}
                if col.selected(forward, is_api=False) and col.direction_ok("forward"):
                    col.record_inputs(forward, body, args, kwargs)
                    stack = col.stack(forward, body)
                    if stack is not None:
                        col.writer.add_stack(forward, stack)
                    col.writer.data[forward] = body        # placed again at the end when it returns
                    self.entries[forward] = body
                if (col.direction_ok("backward") and _pynative_executor.requires_grad()
                        and differentiable(args)):
                    binding = col.guard(forward, body, "backward hook",
                                        lambda: self._binding(f"{prefix}backward.{index}", cell, True))
                    if binding is not None:
                        self.bindings[forward] = binding
                        return binding.inputs(tuple(args)), kwargs
                return None
            except Exception as exc:  # noqa: BLE001 - the user's training must go on
                col.log_once((type(exc).__name__, "cell pre-hook"), "msprobe dump: a cell hook failed (%s: %s); "
                             "its entry is skipped and training continues", type(exc).__name__, exc)
                return None
            finally:
                col.leave()
        return hook

    def _post_hook(self, prefix: str):
        col = self.col

        def hook(cell, args, kwargs, output):
            if not col.cells_active or col.depth:
                return None
            col.enter()
            try:
                index = self.counts.get(prefix, 0)
                forward = f"{prefix}forward.{index}"
                backward = f"{prefix}backward.{index}"
                self._leave(forward)
                body = self.entries.pop(forward, None)
                if body is not None:
                    if col.section_ok("output"):
                        col.record_outputs(forward, body, output)
                        col.writer.data.pop(forward, None)
                        col.writer.data[forward] = body
                    params = {name.split(".")[-1]: p for name, p in cell.parameters_and_names(expand=False)}
                    if params and col.section_ok("input"):
                        col.guard(forward, body, "parameters", lambda: body.__setitem__(
                            "parameters", {k: col.recorder.record(p, f"{forward}.parameters.{k}")
                                           for k, p in params.items()}))
                if col.direction_ok("backward"):
                    self._hook_params(prefix, cell)
                if not _pynative_executor.requires_grad() or not col.direction_ok("backward"):
                    return None
                binding = self.bindings.pop(forward, None)
                if binding is not None:
                    output = binding.outputs(output)
                return self._pre_binding(backward, cell, binding is None).outputs(output)
            except Exception as exc:  # noqa: BLE001 - the user's training must go on
                col.log_once((type(exc).__name__, "cell hook"), "msprobe dump: a cell hook failed (%s: %s); its "
                             "entry is incomplete and training continues", type(exc).__name__, exc)
                return None
            finally:
                col.leave()
        return hook

    # ------------------------------------------------------------------ backward
    def _binding(self, name: str, cell, with_inputs: bool) -> BackwardBinding:
        """The hook at the call's arguments: the cell's backward entry, then its backward ends."""
        col = self.col

        def write(grad_outputs, grad_inputs):
            self._write_backward(name, grad_outputs, grad_inputs)
            self._leave(name)
        return BackwardBinding(col, name, col.backward_callback(name, None, write), with_inputs, cell)

    def _pre_binding(self, name: str, cell, writes: bool) -> BackwardBinding:
        """The pre-hook at the call's outputs: the cell's backward starts (and, for a cell without a
        floating-point argument, its entry is written and its backward ends there)."""
        col = self.col

        def start(grad_outputs, _):
            self._enter(name)
            if writes:
                self._write_backward(name, grad_outputs, ())
                self._leave(name)
        return BackwardBinding(col, name, col.backward_callback(name, None, start), False, cell)

    def _write_backward(self, name: str, grad_outputs, grad_inputs) -> None:
        col = self.col
        if not col.selected(name, is_api=False):
            return
        body: dict = {}
        col.record_backward(name, body, grad_outputs, grad_inputs)
        col.writer.data[name] = body

    def _hook_params(self, prefix: str, cell) -> None:
        """Gradient hooks on the cell's own parameters, once per step, from its first call (a cell not called in
        the step gets no parameters_grad entry)."""
        owner = prefix[:-1]
        for name, param in cell.parameters_and_names(expand=False):
            short = name.split(".")[-1]
            key = (owner, short)
            if key in self.param_handles or not isinstance(param, Parameter) or not param.requires_grad:
                continue
            self.param_handles[key] = param.register_hook(self._grad_hook(owner, short))

    def _grad_hook(self, owner: str, short: str):
        col = self.col
        generation = col.generation

        def hook(grad):
            if generation != col.generation or col.depth:
                return None
            col.enter()
            try:
                index, first = self.grad_index.get(owner, (-1, short))
                if index < 0 or first == short:
                    index += 1
                self.grad_index[owner] = (index, first)
                name = f"{owner}.parameters_grad.{index}"
                if not col.selected(name, is_api=False):
                    return None
                body = col.writer.data.pop(name, None)       # placed where its latest gradient arrived
                if body is None:
                    body = {}
                col.writer.data[name] = body
                col.guard(name, body, "gradient", lambda: body.__setitem__(
                    short, [col.recorder.record(grad, f"{name}.{short}")]))
            except Exception as exc:  # noqa: BLE001 - the user's training must go on
                col.log_once((type(exc).__name__, "grad hook"), "msprobe dump: a parameter gradient hook failed "
                             "(%s: %s); its entry is skipped and training continues", type(exc).__name__, exc)
            finally:
                col.leave()
            return None
        return hook
