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
from mindspore.common.api import _pynative_executor

from msprobe.mindspore.collector import BackwardBinding, differentiable


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
                self.col.log_once(("jit", "missing"), "msprobe dump: this MindSpore has no _JitExecutor; @ms.jit "
                                  "functions are run without the collector's wrappers being removed")
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
            if not col.api_active or col.depth or hooks.compiling:
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
        col = self.col
        fn = getattr(executor, "fn", None)
        label = getattr(fn, "__name__", None) or "JitFunction"
        values = args
        obj = getattr(executor, "obj", None)
        if obj is not None and args and args[0] is obj:
            label = type(obj).__name__
            values = args[1:]
        key = f"Jit.{label}"
        index = self.counts[key] = self.counts.get(key, -1) + 1
        forward = f"{key}.{index}.forward"
        if col.config.level == "mix":
            col.writer.construct[forward] = col.cells.current_parent() if col.cells is not None else None
        dump = col.selected(f"{key}.{index}")
        body: dict = {}
        col.enter()
        try:
            if dump and col.direction_ok("forward"):
                col.record_inputs(forward, body, values, kwargs)
                col.add_entry(forward, body, col.stack(forward, body))
            binding = None
            hookable = [i for i, v in enumerate(args) if isinstance(v, Tensor) and not isinstance(v, Parameter)]
            if dump and col.direction_ok("backward") and _pynative_executor.requires_grad():
                name = f"{key}.{index}.backward"
                binding = col.guard(forward, body, "backward hook", lambda: self._binding(
                    name, differentiable([args[i] for i in hookable])))
                if binding is not None and binding.kernel is not None:
                    hooked = binding.inputs(tuple(args[i] for i in hookable))
                    args = list(args)
                    for i, value in zip(hookable, hooked):
                        args[i] = value
                    args = tuple(args)
            out = original_call(executor, *args, **kwargs)
            if binding is not None:
                out = binding.outputs(out)
            if dump and col.direction_ok("forward"):
                col.record_outputs(forward, body, out)
            return out
        finally:
            col.leave()

    def _binding(self, name: str, with_inputs: bool) -> BackwardBinding:
        col = self.col

        def write(grad_outputs, grad_inputs):
            if col.config.level == "mix":
                col.writer.construct[name] = col.cells.backward_parent() if col.cells is not None else None
            body: dict = {}
            col.record_backward(name, body, grad_outputs, grad_inputs)
            col.add_entry(name, body)
        return BackwardBinding(col, name, col.backward_callback(name, None, write), with_inputs)
