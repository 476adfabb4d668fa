"""@ms.jit functions and Cells while the collector runs (PyNative mode).

A jit function runs as one compiled graph. Its compiler parses the Python source of everything the function
calls, so it must never see the collector's wrappers: while a graph compiles the original APIs are put back, the original classes of the hooked primitives, and the cells without the collector's hooks:
`mindspore.graph.api._JitExecutor.compile` is wrapped for the time the collector runs). Nothing inside the graph
is recorded; at levels L1 and mix each call of the graph is one entry `Jit.<function name>.<n>.forward` (a jit
Cell: `Jit.<Class>.<n>.forward`) with its inputs and outputs, and `...backward` with the gradients of its
outputs (`input`) and of its tensor arguments that are not Parameters (`output`), from hooks applied outside the
graph: the compiled graph is the same with and without the collector.
"""

from __future__ import annotations

from mindspore import Parameter, Tensor


def _executor_class():
    try:
        from mindspore.graph import api as graph_api
    except ImportError:       # MindSpore before 2.9
        from mindspore.common import api as graph_api
    return getattr(graph_api, "_JitExecutor", None)


class JitHooks:
    def __init__(self, collector):
        self.col = collector
        self.patched: list = []
        self.counts: dict = {}
        self.compiling = 0

    def reset(self) -> None:
        self.counts = {}

    def install(self) -> None:
        executor = _executor_class()
        if executor is None or self.patched:
            if executor is None:
                self.col.errors.once(("jit", "missing"), "this MindSpore has no _JitExecutor: an @ms.jit "
                                     "function compiled while recording would see the collector's wrappers")
            return
        original_compile = executor.compile
        original_call = executor.__call__
        hooks = self

        def compile(executor_self, *args, **kwargs):  # noqa: A001 - the patched method's name
            hooks.compiling += 1
            if hooks.compiling == 1:
                hooks.col.suspend()
            try:
                return original_compile(executor_self, *args, **kwargs)
            finally:
                hooks.compiling -= 1
                if hooks.compiling == 0:
                    hooks.col.resume()

        def call(executor_self, *args, **kwargs):
            col = hooks.col
            obj = getattr(executor_self, "obj", None)
            if not col.api_active or col.depth or hooks.compiling or \
                    (col.cells is not None and id(obj) in col.cells.jit_ids and col.cells_active):
                # a jit cell of the model at mix is recorded as a cell (cells.py), the cells inside it by taps
                return original_call(executor_self, *args, **kwargs)
            return hooks.run(executor_self, original_call, args, kwargs)
        self.patched = [(executor, "compile", original_compile), (executor, "__call__", original_call)]
        executor.compile = compile
        executor.__call__ = call

    def uninstall(self) -> None:
        for owner, attr, original in self.patched:
            setattr(owner, attr, original)
        self.patched = []

    def run(self, executor, original_call, args, kwargs):
        fn = getattr(executor, "fn", None)
        label = getattr(fn, "__name__", None) or "JitFunction"
        shown = args
        obj = getattr(executor, "obj", None)
        if obj is not None and args and args[0] is obj:
            label = type(obj).__name__
            shown = args[1:]
        return self.col.record_call(f"Jit.{label}", self.counts, lambda *a, **k: original_call(executor, *a, **k),
                                    args, kwargs, self._binding, shown=shown)

    def _binding(self, name: str, args, seq: int):
        """Hooks on the graph's tensor arguments that are not Parameters (a Parameter stays the graph's own
        input) and on its outputs."""
        hookable = [i for i, v in enumerate(args) if isinstance(v, Tensor) and not isinstance(v, Parameter)]
        return _SomeArguments(self.col.api_binding(name, [args[i] for i in hookable], seq), hookable)


class _SomeArguments:
    """A binding applied to some of the call's arguments only."""

    def __init__(self, binding, positions: list):
        self.binding = binding
        self.positions = positions

    def inputs(self, args: tuple) -> tuple:
        if self.binding.kernel is None:
            return args
        hooked = self.binding.inputs(tuple(args[i] for i in self.positions))
        args = list(args)
        for i, value in zip(self.positions, hooked):
            args[i] = value
        return tuple(args)

    def outputs(self, out):
        return self.binding.outputs(out)
