"""Primitive instances held as attributes of the model's cells (levels L1 and mix, when a model is given):
`Primitive.<attribute>.<Class>.<n>.forward/backward`, `n` counting the calls of that attribute name and class
in the step.

While the collector runs, each such primitive's class is swapped for a subclass whose `__call__` records the
call; stop() (and every graph compilation) puts the original class back. The backward entry is filled by one
`HookBackward` per tensor argument and per tensor output: each gradient that arrives is appended to the entry's
`output` (arguments) or `input` (outputs) in the order autograd delivers them, as the reference records them.
The entry takes its place in dump.json at its first gradient and is complete once the gradients of its arguments
came (another call's gradient arrives, or every floating-point argument got its own).
"""

from __future__ import annotations

from mindspore import Tensor, ops
from mindspore.ops.primitive import Primitive

from msprobe.collect.guard import one_line
from msprobe.mindspore.apis import is_float_dtype
from msprobe.mindspore.cells import walk_cells
from msprobe.mindspore.collector import Waiting


class PrimitiveHooks:
    def __init__(self, collector):
        self.col = collector
        self.swapped: list = []      # (primitive, original class, recording subclass)
        self.counts: dict = {}

    def reset(self) -> None:
        self.counts = {}

    def install(self, models) -> None:
        seen = set()
        for model in models:
            for _, cell, jit in walk_cells(model):
                if jit:
                    continue
                for attribute, value in list(vars(cell).items()):
                    if isinstance(value, Primitive) and id(value) not in seen:
                        seen.add(id(value))
                        self._swap(value, f"{attribute}.{type(value).__name__}")

    def suspend(self) -> None:
        for primitive, original, _ in reversed(self.swapped):
            primitive.__class__ = original

    def resume(self) -> None:
        for primitive, _, subclass in self.swapped:
            primitive.__class__ = subclass

    def uninstall(self) -> None:
        self.suspend()
        self.swapped = []

    def _swap(self, primitive, combined: str) -> None:
        original = type(primitive)
        call = original.__call__
        hooks = self

        def __call__(prim, *args, **kwargs):  # noqa: N807 - the swapped class's call
            col = hooks.col
            if not col.api_active or col.depth:
                return call(prim, *args, **kwargs)
            return hooks.run(combined, call, prim, args, kwargs)
        subclass = type(original.__name__, (original,), {"__call__": __call__, "__module__": original.__module__})
        primitive.__class__ = subclass
        self.swapped.append((primitive, original, subclass))

    def run(self, combined: str, call, prim, args, kwargs):
        col = self.col
        index = self.counts[combined] = self.counts.get(combined, -1) + 1
        col.next_seq()
        name = f"Primitive.{combined}.{index}"
        forward = f"{name}.forward"
        if col.config.level == "mix":
            col.writer.add_construct(forward, col.parent())
        dump = col.selected(name)
        forward_ok = dump and col.direction_ok("forward")
        body: dict = {}
        stack = None
        col.enter()
        try:
            if forward_ok:
                col.record_inputs(forward, body, args, kwargs)
                stack = col.stack(forward, body)
            grads = None
            if dump and col.grads_wanted():
                grads = col.guard(forward, body, "backward hook", lambda: _Gradients(col, f"{name}.backward", args))
                hooked = None if grads is None else \
                    col.guard(forward, body, "backward hook", lambda: grads.hook_all(tuple(args), "output"))
                if hooked is None:
                    grads = None
                else:
                    args = hooked
            try:
                out = call(prim, *args, **kwargs)
            except BaseException as exc:
                if forward_ok:
                    body["dump_error"] = f"the call raised {one_line(exc)}"
                    col.writer.add(forward, body, stack)
                raise
            if forward_ok:
                col.record_outputs(forward, body, out)
                col.writer.add(forward, body, stack)
            if grads is not None:
                try:
                    out = grads.hook_all(out, "input")
                except Exception as exc:  # noqa: BLE001 - the user's training must go on
                    col.errors.failed("backward hook", forward, exc)
            return out
        finally:
            col.leave()


class _Gradients(Waiting):
    """The backward entry of one primitive call, filled gradient by gradient."""

    def __init__(self, col, name: str, args):
        super().__init__(col, name)
        self.records = {"input": [], "output": []}
        self.expected = sum(1 for a in args if isinstance(a, Tensor) and is_float_dtype(a.dtype))

    def hook(self, tensor, section: str):
        write = self.collector.backward_callback(self.name, lambda grads: self._add(section, grads))
        return ops.HookBackward(write)(tensor)

    def hook_all(self, values, section: str):
        """`values` (a tensor or a tuple) with a hook on each tensor."""
        if isinstance(values, Tensor):
            return self.hook(values, section)
        if isinstance(values, tuple):
            return tuple(self.hook(v, section) if isinstance(v, Tensor) else v for v in values)
        return values

    def _add(self, section: str, grads) -> None:
        col = self.collector
        col.settle_waiting(self.seq)
        if self.slot is None:
            if self.arguments_seen:       # settled already: a late gradient of an argument
                return
            self.slot = col.writer.reserve(self.name, self.body)
            col.waiting.append(self)
        self.parent = col.cells.backward_parent() if col.cells is not None else None
        if section == "output":
            self.arguments_seen += len(grads)
        if col.section_ok(section):
            records = self.records[section]

            def work():
                for grad in grads:
                    records.append(col.recorder.record(grad, f"{self.name}.{section}.{len(records)}"))
            col.guard(self.name, self.body, section, work)
            self.body[section] = records
        if self.expected and self.arguments_seen >= self.expected:
            self.settle()
