"""L0 module hooks: forward entries from forward pre/post hooks, backward entries from hooks that only observe the
autograd graph.

`register_full_backward_hook` wraps a module's inputs and outputs in BackwardHookFunction views: any in-place op on
them (BatchNorm -> ReLU(inplace=True), `out += identity`, `y[:, 0] *= 2` on a module's output) then raises into the
user's code, and the extra nodes change the order in which autograd sums an input's gradient contributions. Here no
node is added to the graph:

* gradients w.r.t. the call's outputs: tensor hooks on the output tensors (a tensor hook keeps the gradient of the
  value the module returned even when that tensor is modified in place afterwards). Such a hook sees the tensor's
  total gradient, which is the one that came from outside only if nothing the call created consumes the tensor.
  For an output the call also uses inside itself (attention weights that compute the attention output, a
  BertModel's last hidden state fed to its pooler) or did not create (an input or a tensor it returns as it is),
  the slot gets only what came from outside: when a backward starts, the graph is walked once from its roots and
  post-hooks go on the nodes created after the call that consume such an output; their contributions are summed
  in the order they arrive, and a slot none of them reached is null, as the reference's BackwardHookFunction
  (which sees only the returned object's uses) has it. An output that is a view (a 3-d Linear's output) and is
  modified in place later gives its base a CopySlices node and its own node may never run: the view's part of
  that node's base gradient is added to its slot (`_view_region`), and likewise for an input that is a view
  modified in place by the call;
* gradients w.r.t. its inputs, through this call only: post-hooks on the nodes the call created that consume an
  input (found by walking from the outputs down to the nodes created before the call, by autograd sequence number),
  summed in the order they arrive, which is the order autograd sums them;
* the entry is written when the first input's own node is about to run (every contribution of the call is in by
  then; entries waiting on one node are written innermost/latest call first), or from the output hook when no
  input requires grad.

Slots follow the reference: `input` holds the gradients of the output tensors that require grad, `output` those of
the positional-argument tensors that require grad (tuples, lists and dict values flattened depth first), null where
no gradient arrived.
"""

from __future__ import annotations

import threading

import torch
from torch.autograd.graph import get_gradient_edge

from msprobe.pytorch.taps import call_nodes

_MAX_DEPTH = 32


def grad_tensors(value, depth: int = 0, found: list | None = None) -> list:
    """The tensors requiring grad in `value` (tuples, lists, dict values), depth first: a backward entry's slots."""
    found = [] if found is None else found
    if isinstance(value, torch.Tensor):
        if value.requires_grad:
            found.append(value)
    elif depth < _MAX_DEPTH and isinstance(value, (list, tuple)):
        for item in value:
            grad_tensors(item, depth + 1, found)
    elif depth < _MAX_DEPTH and isinstance(value, dict):
        for item in value.values():
            grad_tensors(item, depth + 1, found)
    return found


def compiled_paths(model: torch.nn.Module) -> list:
    """Paths (in named_modules) of the modules that torch.compile runs: OptimizedModule wrappers and modules
    compiled in place with Module.compile()."""
    paths = []
    for path, module in model.named_modules():
        if hasattr(module, "_orig_mod") or getattr(module, "_compiled_call_impl", None) is not None:
            paths.append(path)
    return paths


def guard_compiled(collector, models, handles: list) -> None:
    """Leave torch.compile'd modules alone: nothing is recorded while one runs (its compiled code calls kernels
    such as torch.addmm that would otherwise show up as APIs), and the log says so once."""
    for model in models:
        compiled = compiled_paths(model)
        roots = [p for p in compiled if not _inside(p, [r for r in compiled if r != p])]
        if not roots:
            continue
        named = dict(model.named_modules())
        where = ", ".join(p or "the whole model" for p in roots)
        collector.log_once(("compiled", where), "%s runs under torch.compile (%s): the modules and APIs inside "
                           "compiled code are not dumped, since observing them would change what the compiler "
                           "generates", type(getattr(model, "_orig_mod", model)).__name__, where)
        for path in roots:
            saved: list = []

            def enter(_mod, _args, saved=saved):
                if not torch.compiler.is_compiling():       # Module.compile() traces its own hooks
                    saved.append(collector.busy)
                    collector.busy = True

            def leave(_mod, _args, _out, saved=saved):
                if saved and not torch.compiler.is_compiling():
                    collector.busy = saved.pop()

            handles.append(named[path].register_forward_pre_hook(enter))
            handles.append(named[path].register_forward_hook(leave, always_call=True))


