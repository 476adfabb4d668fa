"""Module taps: observe module calls, forward and backward, without adding a node to the autograd graph or touching a
value, for the training monitor (and, in time, the L0 collector: see docs/architecture.md).

A tap on a module gives its subscriber, per call (an exception in the taps' own code goes to
`subscriber.tap_failed(exc)`, never to the user's training):
* `inputs(call)`: before the call, the call's input slots (positional arguments, then tensor keyword arguments);
* `outputs(call, out)`: after it, its output slots;
* in backward, `output_grad(call, position, grad)` as the gradient of each output tensor arrives (a tensor hook on
  the output: it sees the gradient of the value the module returned even when the tensor is modified in place
  later, e.g. BatchNorm -> ReLU(inplace=True)), and `input_grads(call, grads)` once, when the gradients of the call's
  inputs are complete: for each input slot, the sum of the contributions of this call only (post-hooks on the nodes
  the call created that consume the input, found by walking the graph from the outputs down to the nodes made
  before the call, by autograd sequence number), None where none came. `register_full_backward_hook` is not used:
  it wraps inputs and outputs in views that make in-place ops raise and change the order in which autograd sums an
  input's gradient contributions (training would not be bit-identical).

A forward run inside backward (a checkpoint's recomputation) gets backward taps (a reentrant checkpoint's backward
runs through them) but no `inputs`/`outputs`: the values were taken in the first forward. A call whose outputs never
get a gradient gets no `input_grads`; one left incomplete at flush() gets what arrived.
"""

from __future__ import annotations

import threading

import torch
from torch.autograd.graph import get_gradient_edge

from msprobe.collect.debugger import not_recording
from msprobe.monitor.slots import slots


def in_backward() -> bool:
    """Whether autograd's engine is running a backward in this thread (a checkpoint's recomputation)."""
    return torch._C._current_graph_task_id() != -1


def _is_tensor(value) -> bool:
    return isinstance(value, torch.Tensor)


def _key(edge) -> tuple:
    return id(edge.node), edge.output_nr


def call_nodes(out_edges, marker: int, end: int | None = None):
    """The autograd nodes a module call made, from the nodes of its outputs down to those made before the call
    (sequence number <= `marker`, the number at its start), depth first; with `end` (the number at its return),
    not the nodes made later (a leaf's AccumulateGrad). A node's next functions are looked at after it is yielded."""
    seen = set()
    todo = [e.node for e in out_edges]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        sequence = node._sequence_nr()
        if sequence <= marker or (end is not None and sequence > end):
            continue
        yield node
        todo.extend(nxt for nxt, _ in node.next_functions if nxt is not None)


class Call:
    """One call of a tapped module, from its forward to the end of its backward."""

    __slots__ = ("tap", "module", "in_slots", "out_slots", "marker", "in_edges", "edges", "grads", "consumers",
                 "left", "out_nodes", "arrived", "done", "data", "recompute")

    def __init__(self, tap, module, in_slots: list, recompute: bool):
        self.tap = tap                  # what the subscriber registered the module with (its name, chunk...)
        self.module = module
        self.in_slots = in_slots        # [(label, tensor or None)]
        self.out_slots: list = []
        self.marker = None              # autograd sequence number at the call's start (backward taps only)
        self.in_edges: dict = {}        # edge key -> input slot indexes (inputs that require grad)
        self.edges: list = []           # those edges: their nodes kept alive (a leaf's AccumulateGrad is made
        #                                 afresh when nothing holds it, under another id)
        self.grads: list = []           # per input slot: this call's gradient contributions, summed
        self.consumers: dict = {}       # id(node) -> node: the call's nodes consuming an input, not run yet
        self.left = 0
        self.out_nodes: dict = {}       # id(node) -> node of an output whose gradient has not come
        self.arrived = False
        self.done = False
        self.data = None                # the subscriber's (statistics of the output gradients, ...)
        self.recompute = recompute


