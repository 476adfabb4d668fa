"""Cells and API calls compiled as graphs (GRAPH_MODE at levels L0, mix and L1, and the @ms.jit Cells of a PyNative
model at L0 and mix): host callbacks compiled into the graph hand the tensors to the step writer.

MindSpore's compiler parses each cell's `construct`, so no Python hook runs inside a graph. Before the network is
first called, every sub-cell of the model gets a subclass of its own class (same name) whose construct taps the
cell's tensors and calls the class's own construct; at mix and L1 the functions of `ops`, `mint` and
`mint.nn.functional` are replaced by tapped wrappers while a graph compiles:

* every tensor argument and output goes through `_depend(x, tap(_stop_gradient(x), code))`, where `tap` is a
  `Custom(func_type="pyfunc")` op whose Python function receives the values on the host: the depend keeps the
  tap in the graph, the stop_gradient keeps it out of the backward pass, and the network goes on with the tensor
  it had, so training is bit-identical with and without the taps;
* every floating-point argument and output of a cell also goes through `ops.InsertGradientOf(fn)`, whose fn taps
  the gradient and returns it unchanged: the outputs' gradients make the backward entry's `input`, the arguments'
  its `output` (API calls get no gradient taps: making one costs 1.6 ms).

A tap's code names the cell or API (the callee) and the call: the call's first forward tap opens it and gets a
token back, which its later taps carry, so a cell called twice gives `...forward.0` and `...forward.1` as in
PyNative; gradients are counted as they arrive, in the reverse order of the calls. Entries are written at stop()
in PyNative's order. Taps, host ops and callee table live with the graphs; idle, a tap returns at once.

Not seen: non-tensor and keyword arguments (graph constants), parameters and their gradients, the root cell given
to the debugger (as in PyNative), cells with a custom `bprop` (no tap reaches it), and at mix/L1 the Primitives
held by cells, Tensor methods and functions imported by name before start(). `pyfunc` ops run on CPU only: on GPU
and Ascend GRAPH_MODE L0/mix/L1 is one error at start() naming the routes that work there (L2, PyNative).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

import numpy as np
from mindspore import Tensor, ops
from mindspore.common import dtype as mstype

from msprobe.collect import filters
from msprobe.collect.guard import one_line
from msprobe.mindspore.records import dtype_name

SLOT_CODES = 1 << 12      # a tap's code: call token (or callee) * SLOT_CODES + slot
CELL_SLOTS = (8, 4)       # gradient taps of a cell's first 8 tensor arguments (at most its parameters) and 4 outputs
API_SLOTS = (0, 0)        # and none of an API call: an InsertGradientOf costs 1.6 ms to make, 900 APIs 6 s
FLOAT_TYPES = (mstype.float16, mstype.float32, mstype.float64, mstype.bfloat16)
_TAPPED = "_msprobe_graph_tapped"
TAP_ATTRS = ("_msprobe_id", "_msprobe_fin", "_msprobe_fout", "_msprobe_gin", "_msprobe_gout")
# (direction, section of the entry) of each kind of tap
KINDS = {"fin": ("forward", "input_args"), "fout": ("forward", "output"),
         "bin": ("backward", "input"), "bout": ("backward", "output")}
_CLASSES: dict = {}       # (original class, jit) -> its tapped subclass
# the taps' own ops, bound here: at mix/L1 the names in mindspore.ops are the API wrappers while a graph compiles
_depend = ops.depend
_stop_gradient = ops.stop_gradient
_scalar_to_tensor = ops.scalar_to_tensor
API_PREFIXES = ("Mint", "MintFunctional", "Functional")   # the functions a graph's parser resolves by name


def _float(x) -> bool:
    return x.dtype in FLOAT_TYPES


def _tap_sequence(tap, grads, base, values):
    """(the code base of the call's later taps, the values tapped). Every tensor goes through the forward tap: the
    call's first tap carries the callee in a negative base and gets the new call's token back, which the later taps
    carry; each floating-point one of the first len(grads) also goes through its gradient tap. Parsed by the graph
    compiler."""
    tapped = ()
    for i in range(len(values)):
        x = values[i]
        if isinstance(x, Tensor):
            token = tap(_stop_gradient(x), base + i)
            base = token * SLOT_CODES
            x = _depend(x, token)
            if i < len(grads) and _float(x):
                x = grads[i](x)
        tapped = tapped + (x,)
    return base, tapped


def _tap_inputs(callee, fin, gin, args):
    """(the code base of the call's output taps, the arguments tapped)."""
    return _tap_sequence(fin, gin, _scalar_to_tensor(-(callee + 1) * SLOT_CODES, mstype.int64), args)


def _tap_outputs(fout, gout, base, out):
    """The outputs tapped: a tensor, or the tensors of a tuple."""
    if isinstance(out, Tensor):
        return _tap_sequence(fout, gout, base, (out,))[1][0]
    if isinstance(out, tuple):
        return _tap_sequence(fout, gout, base, out)[1]
    return out


def _tapped_class(cls, jit: bool):
    """The subclass of `cls` whose construct taps the arguments and outputs (one per class, shared by its cells)."""
    key = (cls, jit)
    found = _CLASSES.get(key)
    if found is not None:
        return found
    original = cls.construct

    def construct(self, *args, **kwargs):
        base, tapped = _tap_inputs(self._msprobe_id, self._msprobe_fin, self._msprobe_gin, args)
        return _tap_outputs(self._msprobe_fout, self._msprobe_gout, base, original(self, *tapped, **kwargs))

    if jit:
        import mindspore as ms

        construct = ms.jit(construct)
    found = _CLASSES[key] = type(cls.__name__, (cls,), {"construct": construct, "__module__": cls.__module__,
                                                         "__qualname__": cls.__qualname__, _TAPPED: cls})
    return found


def _api_wrapper(original, callee: int, fin, fout, gin, gout):
    """An API function whose calls inside a graph are tapped (parsed by the graph compiler in place of the API)."""
    def wrapper(*args, **kwargs):
        base, tapped = _tap_inputs(callee, fin, gin, args)
        return _tap_outputs(fout, gout, base, original(*tapped, **kwargs))
    wrapper.__name__ = getattr(original, "__name__", "api")
    wrapper.__msprobe_original__ = original
    return wrapper


def _grad_tap(tap, code: int):
    """The function of an InsertGradientOf: taps the gradient, returns it unchanged."""
    code = Tensor(code, mstype.int64)

    def tap_gradient(grad):
        return _depend(grad, tap(_stop_gradient(grad), code))
    return tap_gradient


def _positional_count(cell) -> int:
    """How many positional arguments the cell's construct takes (its gradient taps), at most CELL_SLOTS[0]."""
    import inspect

    try:
        parameters = list(inspect.signature(type(cell).construct).parameters.values())[1:]
    except (TypeError, ValueError):
        return CELL_SLOTS[0]
    if any(p.kind is p.VAR_POSITIONAL for p in parameters):
        return CELL_SLOTS[0]
    return min(CELL_SLOTS[0], sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters))


def _idle(kind: str, code: int) -> int:
    """What a tap returns when nothing records: a gradient tap its code, a forward tap a call token."""
    return code if KINDS[kind][0] == "backward" else max(code // SLOT_CODES, 0)


class _Registry:
    """What compiled graphs hold on to for the life of the process: the four host ops, the callee table (callee
    number -> entry prefix, prefix of the cell holding it) and the API wrappers. The host ops hand each value to the
    GraphCells recording now (`sink`), so that a debugger made again (a notebook cell run twice) records through the
    taps an earlier one compiled into the graph."""

    def __init__(self):
        self.ops: dict = {}
        self.callees: list = []
        self.made: dict = {}            # (prefix, attribute) -> API wrapper
        self.sink = None

    def host_ops(self) -> dict:
        if not self.ops:
            for kind in KINDS:
                self.ops[kind] = ops.Custom(self._host(kind), out_shape=lambda _values, code: code,
                                            out_dtype=lambda _values, code: code, func_type="pyfunc")
        return self.ops

    def _host(self, kind: str):
        def host(values, code):
            sink = self.sink
            code = int(code)
            token = _idle(kind, code) if sink is None else sink.arrive(kind, code, values)
            return np.asarray(token, dtype=np.int64)
        return host


_REGISTRY = _Registry()


class GraphCells:
    """The taps of one debugger's cells and APIs and what they saw in the current step. `writer` is the StepWriter
    the entries go to and `recorder` turns values into records (both set by the debugger before a step records).

    Four host ops serve every tap: forward input, forward output, gradient of an output (backward input), gradient
    of an argument (backward output). A tap's code says whose value it is: the first forward tap of a call carries
    its callee (a cell or an API, by number) and gets the call's token back, which the call's later forward taps
    carry; a gradient tap carries its callee and slot."""

    def __init__(self, config, errors):
        self.config = config
        self.errors = errors
        self.writer = None
        self.recorder = None
        self.skipped: list = []         # paths of cells left untapped, and why
        self.callees = _REGISTRY.callees
        self.patched: list = []         # (owner, attribute, original, wrapper) of the API wrappers in place
        self._lock = threading.Lock()
        self.arrived = 0                # values seen while recording, over all steps
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.tokens: list = []      # call token -> (callee, index), for this step
            self.calls: dict = {}       # callee -> forward calls opened in this step
            self.counts: dict = {}      # (callee, kind, slot) -> backward values seen
            self.latest: dict = {}      # (prefix, direction) -> index of its latest call
            self.open: list = []        # forward calls of cells whose outputs have not arrived (mix: API parents)
            # (prefix, direction, index) -> [sections, parent key, selected by scope/list]
            self.entries: OrderedDict = OrderedDict()

    @property
    def active(self) -> bool:
        """The taps report to this GraphCells (it records a step)."""
        return _REGISTRY.sink is self

    @active.setter
    def active(self, on: bool) -> None:
        if on:
            _REGISTRY.sink = self
        elif _REGISTRY.sink is self:
            _REGISTRY.sink = None

    # ------------------------------------------------------------------ install
    def _callee(self, prefix: str, parent_prefix, slots: tuple) -> tuple:
        """(number, gradient taps of the arguments, gradient taps of the outputs) of a new callee."""
        taps = _REGISTRY.host_ops()
        callee = len(self.callees)
        self.callees.append((prefix, parent_prefix))
        base = callee * SLOT_CODES
        return (callee, tuple(ops.InsertGradientOf(_grad_tap(taps["bout"], base + i)) for i in range(slots[0])),
                tuple(ops.InsertGradientOf(_grad_tap(taps["bin"], base + i)) for i in range(slots[1])))

    def install(self, models, indexed: bool = False, jit_only: bool = False) -> int:
        """Tap the sub-cells of the models (all of them, or with `jit_only` the @ms.jit cells and the cells inside
        them); the number of cells tapped. A cell tapped before (an earlier start(), an earlier debugger) keeps its
        taps, named as this model names it."""
        from msprobe.mindspore.cells import is_jit_cell

        count = 0
        for index, model in enumerate(models):
            lead = f"{index}." if indexed else ""
            for path, cell, parent in _walk(model, jit_only, is_jit_cell):
                if cell.has_bprop:
                    self.skipped.append(f"{lead}{path} (custom bprop)")
                    continue
                own = getattr(type(cell), _TAPPED, None) or type(cell)
                prefix = f"Cell.{lead}{path}.{own.__name__}."
                parent_class = getattr(type(parent[1]), _TAPPED, None) or type(parent[1]) if parent else None
                parent_prefix = f"Cell.{lead}{parent[0]}.{parent_class.__name__}." if parent else None
                if own is type(cell):
                    self._tap(cell, prefix, parent_prefix, jit_only and is_jit_cell(cell))
                else:
                    _REGISTRY.callees[cell.__dict__["_msprobe_id"]] = (prefix, parent_prefix)
                count += 1
        return count

    def _tap(self, cell, prefix: str, parent_prefix, jit: bool) -> None:
        original = type(cell)
        callee, gin, gout = self._callee(prefix, parent_prefix, (_positional_count(cell), CELL_SLOTS[1]))
        taps = _REGISTRY.ops
        for attr, value in zip(TAP_ATTRS, (callee, taps["fin"], taps["fout"], gin, gout)):
            object.__setattr__(cell, attr, value)
        cell.__class__ = _tapped_class(original, jit)

    def install_apis(self) -> None:
        """Put the tapped wrappers in place of the functions of mindspore.ops, mint and mint.nn.functional, until
        uninstall_apis (a graph compiled meanwhile keeps its taps)."""
        from msprobe.mindspore.apis import api_targets

        if self.patched:
            return
        for owner, attr, prefix in api_targets():
            original = owner.__dict__.get(attr) if prefix in API_PREFIXES else None
            if original is None or not callable(original):
                continue
            key = (prefix, attr)
            wrapper = _REGISTRY.made.get(key)
            if wrapper is None or wrapper.__msprobe_original__ is not original:
                callee, gin, gout = self._callee(f"{prefix}.{attr}.", None, API_SLOTS)
                wrapper = _REGISTRY.made[key] = _api_wrapper(original, callee, _REGISTRY.ops["fin"],
                                                             _REGISTRY.ops["fout"], gin, gout)
            setattr(owner, attr, wrapper)
            self.patched.append((owner, attr, original, wrapper))

    def uninstall_apis(self) -> None:
        for owner, attr, original, wrapper in reversed(self.patched):
            if owner.__dict__.get(attr) is wrapper:
                setattr(owner, attr, original)
        self.patched = []

    # ------------------------------------------------------------------ run time (host callbacks)
    def arrive(self, kind: str, code: int, values) -> int:
        """One value from a tap; returns the forward call's token (a gradient tap's code, unchanged). Never raises:
        the graph's run must go on."""
        direction, section = KINDS[kind]
        high, slot = divmod(code, SLOT_CODES)
        if not self.active:
            return _idle(kind, code)
        try:
            with self._lock:
                if direction == "backward":
                    callee, token = high, code
                    count = (callee, kind, slot)
                    index = self.counts.get(count, 0)
                    self.counts[count] = index + 1
                elif high < 0:                  # the first tensor of a new call
                    callee = -high - 1
                    index = self.calls.get(callee, 0)
                    self.calls[callee] = index + 1
                    token = len(self.tokens)
                    self.tokens.append((callee, index))
                    if self.callees[callee][0].startswith("Cell."):
                        self.open.append(token)
                elif high < len(self.tokens):
                    token = high
                    callee, index = self.tokens[token]
                else:                           # a call opened before this step's reset
                    return high
                if kind == "fout" and token in self.open:
                    self.open.remove(token)
                prefix, parent_prefix = self.callees[callee]
                latest = (prefix, direction)
                if self.latest.get(latest, -1) < index:
                    self.latest[latest] = index
                key = (prefix, direction, index)
                name = entry_name(prefix, direction, index)
                entry = self.entries.get(key)
                if entry is None:
                    entry = self.entries[key] = [{}, self._parent(prefix, parent_prefix, direction),
                                                 filters.selected(self.config, name, self._enclosing()),
                                                 token if direction == "forward" else None]
                else:
                    self.entries.move_to_end(key)
                self.arrived += 1
            config = self.config
            io = "input" if section in ("input_args", "input") else "output"
            if entry[2] and filters.direction_ok(config, direction) and filters.section_ok(config, io):
                array = np.asarray(values)
                record = self.recorder.array(array, dtype_name(array.dtype), f"{name}.{io}.{slot}")
                with self._lock:
                    entry[0].setdefault(section, {})[slot] = record
        except Exception as exc:  # noqa: BLE001 - the user's training must go on
            self.errors.once((type(exc).__name__, "graph tap"), "a graph-mode tap failed (%s); its value is "
                             "skipped and training continues", one_line(exc))
            return max(high, 0) if direction == "forward" else code
        return token

    def _enclosing(self) -> list:
        """The names of the cell calls open now (`list` at mix selects the APIs called inside a listed cell)."""
        names = []
        for token in self.open:
            callee, index = self.tokens[token]
            names.append(entry_name(self.callees[callee][0], "forward", index))
        return names

    def _parent(self, prefix: str, parent_prefix, direction: str):
        """The key of the call holding a new call: a cell's, the latest call of the cell holding it; an API's (mix),
        the innermost cell call still open (forward only)."""
        if prefix.startswith("Cell."):
            index = self.latest.get((parent_prefix, direction)) if parent_prefix else None
            return None if index is None else (parent_prefix, direction, index)
        if direction == "forward" and self.open:
            callee, index = self.tokens[self.open[-1]]
            return (self.callees[callee][0], "forward", index)
        return None

    # ------------------------------------------------------------------ end of step
    def flush(self) -> None:
        """Wait for the graph's work of the step, then hand the entries to the writer in the order PyNative writes
        them: the forward calls in the order they opened, each cell after the calls inside it, then the backward
        calls in the reverse order (the taps of independent ops run in any order the graph allows). A backward value
        is counted as it arrives, and gradients arrive in the reverse order of the calls: backward n is renamed to
        the backward of forward call n."""
        _synchronize()
        with self._lock:
            entries, self.entries = self.entries, OrderedDict()
            calls = {self.callees[callee][0]: count for callee, count in self.calls.items()}

        def renamed(key):
            prefix, direction, index = key
            if direction == "backward" and calls.get(prefix, 0) > index:
                index = calls[prefix] - 1 - index
            return prefix, direction, index

        final = {renamed(key): (sections, renamed(parent) if parent else None, selected, token)
                 for key, (sections, parent, selected, token) in entries.items()}
        opened = {key: found[3] for key, found in final.items() if key[1] == "forward"}
        children: dict = {}
        for key, found in final.items():
            children.setdefault(found[1] if found[1] in final else None, []).append(key)

        def rank(key):
            return opened.get((key[0], "forward", key[2]), -1)

        def post_order(keys, reverse):
            for key in sorted(keys, key=rank, reverse=reverse):
                yield from post_order(children.get(key, ()), reverse)
                yield key

        roots = children.get(None, [])
        sequence = [*post_order([k for k in roots if k[1] == "forward"], False),
                    *post_order([k for k in roots if k[1] == "backward"], True)]
        writer = self.writer
        config = self.config
        for key in sequence:
            sections, parent, selected, _token = final[key]
            direction = key[1]
            if not selected or not filters.direction_ok(config, direction):
                continue
            entry = entry_name(*key)
            if config.level != "L1":
                writer.add_construct(entry, entry_name(*parent) if parent else None)
            body: dict = {}
            for section in (("input_args", "output") if direction == "forward" else ("input", "output")):
                slots = sections.get(section)
                if filters.section_ok(config, "input" if section.startswith("input") else "output"):
                    body[section] = [] if not slots else [slots.get(i) for i in range(max(slots) + 1)]
                    if section == "input_args":
                        body["input_kwargs"] = {}
            writer.add(entry, body)


def entry_name(prefix: str, direction: str, index: int) -> str:
    """`Cell.<path>.<Class>.forward.<n>` for a cell, `<Prefix>.<api>.<n>.forward` for an API."""
    if prefix.startswith("Cell."):
        return f"{prefix}{direction}.{index}"
    return f"{prefix}{index}.{direction}"


def _walk(model, jit_only: bool, is_jit_cell):
    """(path, cell, (parent path, parent cell) or None) of the sub-cells to tap, depth first: all of them, or with
    `jit_only` the @ms.jit cells and every cell inside one."""
    seen = {id(model)}
    todo = [(name, child, None, False) for name, child in reversed(list(model._cells.items())) if child]
    while todo:
        path, cell, parent, inside_jit = todo.pop()
        if id(cell) in seen:
            continue
        seen.add(id(cell))
        jit = inside_jit or is_jit_cell(cell)
        if not jit_only or jit:
            yield path, cell, parent
        children = [(f"{path}.{name}", child, (path, cell), jit) for name, child in cell._cells.items() if child]
        todo.extend(reversed(children))


def _synchronize() -> None:
    """Wait until the graphs launched so far ran (their taps reported)."""
    try:
        from mindspore.common.api import _pynative_executor

        _pynative_executor.sync()
    except Exception:  # noqa: BLE001 - an older MindSpore: the step's outputs were read already
        pass


def graph_directory(dump_path: str, step: int, rank) -> str:
    """Where a graph-mode step writes: <dump_path>/step<N>/rank (rank<R> in a distributed job), as the reference."""
    return os.path.join(dump_path, f"step{step}", "rank" if rank is None else f"rank{rank}")


class GraphRoute:
    """The graph part of one PrecisionDebugger: in GRAPH_MODE every sub-cell of the model is tapped and the step
    is written to <dump_path>/step<N>/rank; in PyNative the @ms.jit cells of the model (and the cells inside them)
    are tapped at L0/mix and written to <dump_path>/graph/step<N>/rank, while the PyNative collector writes the
    rest to <dump_path>/pynative/step<N>/rank<R> (the layout `msprobe compare` pairs half by half)."""

    def __init__(self, debugger):
        self.debugger = debugger
        self.cells = GraphCells(debugger.config, debugger.errors)
        self.graph_mode = False         # the debugger records a GRAPH_MODE network
        self.split = False              # PyNative with jit cells: graph/ and pynative/ halves
        self.writer = None              # the graph half's StepWriter (split only)
        self.started = False
        self._arrived_at_start = 0

    # ------------------------------------------------------------------ start
    def check(self, models: list) -> bool:
        """At start(model): whether this start records a graph (GRAPH_MODE); raises MsprobeError for what the mode
        cannot do."""
        import mindspore as ms

        from msprobe.errors import MsprobeError

        level = self.debugger.config.level
        if ms.get_context("mode") == ms.PYNATIVE_MODE or level not in ("L0", "mix", "L1"):
            return False                # PyNative, or the kernel dump (L2), which is not this route's
        if level != "L1" and not models:
            raise MsprobeError(f"GRAPH_MODE level {level} taps the model's cells before it is compiled: pass the model "
                               "to PrecisionDebugger(model=...) or start(model)")
        problem = device_problem(ms.get_context("device_target"))
        if problem is not None:
            raise MsprobeError(problem)
        return True

    def prepare(self, model) -> None:
        """At every start(), before it asks whether the step is recorded: a GRAPH_MODE network (or an @ms.jit cell)
        compiles at its first call, recorded or not, so the first start() taps it (and at mix/L1 puts the API
        wrappers in place until step(): the graph compiles during this step)."""
        debugger = self.debugger
        level = debugger.config.level
        if self.started or level not in ("L0", "mix", "L1"):
            return
        models = debugger._models(model if model is not None else debugger.model)
        graph = self.check(models)
        if graph or level != "L1":          # PyNative: the @ms.jit cells compile at their first call too
            self._first(models, debugger.cells.indexed)
        if graph and level in ("mix", "L1"):
            self.cells.install_apis()

    def install(self, models: list, indexed: bool) -> bool:
        """Tap the cells (once); True when the step is the graph's alone (GRAPH_MODE)."""
        debugger = self.debugger
        level = debugger.config.level
        cells = self.cells
        self.graph_mode = self.check(models)
        if not self.started:
            self._first(models, indexed)
        if not (self.graph_mode or self.split):
            return False
        from msprobe.mindspore.records import Recorder

        writer = debugger.writer if self.graph_mode else self.writer
        if self.split:
            config = debugger.config
            writer.open(graph_directory(os.path.join(config.dump_path, "graph"), debugger.current_step, None))
        if self.graph_mode and level in ("mix", "L1"):
            cells.install_apis()
        cells.writer = writer
        save = writer.save_tensor if debugger.config.task == "tensor" else None
        cells.recorder = Recorder(debugger.config.summary_mode, save, debugger.errors.failed)
        self._arrived_at_start = cells.arrived
        cells.active = True
        return self.graph_mode

    def _first(self, models: list, indexed: bool) -> None:
        """The taps, once: every sub-cell in GRAPH_MODE (not at L1), the jit cells in PyNative at L0/mix."""
        import mindspore as ms

        debugger = self.debugger
        level = debugger.config.level
        cells = self.cells
        self.started = True
        self.graph_mode = ms.get_context("mode") != ms.PYNATIVE_MODE
        if self.graph_mode:
            compiled = [type(m).__name__ for m in models if getattr(m, "_compile_cache", None)]
            if compiled:
                debugger.errors.once("compiled", "%s ran as a graph before start(model): its compiled graph "
                                     "has no taps and its cells are not recorded; create the debugger and "
                                     "call start(model) before the first call of the network",
                                     ", ".join(compiled))
            if level != "L1":
                cells.install(models, indexed)
        elif level in ("L0", "mix") and device_problem(ms.get_context("device_target")) is None and \
                cells.install(models, indexed, jit_only=True):      # elsewhere a jit cell stays one Jit entry
            self.split = True
            from msprobe.collect.writer import StepWriter

            self.writer = StepWriter(debugger.framework, debugger.config.task, debugger.config.level,
                                     save=debugger._save, suffix=debugger.suffix, errors=debugger.errors)
        if cells.skipped:
            debugger.errors.once("skipped", "cells not recorded in the graph (their backward is a custom "
                                 "bprop): %s", ", ".join(cells.skipped[:5]))

    def directory(self, default: str) -> str:
        debugger = self.debugger
        if self.graph_mode:
            return graph_directory(debugger.config.dump_path, debugger.current_step, debugger._rank())
        if self.split:
            return os.path.join(debugger.config.dump_path, "pynative", os.path.relpath(default,
                                                                                     debugger.config.dump_path))
        return default

    # ------------------------------------------------------------------ stop
    def flush(self) -> None:
        if not (self.graph_mode or self.split) or not self.cells.active:
            return
        self.cells.flush()
        self.cells.active = False
        if self.split and self.writer is not None:
            self.writer.close(None)

    def empty_reason(self) -> str | None:
        """Why a GRAPH_MODE step recorded nothing (never a silent empty dump), or None."""
        if not self.graph_mode or not self.cells.active:
            return None
        _synchronize()
        if self.cells.arrived > self._arrived_at_start:
            return None
        reason = ("no tapped cell ran in this step: the network was compiled before start(model) (create the "
                  "debugger and call start(model) before its first call), or was not called between start() and "
                  "stop()")
        self.debugger.errors.once(("empty graph step",), "GRAPH_MODE: %s", reason)
        return reason

    def pause(self) -> None:
        self.cells.active = False
        self.cells.uninstall_apis()

    def reset(self) -> None:
        """A new step: the graph of the first one compiled, the API wrappers put in place for it go."""
        self.cells.reset()
        if not self.cells.active:
            self.cells.uninstall_apis()


def device_problem(device: str) -> str | None:
    """Why cells cannot be tapped in a graph on `device`, or None."""
    if device == "CPU":
        return None
    return (f"GRAPH_MODE level L0/mix taps cells with host callbacks (Custom pyfunc ops), which MindSpore runs on CPU "
            f"only, not on {device}: dump this network at level L2 (kernel dump), or in PyNative mode "
            "(mindspore.set_context(mode=mindspore.PYNATIVE_MODE))")