def _inside(path: str, roots: list) -> bool:
    return any(root == "" or path == root or path.startswith(root + ".") for root in roots)


def _edge_key(edge) -> tuple:
    return id(edge.node), edge.output_nr


def _view_region(tensor):
    """Where a view lies in its base, for a view whose base requires grad (None otherwise): (the base's gradient
    edge, the base's size and strides, the view's size, strides and offset in the base). An in-place op on a view
    gives its base a CopySlices node; the gradient for the view's old value is that node's base gradient there."""
    if not tensor._is_view():
        return None
    base = tensor._base
    if base is None or not base.requires_grad:
        return None
    return (get_gradient_edge(base), tuple(base.shape), base.stride(), tuple(tensor.shape), tensor.stride(),
            tensor.storage_offset() - base.storage_offset())


def _in_region(grad, region):
    """The part of a base's gradient that belongs to the view `region` describes (a copy), or None."""
    _, base_size, base_stride, size, stride, offset = region
    if grad is None or tuple(grad.shape) != base_size:
        return None
    whole = grad.new_empty_strided(base_size, base_stride)
    whole.copy_(grad)
    return whole.as_strided(size, stride, offset).clone()


class _Call:
    """One forward call of a hooked module whose backward entry is still to be written."""

    __slots__ = ("name", "parent", "order", "generation", "marker", "in_edges", "grad_in", "grad_out", "passthrough",
                 "out_nodes", "arrived", "consumers_left", "body", "placed", "written", "slot", "end", "shared",
                 "outside", "found", "seen", "regions", "in_regions", "out_slots", "moved", "inner")

    def __init__(self, name, parent, order, generation, marker, in_edges):
        self.name = name
        self.parent = parent
        self.order = order
        self.generation = generation
        self.marker = marker
        self.in_edges = in_edges
        self.grad_in = [None] * len(in_edges)
        self.grad_out: list = []
        self.passthrough: list = []   # (output slot, input slots) where the module returned an input as it is
        self.out_nodes: list = []     # the node of each distinct output tensor
        self.arrived: set = set()     # distinct outputs whose gradient came
        self.consumers_left = 0       # nodes of the call consuming an input that have not run yet
        self.body: dict = {}
        self.placed = False           # its position in dump.json is taken, the data follows
        self.written = False
        self.slot = None              # the writer's Slot of a placed call
        self.end = marker             # sequence number at its return: nodes made later are outside the call
        self.shared: dict = {}        # output position -> its edge key, for the outputs whose tensor hook sees
        #                               more than what came from outside (used inside, or not made by the call)
        self.outside: dict = {}       # output position -> sum of the gradients that came from outside
        self.found = False            # a backward start looked for the consumers outside of its shared outputs
        self.seen: dict = {}          # id(node) -> node: the consumers outside that got a hook
        self.regions: dict = {}       # output position -> _view_region of an output that is a view
        self.in_regions: dict = {}    # input slot -> _view_region of an input that is a view
        self.out_slots: list = []     # output position -> its output slots
        self.moved: dict = {}         # output position -> gradient of a view output through in-place ops on it
        self.inner: dict = {}         # id(node) -> node: the call's nodes that consume an output or its view's base


