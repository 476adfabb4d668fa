"""Primitive instances held as attributes of the model's cells (levels L1 and mix, when a model is given):
`Primitive.<attribute>.<Class>.<n>.forward/backward`, `n` counting the calls of that attribute name and class
in the step.

While the collector runs, each such primitive's class is swapped for a subclass whose `__call__` records the
call; stop() puts the original class back. The backward entry is filled by one `HookBackward` per tensor
argument and per tensor output: each gradient that arrives is appended to the entry's `output` (arguments) or
`input` (outputs) in the order autograd delivers them, as the reference records them.
"""

from __future__ import annotations

from mindspore import Tensor, ops
from mindspore.common.api import _pynative_executor
from mindspore.ops.primitive import Primitive

from msprobe.mindspore.cells import walk_cells


class PrimitiveHooks:
    def __init__(self, collector):
        self.col = collector
        self.swapped: list = []      # (primitive, original class)
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
        name = f"Primitive.{combined}.{index}"
        forward = f"{name}.forward"
        if col.config.level == "mix":
            col.writer.construct[forward] = col.cells.current_parent() if col.cells is not None else None
        dump = col.selected(name)
        body: dict = {}
        col.enter()
        try:
            if dump and col.direction_ok("forward"):
                col.record_inputs(forward, body, args, kwargs)
                col.add_entry(forward, body, col.stack(forward, body))
            grads = None
            if dump and col.direction_ok("backward") and _pynative_executor.requires_grad():
                grads = col.guard(forward, body, "backward hook", lambda: _Grads(col, f"{name}.backward"))
                if grads is not None:
                    args = tuple(grads.hook(a, "output") if isinstance(a, Tensor) else a for a in args)
            out = call(prim, *args, **kwargs)
            if dump and col.direction_ok("forward"):
                col.record_outputs(forward, body, out)
            if grads is not None:
                if isinstance(out, Tensor):
                    out = grads.hook(out, "input")
                elif isinstance(out, tuple):
                    out = tuple(grads.hook(o, "input") if isinstance(o, Tensor) else o for o in out)
            return out
        finally:
            col.leave()


class _Grads:
    """The backward entry of one primitive call, filled gradient by gradient."""

    def __init__(self, col, name: str):
        self.col = col
        self.name = name
        self.body = None
        self.records = {"input": [], "output": []}

    def hook(self, tensor, section: str):
        col = self.col
        generation = col.generation

        def on_grad(grad):
            if generation != col.generation:
                return None
            col.enter()
            try:
                self._add(section, grad)
            except Exception as exc:  # noqa: BLE001 - the user's training must go on
                col.log_once((type(exc).__name__, "primitive grad"), "msprobe dump: a primitive gradient hook "
                             "failed for %s (%s: %s); training continues", self.name, type(exc).__name__, exc)
            finally:
                col.leave()
            return None
        return ops.HookBackward(on_grad)(tensor)

    def _add(self, section: str, grads) -> None:
        col = self.col
        if col.config.level == "mix":       # the parent when the latest gradient arrived, as the reference
            col.writer.construct[self.name] = col.cells.backward_parent() if col.cells is not None else None
        if self.body is None:
            self.body = {}
            col.writer.data[self.name] = self.body
        if not col.section_ok(section):
            return
        records = self.records[section]
        for grad in grads:
            records.append(col.recorder.record(grad, f"{self.name}.{section}.{len(records)}"))
        self.body[section] = records
