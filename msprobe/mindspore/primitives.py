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

A primitive made while recording, outside any recorded call (`ops.LSTM(...)(x, ...)` inside nn.LSTM's
construct, `ops.Transpose()(x, perm)` in the user's code), is held by no cell when the collector starts, so no
class of it was swapped: while the collector runs (L1, mix), `Primitive.__init__` (which every primitive's
constructor calls) gives each primitive made at depth 0 its class's recording subclass, recorded as
`Primitive.<Class>.<Class>.<n>.forward/backward` (no attribute names it: its class takes the attribute's place;
`n` counts the calls of that class's primitives made so, in the step). Primitives made inside a recorded call (an
API's own) are left alone, as the calls inside it. Such a primitive, kept and called again in a later step (a
cache), is swapped again at the next start(). The reference records no entry for these calls.
"""

from __future__ import annotations

import weakref

from mindspore import Tensor, ops
from mindspore.ops.primitive import Primitive

from msprobe.collect.guard import one_line
from msprobe.mindspore.apis import is_float_dtype
from msprobe.mindspore.cells import walk_cells
from msprobe.mindspore.collector import Waiting

_RECORDS = "_msprobe_records"      # in the dict of a recording subclass: the name it records its calls under


class PrimitiveHooks:
    def __init__(self, collector):
        self.col = collector
        self.swapped: list = []      # (primitive, original class, recording subclass)
        self.held: list = []         # (cell, attribute, API function, its wrapper)
        self.counts: dict = {}
        self.made = weakref.WeakValueDictionary()   # id -> a primitive made while recording, of a class in:
        self.made_classes: dict = {}                 # original class -> its recording subclass (made ones)
        self.init = None                             # Primitive.__init__ while ours (self.hook) is in place
        self.hook = None

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
        if self.init is not None:
            if Primitive.__dict__["__init__"] is self.hook:   # else other code replaced it: left to that code
                Primitive.__init__ = self.init
            self.init = self.hook = None
        for primitive, original, _ in reversed(self.swapped):
            primitive.__class__ = original
        for primitive in list(self.made.values()):
            if _RECORDS in vars(type(primitive)):
                primitive.__class__ = type(primitive).__bases__[0]
        for cell, attribute, function, _ in reversed(self.held):
            vars(cell)[attribute] = function

    def resume(self) -> None:
        for primitive in list(self.made.values()):
            if type(primitive) in self.made_classes:
                primitive.__class__ = self.made_classes[type(primitive)]
        for primitive, _, subclass in self.swapped:
            primitive.__class__ = subclass
        for cell, attribute, _, wrapper in self.held:
            vars(cell)[attribute] = wrapper
        if self.init is None and self.col.api_active:        # L1 and mix only (not after a graph compiles at L0)
            self.init = Primitive.__dict__["__init__"]
            Primitive.__init__ = self.hook = self._made_hook(self.init)

    def _made_hook(self, init):
        """Primitive.__init__ while the collector runs: a primitive made at depth 0 while recording gets its
        class's recording subclass (never raising: the primitive is then left as made)."""
        hooks = self

        def __init__(prim, *args, **kwargs):  # noqa: N807 - Primitive's constructor
            init(prim, *args, **kwargs)
            col = hooks.col
            if col.api_active and not col.depth and type(prim) is not Primitive:
                col.enter()
                try:
                    hooks._adopt(prim)
                except Exception as exc:  # noqa: BLE001 - never into training
                    col.errors.once((type(exc).__name__, "made primitive"), "a primitive made while recording "
                                    "is not recorded (%s)", one_line(exc))
                finally:
                    col.leave()
        return __init__

    def _adopt(self, prim) -> None:
        original = type(prim)
        if _RECORDS in vars(original):
            return              # swapped already (Primitive.__init__ called twice)
        subclass = self.made_classes.get(original)
        if subclass is None:
            subclass = self.made_classes[original] = self._subclass(original, f"{original.__name__}.{original.__name__}")
        prim.__class__ = subclass
        self.made[id(prim)] = prim

    def uninstall(self) -> None:
        self.suspend()
        self.swapped = []
        self.held = []

    def _swap(self, primitive, combined: str) -> None:
        original = type(primitive)
        subclass = self._subclass(original, combined)
        primitive.__class__ = subclass
        self.swapped.append((primitive, original, subclass))

    def _subclass(self, original, combined: str):
        """`original` with a `__call__` that records its calls as `Primitive.<combined>.<n>`."""
        call = original.__call__
        hooks = self

        def __call__(prim, *args, **kwargs):  # noqa: N807 - the swapped class's call
            col = hooks.col
            if not col.api_active or col.depth:
                return call(prim, *args, **kwargs)
            return hooks.run(combined, call, prim, args, kwargs)
        return type(original.__name__, (original,), {"__call__": __call__, "__module__": original.__module__,
                                                      _RECORDS: combined})

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