class ModuleHooks:
    """Installs the L0 hooks of one Collector and writes the module entries into its StepWriter."""

    def __init__(self, collector):
        self.col = collector
        self._forward: dict = {}     # (id(module), thread) -> stack of (forward name, body, stack, dump, call)
        self._pending_grads: dict = {}
        self._waits: dict = {}       # id(node) -> [node, calls waiting for it]
        self._ready: list = []       # calls whose input gradients are complete, written at the next hook
        self._handles: list = []
        self._order = 0
        self._marker_leaf = None
        self._shared: list = []      # calls with an output whose gradient from outside needs the graph walk
        self._run_backward = None    # our replacement of torch.autograd._engine_run_backward, made once

    # ------------------------------------------------------------------ install
    def install(self, models, handles: list) -> None:
        many = len(models) > 1
        for model_index, model in enumerate(models):
            skipped = compiled_paths(model) + self._scripted(model)
            for path, module in model.named_modules():
                if not path or _inside(path, skipped):
                    continue
                prefix = f"Module.{model_index}.{path}" if many else f"Module.{path}"
                self._hook(module, f"{prefix}.{type(module).__name__}", handles)
        self._patch_backward()

    def _scripted(self, model) -> list:
        """Paths of the TorchScript modules (torch.jit.script/trace): they take no Python hooks, and what runs
        inside them is not Python; they and their sub-modules are left out, and the log says so once."""
        paths = [path for path, module in model.named_modules() if isinstance(module, torch.jit.ScriptModule)]
        roots = [p for p in paths if not _inside(p, [r for r in paths if r != p])]
        if roots:
            where = ", ".join(p or "the whole model" for p in roots)
            self.col.log_once(("scripted", where), "%s is a TorchScript module: it and its sub-modules are not "
                              "hooked and the APIs inside it are not recorded (TorchScript runs them without "
                              "Python)", where)
        return roots

    def reset(self) -> None:
        self._forward = {}
        self._pending_grads = {}
        self._waits = {}
        self._ready = []
        self._shared = []

    def stop(self) -> None:
        """End of recording: write the backward entries whose input gradients never came (their inputs' nodes
        were not run), drop the hooks left on leaves."""
        self.flush()
        waiting = {id(call): call for _, calls in self._waits.values() for call in calls
                   if (call.arrived or call.placed) and self._live(call)}
        for call in sorted(waiting.values(), key=lambda c: c.order, reverse=True):
            self._write(call)
        self._waits = {}
        self._shared = []
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _hook(self, module, key: str, handles: list) -> None:
        col = self.col

        def pre(mod, args, kwargs):
            if torch.compiler.is_compiling() or not col.module_active or col.busy:
                return None
            with col.shielded(f"{key} forward"):
                self._before(mod, key, args, kwargs)
            return None

        def post(mod, args, kwargs, out):
            if torch.compiler.is_compiling() or not col.module_active or \
                    not self._forward.get((id(mod), threading.get_ident())):
                return None
            with col.shielded(f"{key} forward"):
                self._after(mod, out)
            return None

        handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(module.register_forward_hook(post, with_kwargs=True, always_call=True))
        params = [(n, p) for n, p in module.named_parameters(recurse=False) if p.requires_grad]
        for pname, param in params:
            handles.append(param.register_hook(self._param_grad_hook(key, pname, [n for n, _ in params])))

    # ------------------------------------------------------------------ forward
    def _before(self, mod, key: str, args, kwargs) -> None:
        col = self.col
        index = col.count(col.module_counts, key)
        forward = f"{key}.forward.{index}"
        parent = col.parent()
        col.writer.add_construct(forward, parent)
        col.thread_stack().append(forward)
        body: dict = {}
        stack = None
        dump = col.selected(forward) and col.direction_ok("forward")
        if dump:
            col.record_inputs(forward, body, args, kwargs)
            stack = col.guard(forward, body, "stack", col.stack_lines)
        call = None
        backward = f"{key}.backward.{index}"
        if torch.is_grad_enabled() and col.direction_ok("backward") and col.selected(backward):
            with col.shielded(f"{backward} set-up"):      # without it the forward entry is still written
                self._order += 1
                parent_bw = parent.replace(".forward.", ".backward.") if parent else None
                inputs = grad_tensors(args)
                call = _Call(backward, parent_bw, self._order, col.generation, self._marker(),
                             [get_gradient_edge(t) for t in inputs])
                call.in_regions = {slot: r for slot, r in enumerate(map(_view_region, inputs)) if r is not None}
        self._forward.setdefault((id(mod), threading.get_ident()), []).append((forward, body, stack, dump, call))

    def _after(self, mod, out) -> None:
        col = self.col
        forward, body, stack, dump, call = self._forward[(id(mod), threading.get_ident())].pop()
        if call is not None:
            call.end = self._marker()
        module_stack = col.thread_stack()
        if forward in module_stack:
            del module_stack[module_stack.index(forward):]
        if dump:        # also when the forward raised (out is None), e.g. a checkpoint recomputation stopped early
            col.record_outputs(forward, body, out)
            params = dict(mod.named_parameters(recurse=False))
            if col.section_ok("input"):
                col.guard(forward, body, "parameters", lambda: body.__setitem__("parameters", {
                    n: col.record(p, f"{forward}.parameters.{n}") for n, p in params.items()}))
            # reference order: input_args, input_kwargs, output, parameters
            col.add_entry(forward, body, stack)
        if call is not None and out is not None:
            self._watch(call, out)

    def _marker(self) -> int:
        """The autograd sequence number of a node made now: every node the call creates gets a larger one."""
        if self._marker_leaf is None:
            self._marker_leaf = torch.empty(0, requires_grad=True)
        return self._marker_leaf.view(0).grad_fn._sequence_nr()

    # ------------------------------------------------------------------ backward
    def _watch(self, call: _Call, out) -> None:
        outputs = grad_tensors(out)
        if not outputs:
            return            # no gradient flows back through this call
        call.grad_out = [None] * len(outputs)
        slots: dict = {}
        for i, edge in enumerate(call.in_edges):
            slots.setdefault(_edge_key(edge), []).append(i)
        out_edges = [get_gradient_edge(t) for t in outputs]
        call.passthrough = [(j, slots[_edge_key(e)]) for j, e in enumerate(out_edges) if _edge_key(e) in slots]
        unique: dict = {}
        for j, tensor in enumerate(outputs):
            unique.setdefault(id(tensor), (tensor, out_edges[j], []))[2].append(j)
        positions = {_edge_key(edge): position for position, (_, edge, _) in enumerate(unique.values())}
        call.out_slots = [output_slots for _, _, output_slots in unique.values()]
        base_slots: dict = {}
        for slot, region in call.in_regions.items():
            base_slots.setdefault(_edge_key(region[0]), []).append((slot, region))
        for position, (tensor, _, _) in enumerate(unique.values()):
            region = _view_region(tensor)
            if region is not None:
                call.regions[position] = region      # the caller may modify it in place
        watched = {_edge_key(region[0]): None for region in call.regions.values()} | positions
        consumers = self._consumers(out_edges, call.marker, slots, watched, call.inner, base_slots)
        call.consumers_left = len(consumers)
        for node, pairs in consumers:
            node.register_hook(self._consumer_hook(call, pairs, id(node)))
        call.out_nodes = [edge.node for _, edge, _ in unique.values()]
        used_inside = {positions.get((id(nxt), nr)) for node in call.inner.values() for nxt, nr in node.next_functions}
        for position, (_, edge, _) in enumerate(unique.values()):
            if position in used_inside or not self._made_by(edge.node, call):
                call.shared[position] = _edge_key(edge)
        if call.shared or call.regions:
            self._shared.append(call)
        else:
            call.inner = {}
        for position, (tensor, _, output_slots) in enumerate(unique.values()):
            handle = tensor.register_hook(self._output_hook(call, position, output_slots))
            if tensor.grad_fn is None:
                self._handles.append(handle)          # a hook on a leaf outlives the graph
        # a call with inputs is written once all its consumers ran (or, failing that, when an input's node is about
        # to run); one without inputs takes its place when its first output's node is about to run
        for edge in (call.in_edges or out_edges):
            self._wait(edge.node, call)

    @staticmethod
    def _made_by(node, call: _Call) -> bool:
        """Whether the call created this node (a leaf's AccumulateGrad node has the largest sequence number)."""
        return type(node).__name__ != "AccumulateGrad" and call.marker < node._sequence_nr() <= call.end

    @staticmethod
    def _consumers(out_edges, marker: int, slots: dict, watched: dict, inner: dict, base_slots: dict) -> list:
        """(node, [(next-edge index, input slots, view region or None)]) for every node created by the call that
        consumes an input, or modifies an input that is a view in place (its base's CopySlices node); the nodes
        created by the call that consume a `watched` edge (an output, a view output's base) go into `inner`."""
        found = []
        for node in call_nodes(out_edges, marker):
            pairs = []
            for index, (nxt, nr) in enumerate(node.next_functions):
                if nxt is None:
                    continue
                hit = slots.get((id(nxt), nr))
                if hit:
                    pairs.append((index, hit, None))
                if type(node).__name__ == "CopySlices":
                    pairs.extend((index, [slot], region) for slot, region in base_slots.get((id(nxt), nr), ()))
                if (id(nxt), nr) in watched:
                    inner[id(node)] = node
            if pairs:
                found.append((node, pairs))
        return found

    # ------------------------------------------------------------------ gradients from outside
    def _patch_backward(self) -> None:
        """Every backward (Tensor.backward, torch.autograd.backward/grad) goes through
        torch.autograd._engine_run_backward: ours looks for the consumers outside of the shared outputs, then runs
        it. Made once (a function compiled with torch.compile is guarded on the globals it calls); without it
        (another torch) the shared outputs keep their total gradient."""
        original = getattr(torch.autograd, "_engine_run_backward", None)
        if original is None:
            return
        if self._run_backward is None or self._run_backward.__wrapped__ is not original:
            self._run_backward = self._backward_runner(original)
        self.col._patches.set(torch.autograd, "_engine_run_backward", self._run_backward)

    def _backward_runner(self, original):
        def run_backward(t_outputs, *args, **kwargs):
            if not torch.compiler.is_compiling() and self._shared and self.col.module_active:
                with self.col.shielded("module backward set-up"):
                    self._find_outside(t_outputs, args[0] if args else None)
            return original(t_outputs, *args, **kwargs)
        run_backward.__wrapped__ = original
        return run_backward

    def _find_outside(self, roots, grads) -> None:
        """Walk the graph of this backward once from its roots (all of it: sequence numbers are per thread, and the
        graph may have been built in several) and hook the nodes outside a call that consume one of its shared
        outputs or modify a view output's base in place. A root that is
        such an output (`out.backward(g)`, the reentrant checkpoint's backward of its recomputed outputs) gets its
        given gradient from outside."""
        self._shared = calls = [c for c in self._shared if self._live(c)]
        if not calls:
            return
        wanted: dict = {}
        bases: dict = {}
        for call in calls:
            for position, key in call.shared.items():
                made = self._made_by(call.out_nodes[position], call)
                wanted.setdefault(key, []).append((call, position, None, made))
            for position, region in call.regions.items():
                made = self._made_by(region[0].node, call)
                bases.setdefault(_edge_key(region[0]), []).append((call, position, region, made))
        roots = list(roots) if isinstance(roots, (list, tuple)) else [roots]
        grads = list(grads) if isinstance(grads, (list, tuple)) else [None] * len(roots)
        todo = []
        for root, grad in zip(roots, grads):
            edge = get_gradient_edge(root) if isinstance(root, torch.Tensor) else root
            todo.append(edge.node)
            for call, position, _, _ in wanted.get(_edge_key(edge), ()) if isinstance(grad, torch.Tensor) else ():
                have = call.outside.get(position)
                call.outside[position] = grad if have is None else have + grad
        seen: dict = {}
        hits: dict = {}
        while todo:
            node = todo.pop()
            if node is None or id(node) in seen:
                continue
            seen[id(node)] = node
            copies = type(node).__name__ == "CopySlices"
            for index, (nxt, nr) in enumerate(node.next_functions):
                if nxt is None:
                    continue
                for call, position, region, made in wanted.get((id(nxt), nr), []) + (bases.get((id(nxt), nr), [])
                                                                                     if copies else []):
                    # outside: not one of the call's own nodes and, for a tensor the call did not make, made after
                    # the call (by sequence number: in the call's thread)
                    if id(node) not in call.inner and id(node) not in call.seen and \
                            (made or node._sequence_nr() > call.end):
                        hits.setdefault(id(node), (node, []))[1].append((index, call, position, region))
                todo.append(nxt)
        for node, targets in hits.values():
            for _, call, _, _ in targets:
                call.seen[id(node)] = node
            node.register_hook(self._outside_hook(targets))
        for call in calls:
            call.found = True

    def _outside_hook(self, targets: list):
        def hook(grad_inputs, _grad_outputs):
            with self.col.shielded("module output gradients from outside"):
                for index, call, position, region in targets:
                    grad = grad_inputs[index]
                    if grad is None or not self._live(call):
                        continue
                    if region is not None:      # the caller modified the returned view in place
                        grad = _in_region(grad, region)
                        if grad is None:
                            continue
                        if not self._will_run(call.out_nodes[position]):
                            call.arrived.add(position)      # the view's own node has no use left: no hook there
                    into = call.outside if region is None or position in call.shared else call.moved
                    have = into.get(position)
                    into[position] = grad if have is None else have + grad
            return None
        return hook

    def _live(self, call: _Call) -> bool:
        return self.col.module_active and call.generation == self.col.generation and not call.written

    def flush(self) -> None:
        """Write the calls whose input gradients are complete. Called at the start of the output, input-node and API
        backward hooks (not the parameter-gradient ones), so that an entry lands where BackwardHookFunction's node
        would have run: after its module's last inner node and the parameters' AccumulateGrad nodes that node fed,
        before the next node. Calls completed by one node: the innermost/latest call first."""
        if self._ready:
            ready, self._ready = self._ready, []
            for _, _, call in sorted(ready, key=lambda r: (r[0], -r[2].order)):
                if self._live(call):
                    self._write(call)

    def _consumer_hook(self, call: _Call, pairs: list, node_key: int):
        def hook(grad_inputs, _grad_outputs):
            if not self._live(call):
                return None
            with self.col.shielded(f"{call.name} input gradients"):
                for index, input_slots, region in pairs:
                    grad = grad_inputs[index] if region is None else _in_region(grad_inputs[index], region)
                    if grad is None:
                        continue
                    for slot in input_slots:
                        have = call.grad_in[slot]
                        call.grad_in[slot] = grad if have is None else have + grad
                call.consumers_left -= 1
                if call.consumers_left == 0 and call.arrived and not call.passthrough:
                    self._ready.append((self._next_batch(node_key), node_key, call))
            return None
        return hook

    def _output_hook(self, call: _Call, position: int, output_slots: list):
        def hook(grad):
            if not self._live(call):
                return None
            with self.col.shielded(f"{call.name} output gradients"):
                self.flush()
                for j in output_slots:
                    call.grad_out[j] = grad
                call.arrived.add(position)
                if call.placed and self._outputs_complete(call):
                    self._write(call)
            return None
        return hook

    @staticmethod
    def _will_run(node) -> bool:
        try:
            return bool(torch._C._will_engine_execute_node(node))
        except Exception:  # noqa: BLE001 - outside a backward call or an older torch
            return True

    @staticmethod
    def _outputs_complete(call: _Call) -> bool:
        """Whether every output of the call that will get a gradient in this backward has it."""
        missing = [node for i, node in enumerate(call.out_nodes) if i not in call.arrived]
        if not missing:
            return True
        try:
            return not any(torch._C._will_engine_execute_node(node) for node in missing)
        except Exception:  # noqa: BLE001 - outside a backward call or an older torch: completed at stop()
            return False

    def _wait(self, node, call: _Call) -> None:
        entry = self._waits.get(id(node))
        if entry is None:
            entry = self._waits[id(node)] = [node, []]
            # removed at stop(): a leaf's AccumulateGrad node outlives the graph
            self._handles.append(node.register_prehook(self._node_hook(id(node))))
        if call not in entry[1]:
            entry[1].append(call)

    def _node_hook(self, key: int):
        def hook(_grad_outputs):
            entry = self._waits.pop(key, None)      # the hook itself stays registered (no removal while it runs)
            if entry is None or not self.col.module_active:
                return None
            node, calls = entry
            with self.col.shielded("module backward"):
                # a call none of whose outputs got a gradient took no part in this backward (e.g. a checkpoint
                # recomputation, whose graph only supplies saved tensors)
                calls = sorted((c for c in calls if self._live(c) and c.arrived), key=lambda c: c.order, reverse=True)
                if type(node).__name__ == "AccumulateGrad":
                    # a leaf input: its node runs at once, like the parameters' ones, before where the entry belongs
                    self._ready.extend((self._next_batch(None), None, c) for c in calls if c.in_edges)
                    return None
                self.flush()
                for call in calls:
                    if call.in_edges:
                        self._write(call)
                    elif not call.placed:
                        self._place(call)
                        if self._outputs_complete(call):
                            self._write(call)
            return None
        return hook

    def _next_batch(self, node_key) -> int:
        last = self._ready[-1] if self._ready else None
        if last is None:
            return 0
        return last[0] if node_key is not None and last[1] == node_key else last[0] + 1

    def _place(self, call: _Call) -> None:
        """Reserve the entry's position in dump.json; its data is written once every output's gradient came."""
        call.placed = True
        call.slot = self.col.writer.reserve(call.name, call.body)

    def _write(self, call: _Call) -> None:
        col = self.col
        call.written = True
        grad_in = list(call.grad_in)
        if call.found:          # the shared outputs: only what came from outside, None where nothing did
            for position in call.shared:
                for j in call.out_slots[position]:
                    call.grad_out[j] = call.outside.get(position)
            for position, extra in call.moved.items():      # plus, for a view, what came through in-place ops
                for j in call.out_slots[position]:
                    call.grad_out[j] = extra if call.grad_out[j] is None else call.grad_out[j] + extra
        for j, input_slots in call.passthrough:
            for slot in input_slots:
                if not call.found:          # the module returned this input: its gradient is the tensor's total
                    grad_in[slot] = call.grad_out[j]
                elif call.grad_out[j] is not None:   # what the call's inner uses gave plus what its return got
                    grad_in[slot] = call.grad_out[j] if grad_in[slot] is None else grad_in[slot] + call.grad_out[j]
        call.seen = call.inner = {}
        name = call.name
        col.writer.add_construct(name, call.parent)
        body = call.body
        col.record_backward(name, body, call.grad_out, grad_in)
        if call.slot is not None:
            col.writer.complete(call.slot)
        else:
            col.add_entry(name, body)

    # ------------------------------------------------------------------ parameter gradients
    def _param_grad_hook(self, key: str, pname: str, names: list):
        col = self.col

        def hook(grad):
            if not col.module_active or not col.module_counts.get(key):
                return None         # like the reference: only modules called in this step (not MHA's out_proj)
            with col.shielded(f"{key} parameter gradients"):
                pending = self._pending_grads.setdefault(key, {})
                pending[pname] = grad
                if len(pending) < len(names):
                    return None
                del self._pending_grads[key]
                index = col.count(col.param_grad_counts, key)
                name = f"{key}.parameters_grad.{index}"
                if not (col.selected(name) and col.direction_ok("backward")):
                    return None
                # arrival order; a failure stays inside the one parameter's record (its body holds only parameters)
                col.add_entry(name, {n: [col.record_leaf(g, f"{name}.{n}")] for n, g in pending.items()})
            return None
        return hook