class ModuleTaps:
    """Taps on modules for one subscriber, which provides inputs(call), outputs(call, out), output_grad(call,
    position, grad), input_grads(call, grads) and active() (False: the taps do nothing). `backward` taps are set
    per module at install(). Failures inside the subscriber are the subscriber's to catch."""

    def __init__(self, subscriber):
        self.sub = subscriber
        self._handles: list = []
        self._stack: dict = {}          # (id(module), thread) -> [Call]
        self._pending: dict = {}        # id(call) -> call: backward expected
        self._leaf = None

    def install(self, module, tap, forward: bool, backward: bool) -> None:
        sub = self.sub
        stack = self._stack

        def pre(mod, args, kwargs):
            if not sub.active() or torch.compiler.is_compiling():
                return None
            try:
                with not_recording():
                    before(mod, args, kwargs)
            except Exception as exc:  # noqa: BLE001 - the user's training must go on
                sub.tap_failed(exc)
            return None

        def before(mod, args, kwargs):
            recompute = in_backward()
            in_slots = slots(list(args), "input", _is_tensor, kwargs) if (forward or backward) else []
            call = Call(tap, mod, in_slots, recompute)
            if forward and not recompute:
                sub.inputs(call)
            if backward and torch.is_grad_enabled():
                self._before_backward(call)
            stack.setdefault((id(mod), threading.get_ident()), []).append(call)

        def post(mod, args, kwargs, out):
            calls = stack.get((id(mod), threading.get_ident()))
            if not calls:
                return None
            try:
                with not_recording():
                    after(calls.pop(), out)
            except Exception as exc:  # noqa: BLE001 - the user's training must go on
                sub.tap_failed(exc)
            return None

        def after(call, out):
            if out is None:
                return          # nothing returned, or the forward raised (always_call)
            out_values = list(out) if isinstance(out, (tuple, list)) else [out]
            call.out_slots = slots(out_values, "output", _is_tensor)
            if forward and not call.recompute:
                sub.outputs(call)
            if backward and call.marker is not None and torch.is_grad_enabled():
                self._after_backward(call)
            # keep the labels, not the tensors: a pending call must not hold activations (checkpointing frees them)
            call.in_slots = [(label, None) for label, _ in call.in_slots]
            call.out_slots = [(label, None) for label, _ in call.out_slots]

        self._handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        self._handles.append(module.register_forward_hook(post, with_kwargs=True, always_call=True))

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._stack = {}
        self._pending = {}

    # ------------------------------------------------------------------ backward
    def _marker(self) -> int:
        """The autograd sequence number of a node made now: the call's nodes get larger ones."""
        if self._leaf is None:
            self._leaf = torch.empty(0, requires_grad=True)
        return self._leaf.view(0).grad_fn._sequence_nr()

    def _before_backward(self, call: Call) -> None:
        call.marker = self._marker()
        for i, (_, tensor) in enumerate(call.in_slots):
            if tensor is not None and tensor.requires_grad:
                edge = get_gradient_edge(tensor)
                call.edges.append(edge)
                call.in_edges.setdefault(_key(edge), []).append(i)
        call.grads = [None] * len(call.in_slots)

    def _after_backward(self, call: Call) -> None:
        end = self._marker()
        outputs: dict = {}          # id(tensor) -> (tensor, positions)
        for position, (_, tensor) in enumerate(call.out_slots):
            if tensor is not None and tensor.requires_grad and tensor.grad_fn is not None:
                outputs.setdefault(id(tensor), (tensor, []))[1].append(position)
        if not outputs:
            return
        out_edges = []
        for tensor, positions in outputs.values():
            edge = get_gradient_edge(tensor)
            out_edges.append(edge)
            call.out_nodes[id(edge.node)] = edge.node
            passthrough = call.in_edges.get(_key(edge), ())      # the module returned an input as it is
            tensor.register_hook(self._output_hook(call, positions, passthrough, id(edge.node)))
        if call.in_edges:
            for node, pairs in self._consumers(out_edges, call.marker, end, call.in_edges):
                call.consumers[id(node)] = node
                node.register_hook(self._consumer_hook(call, pairs, id(node)))
        call.left = len(call.consumers)
        self._pending[id(call)] = call

    @staticmethod
    def _consumers(out_edges, marker: int, end: int, in_edges: dict) -> list:
        """(node, [(next-edge index, input slots)]) for every node made by the call that consumes an input."""
        found = []
        for node in call_nodes(out_edges, marker, end):
            pairs = [(index, in_edges[(id(nxt), nr)]) for index, (nxt, nr) in enumerate(node.next_functions)
                     if nxt is not None and (id(nxt), nr) in in_edges]
            if pairs:
                found.append((node, pairs))
        return found

    def _guarded(self, call: Call, work):
        """A backward hook running `work` for a call still expecting gradients; never raises, returns None (no
        gradient is changed)."""
        def hook(*args):
            if not call.done and self.sub.active():
                try:
                    with not_recording():
                        work(*args)
                except Exception as exc:  # noqa: BLE001 - the user's training must go on
                    self.sub.tap_failed(exc)
            return None
        return hook

    def _output_hook(self, call: Call, positions: list, passthrough, node_key: int):
        def arrived(grad):
            call.arrived = True
            call.out_nodes.pop(node_key, None)
            for position in positions:
                self.sub.output_grad(call, position, grad)
            for slot in passthrough:
                self._add(call, slot, grad)
            self._check(call)
        return self._guarded(call, arrived)

    def _consumer_hook(self, call: Call, pairs: list, node_key: int):
        def consumed(grad_inputs, _grad_outputs):
            for index, input_slots in pairs:
                grad = grad_inputs[index]
                if grad is not None:
                    for slot in input_slots:
                        self._add(call, slot, grad)
            call.consumers.pop(node_key, None)
            self._check(call)
        return self._guarded(call, consumed)

    @staticmethod
    def _add(call: Call, slot: int, grad) -> None:
        have = call.grads[slot]
        call.grads[slot] = grad if have is None else have + grad

    def _check(self, call: Call) -> None:
        """Complete once no consumer and no output of the call is still to run in this backward."""
        if not call.arrived:
            return
        for nodes in (call.consumers, call.out_nodes):
            if nodes and any(_will_run(node) for node in nodes.values()):
                return
        self._complete(call)

    def _complete(self, call: Call) -> None:
        call.done = True
        self._pending.pop(id(call), None)
        grads, call.grads = call.grads, []
        call.consumers = {}
        call.out_nodes = {}
        call.edges = []
        self.sub.input_grads(call, grads)

    def flush(self) -> None:
        """The end of a step: calls that got some gradient are completed with what came; the others (never part
        of a backward, e.g. a non-reentrant checkpoint's recomputation) are dropped."""
        pending, self._pending = self._pending, {}
        for call in pending.values():
            if call.arrived and not call.done:
                self._complete(call)
            else:
                call.done = True
                call.edges = []
        self._stack = {}


def _will_run(node) -> bool:
    try:
        return bool(torch._C._will_engine_execute_node(node))
    except Exception:  # noqa: BLE001 - outside a backward: completed at flush()
        return True
