"""Primitive instances held as attributes of the model's cells (levels L1 and mix, when a model is given):
`Primitive.<attribute>.<Class>.<n>.forward/backward`, `n` counting the calls of that attribute name and class
in the step. An API function held as an attribute (`self.activation = ops.relu`, taken when the model was built,
before the collector wrapped the APIs) is replaced by its wrapper while recording: its calls are recorded under
the API's own name (`Functional.relu`), as any other call of it.

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

from msprobe.mindspore.apis import is_float_dtype
from msprobe.mindspore.cells import walk_cells
from msprobe.mindspore.collector import Waiting


class PrimitiveHooks:
    def __init__(self, collector):
        self.col = collector
        self.swapped: list = []      # (primitive, original class, recording subclass)
        self.held: list = []         # (cell, attribute, API function, its wrapper)
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
                    elif callable(value) and (wrapper := self.col.wrapper_of(value)) is not None:
                        self.held.append((cell, attribute, value, wrapper))
        self.resume()

    def suspend(self) -> None:
        for primitive, original, _ in reversed(self.swapped):
            primitive.__class__ = original
        for cell, attribute, function, _ in reversed(self.held):
            vars(cell)[attribute] = function

    def resume(self) -> None:
        for primitive, _, subclass in self.swapped:
            primitive.__class__ = subclass
        for cell, attribute, _, wrapper in self.held:
            vars(cell)[attribute] = wrapper

    def uninstall(self) -> None:
        self.suspend()
        self.swapped = []
        self.held = []

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
        return self.col.record_call(f"Primitive.{combined}", self.counts, lambda *a, **k: call(prim, *a, **k),
                                    args, kwargs, self._gradients)

    def _gradients(self, name: str, args, seq: int):
        return _Gradients(self.col, name, args, seq)


class _Gradients(Waiting):
    """The backward entry of one primitive call, filled gradient by gradient: a HookBackward on each tensor
    argument (`inputs`) and on each tensor output (`outputs`)."""

    def __init__(self, col, name: str, args, seq: int):
        super().__init__(col, name, seq)
        self.records = {"input": [], "output": []}
        self.expected = sum(1 for a in args if isinstance(a, Tensor) and is_float_dtype(a.dtype))

    def _hook(self, tensor, section: str):
        write = self.collector.backward_callback(self.name, lambda grads: self._add(section, grads))
        return ops.HookBackward(write)(tensor)

    def inputs(self, args: tuple) -> tuple:
        return tuple(self._hook(a, "output") if isinstance(a, Tensor) else a for a in args)

    def outputs(self, out):
        if isinstance(out, Tensor):
            return self._hook(out, "input")
        if isinstance(out, tuple):
            return tuple(self._hook(o, "input") if isinstance(o, Tensor) else o for o in out)
        return out

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
