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
from mindspore import Tensor, nn, ops
from mindspore.common import dtype as mstype

from msprobe.collect import filters
from msprobe.collect.guard import one_line
from msprobe.mindspore.records import dtype_name

SLOT_CODES = 1 << 12      # a tap's code: call token (or callee) * SLOT_CODES + slot
FLOAT_TYPES = (mstype.float16, mstype.float32, mstype.float64, mstype.bfloat16)
_TAPPED = "_msprobe_graph_tapped"
OUTPUT_SLOTS = SLOT_CODES // 2   # a gradient tap's slot: an argument's, or OUTPUT_SLOTS + an output's
TAP_ATTRS = ("_msprobe_id", "_msprobe_call", "_msprobe_fin", "_msprobe_fout", "_msprobe_gin", "_msprobe_gout",
             "_msprobe_by_token")
CELL_SLOTS = (8, 4)       # @ms.jit graphs of PyNative: InsertGradientOf taps of a cell's first 8 tensor arguments
                          # (at most its parameters) and 4 outputs (each costs 1.6 ms to make)
# (direction, section of the entry) of each kind of tap
KINDS = {"fin": ("forward", "input_args"), "fout": ("forward", "output"),
         "bin": ("backward", "input"), "bout": ("backward", "output")}
_CLASSES: dict = {}       # original class -> its tapped subclass
# the taps' own ops, bound here: at mix/L1 the names in mindspore.ops are the API wrappers while a graph compiles
_depend = ops.depend
_stop_gradient = ops.stop_gradient
_scalar_to_tensor = ops.scalar_to_tensor
_zeros_like = ops.zeros_like
_NOTHING = Tensor(0, mstype.int64)  # what the call tap is handed (it reads no value)
API_PREFIXES = ("Mint", "MintFunctional", "Functional")   # the functions a graph's parser resolves by name


def _float(x) -> bool:
    return x.dtype in FLOAT_TYPES


class GradientTap(nn.Cell):
    """The identity on a tensor whose backward hands the tensor's gradient and the code of the call and slot (a
    forward value, so each call's gradients name their call) to a host op, and passes the gradient on unchanged.
    GRAPH_MODE only: in an @ms.jit graph run from PyNative, MindSpore mixes up the forward values of the calls of
    one such cell made at two places of the graph (wrong gradients), so there each slot of a callee gets its own
    InsertGradientOf (`_grad_tap`), and the call is found from the jit cell's backward window."""

    def __init__(self, host):
        super().__init__(auto_prefix=False)
        self.host = host

    def construct(self, x, code):
        return x

    def bprop(self, x, code, out, dout):
        return _depend(dout, self.host(_stop_gradient(dout), code)), _zeros_like(code)


def _grad_tap(host, code: int):
    """An InsertGradientOf whose function hands the gradient to `host` with a fixed code (callee and slot) and
    returns it unchanged. Its side-effect attributes are dropped: with them, MindSpore fails to compile it in a
    branch of `if <tensor>` ("The parameters number of the function is 2, but ... 1"); the host op stays in the
    graph all the same, the gradient depends on it."""
    code = Tensor(code, mstype.int64)

    def tap_gradient(grad):
        return _depend(grad, host(_stop_gradient(grad), code))
    hook = ops.InsertGradientOf(tap_gradient)
    hook.add_prim_attr("side_effect_backprop", False)
    hook.add_prim_attr("side_effect_backprop_mem", False)
    return hook


def _tap_call(callee, call):
    """A new call of `callee`: the code base of its later taps (its token * SLOT_CODES). The call tap comes before
    the call, the value taps after it: the taps are side effects that the graph runs in program order, so a call's
    tap comes before those of the calls inside it. No tap is a node in a tensor's path, and no value is read before
    the call: with amp, a node that reads a tensor where the network's own graph did not changes the casts the CPU
    backend keeps, and the numbers. Parsed by the graph compiler."""
    return call(_NOTHING, _scalar_to_tensor(-(callee + 1) * SLOT_CODES, mstype.int64)) * SLOT_CODES


def _any_tensor(values) -> bool:
    """A tensor among `values` (known when the graph compiles)."""
    for x in values:
        if isinstance(x, Tensor):
            return True
    return False


def _tap_values(tap, base, values):
    """Hand every tensor among `values` to the host (slot i: code base + i)."""
    for i in range(len(values)):
        x = values[i]
        if isinstance(x, Tensor):
            tap(_stop_gradient(x), base + i)


def _tap_gradients(grads, by_token, base, values, side):
    """The values with their gradient taps: with `by_token` grads[0](x, code of the call's token and the slot)
    (`side`: 0 for the arguments, OUTPUT_SLOTS for the outputs), else grads[i](x) while there is one; none for a
    value that is no floating-point tensor. Without gradient taps the values are handed on as they came (a tuple
    made again is a node too, see _tap_call)."""
    if len(grads) == 0:
        return values
    tapped = ()
    for i in range(len(values)):
        x = values[i]
        if isinstance(x, Tensor):
            if _float(x):
                if by_token:
                    x = grads[0](x, base + side + i)
                elif i < len(grads):
                    x = grads[i](x)
        tapped = tapped + (x,)
    return tapped


def _tapped_call(callee, call, fin, fout, gin, gout, by_token, run, args, kwargs):
    """`run(*args, **kwargs)` tapped: the call, the gradients of the arguments, the arguments and outputs (a tensor,
    or the tensors of a tuple), the gradients of the outputs."""
    base = _tap_call(callee, call)
    out = run(*_tap_gradients(gin, by_token, base, args, 0), **kwargs)
    if _any_tensor(args):       # (a tap function left with no tap is a side effect MindSpore warns it eliminated)
        _tap_values(fin, base, args)
    if isinstance(out, Tensor):
        _tap_values(fout, base, (out,))
        return _tap_gradients(gout, by_token, base, (out,), OUTPUT_SLOTS)[0]
    if isinstance(out, tuple):
        if _any_tensor(out):
            _tap_values(fout, base, out)
        return _tap_gradients(gout, by_token, base, out, OUTPUT_SLOTS)
    return out


def _tapped_class(cls):
    """The subclass of `cls` whose construct taps the arguments and outputs (one per class, shared by its cells).
    It calls the class's own construct as a method of the cell (`self._msprobe_construct`), not as a function: the
    compiler gives a cell's methods the cell's flags, among them the float type of `to_float` (mixed precision),
    which casts the parameters the construct reads."""
    found = _CLASSES.get(cls)
    if found is not None:
        return found

    def construct(self, *args, **kwargs):
        return _tapped_call(self._msprobe_id, self._msprobe_call, self._msprobe_fin, self._msprobe_fout,
                            self._msprobe_gin, self._msprobe_gout, self._msprobe_by_token, self._msprobe_construct,
                            args, kwargs)

    found = _CLASSES[cls] = type(cls.__name__, (cls,), {"construct": construct, "__module__": cls.__module__,
                                                        "__qualname__": cls.__qualname__, _TAPPED: cls,
                                                        "_msprobe_construct": cls.construct})
    return found


def _api_wrapper(original, callee: int, call, fin, fout):
    """An API function whose calls inside a graph are tapped (parsed by the graph compiler in place of the API);
    API calls get no gradient taps."""
    def wrapper(*args, **kwargs):
        return _tapped_call(callee, call, fin, fout, (), (), False, original, args, kwargs)
    wrapper.__name__ = getattr(original, "__name__", "api")
    wrapper.__msprobe_original__ = original
    return wrapper


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


def _casts_arguments(cell) -> bool:
    """The cell's construct casts its arguments itself (`amp_cast`: a network rewritten by ms.amp, levels O1 and
    custom_mixed_precision). In such a network no argument gets a gradient tap: a node in the gradient of a value
    that such a cast also reads changes the casts MindSpore's CPU backend keeps in the backward pass (where the
    value's gradients are summed), and the gradients' last bits; the backward entries hold the gradients of the
    outputs only."""
    construct = type(cell).construct
    construct = getattr(construct, "__wrapped__", construct)
    return "amp_cast" in getattr(getattr(construct, "__code__", None), "co_names", ())


def _idle(kind: str, code: int) -> int:
    """What a tap returns when nothing records: a gradient tap its code, a forward tap a call token."""
    return max(code // SLOT_CODES, 0) if kind == "call" else code


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
        self.next_token = 1             # call tokens, unique in the process (0: no call)

    def host_ops(self) -> dict:
        """The host ops: a call, its arguments, its outputs, gradients by call token ("grad", GRAPH_MODE) and by
        callee ("cgrad", @ms.jit graphs in PyNative), and GRAPH_MODE's gradient tap ("gradient")."""
        if not self.ops:
            for kind in ("call", "fin", "fout", "grad", "cgrad"):
                # never recomputed (Cell.recompute()): a call is tapped where it runs, once
                self.ops[kind] = ops.Custom(self._host(kind), out_shape=lambda _values, code: code,
                                            out_dtype=lambda _values, code: code,
                                            func_type="pyfunc").recompute(False)
            for kind in ("call", "fin", "fout"):
                self.ops[kind].add_prim_attr("side_effect_io", True)       # see _tap_call
            self.ops["gradient"] = GradientTap(self.ops["grad"])
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

    A few host ops serve every tap (_Registry). A tap's code says whose value it is: a call's tap carries its callee
    (a cell or an API, by number) and gets the call's token back (unique in the process), which the call's value
    taps carry with their slot; in GRAPH_MODE its gradient taps carry it too, so a backward entry is numbered as the
    forward call whose gradients it holds, as PyNative numbers it, whatever the order the gradients arrive in.

    In PyNative (`windowed`), the cells inside an @ms.jit cell run only while that cell's call runs (its forward
    window, opened and closed by the PyNative hooks of the jit cell), and its gradients while its backward runs (its
    backward window): a gradient tap there carries its callee and slot, and the n-th gradient of a callee and slot
    in the backward window of jit call J belongs to J's last-but-n call of it. A call outside a forward window is
    the forward run again by the backward pass of a graph with control flow (MindSpore recomputes it there): it is
    not recorded again."""

    def __init__(self, config, errors, windowed: bool = False):
        self.config = config
        self.errors = errors
        self.windowed = windowed
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
            self.tokens: dict = {}      # call token -> (callee, index, parent call (prefix, index) or None, run)
            self.run = 0                # graph runs of the step: a new call after a gradient starts one
            self.gradients_seen = False
            self.calls: dict = {}       # callee -> forward calls opened in this step
            self.parents: dict = {}     # (prefix, index) of a forward call -> (prefix, index) of its parent or None
            # call token -> [tensor arguments, tensor outputs, a floating-point argument] as its taps showed them
            self.arity: dict = {}
            self.latest: dict = {}      # prefix -> index of its latest forward call
            self.open: list = []        # forward calls of cells whose outputs have not arrived (mix: API parents)
            self.window = None          # PyNative: (direction, prefix, index, enclosing names) of the jit call
            self.window_calls: dict = {}    # (jit prefix, index) -> {callee: [tokens of the calls inside it]}
            self.window_counts: dict = {}   # (callee, kind, slot) -> gradients seen in this backward window
            # (prefix, direction, index) -> [sections, parent key, selected by scope/list, call token]
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
    def _callee(self, prefix: str, parent_prefix) -> int:
        """The number of a new callee."""
        _REGISTRY.host_ops()
        self.callees.append((prefix, parent_prefix))
        return len(self.callees) - 1

    def install(self, models, indexed: bool = False, jit_only: bool = False) -> int:
        """Tap the sub-cells of the models (all of them, or with `jit_only` the cells inside the @ms.jit cells,
        whose own calls the PyNative hooks record); the number of cells tapped. A cell tapped before (an earlier
        start(), an earlier debugger) keeps its taps, named as this model names it."""
        from msprobe.mindspore.cells import is_jit_cell

        found = [(index, *found) for index, model in enumerate(models) for found in _walk(model, jit_only, is_jit_cell)]
        arguments = not any(_casts_arguments(cell) for _index, _path, cell, _parent in found)
        count = 0
        for index, path, cell, parent in found:
            lead = f"{index}." if indexed else ""
            if cell.has_bprop:
                self.skipped.append(f"{lead}{path} (custom bprop)")
                continue
            own = getattr(type(cell), _TAPPED, None) or type(cell)
            prefix = f"Cell.{lead}{path}.{own.__name__}."
            parent_class = getattr(type(parent[1]), _TAPPED, None) or type(parent[1]) if parent else None
            parent_prefix = f"Cell.{lead}{parent[0]}.{parent_class.__name__}." if parent else None
            if own is type(cell):
                self._tap(cell, prefix, parent_prefix, arguments)
            else:
                _REGISTRY.callees[cell.__dict__["_msprobe_id"]] = (prefix, parent_prefix)
            count += 1
        return count

    def _tap(self, cell, prefix: str, parent_prefix, arguments: bool) -> None:
        """Tap one cell; `arguments`: the gradients of its arguments too (see _casts_arguments)."""
        callee = self._callee(prefix, parent_prefix)
        taps = _REGISTRY.ops
        arguments = CELL_SLOTS[0] if arguments else 0
        if self.windowed:
            base = callee * SLOT_CODES
            grads = (tuple(_grad_tap(taps["cgrad"], base + i) for i in range(min(arguments,
                                                                                _positional_count(cell)))),
                     tuple(_grad_tap(taps["cgrad"], base + OUTPUT_SLOTS + i) for i in range(CELL_SLOTS[1])))
        else:
            grads = ((taps["gradient"],) if arguments else (), (taps["gradient"],))
        for attr, value in zip(TAP_ATTRS, (callee, taps["call"], taps["fin"], taps["fout"], *grads,
                                           not self.windowed)):
            object.__setattr__(cell, attr, value)
        cell.__class__ = _tapped_class(type(cell))

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
                callee = self._callee(f"{prefix}.{attr}.", None)
                ops_ = _REGISTRY.ops
                wrapper = _REGISTRY.made[key] = _api_wrapper(original, callee, ops_["call"], ops_["fin"],
                                                             ops_["fout"])
            setattr(owner, attr, wrapper)
            self.patched.append((owner, attr, original, wrapper))

    def uninstall_apis(self) -> None:
        for owner, attr, original, wrapper in reversed(self.patched):
            if owner.__dict__.get(attr) is wrapper:
                setattr(owner, attr, original)
        self.patched = []

    # ------------------------------------------------------------------ PyNative windows (jit cells)
    def enter(self, direction: str, prefix: str, index: int, enclosing: list) -> None:
        """The PyNative hooks of a jit cell: its call `index` (forward) or that call's backward starts. `enclosing`:
        the cell calls open around it, itself included (what `list` at mix reads)."""
        _synchronize()                  # what ran before is not this call's
        with self._lock:
            self.window = (direction, prefix, index, list(enclosing))
            self.window_counts = {}

    def leave(self) -> None:
        """The jit cell's call (or its backward) returned: its entries go to the writer, before the jit cell's."""
        _synchronize()
        with self._lock:
            self.window = None
        self.flush()

    # ------------------------------------------------------------------ run time (host callbacks)
    def arrive(self, kind: str, code: int, values) -> int:
        """One value from a tap; returns the forward call's token (a gradient tap's code, unchanged). Never raises:
        the graph's run must go on."""
        high, slot = divmod(code, SLOT_CODES)
        if not self.active:
            return _idle(kind, code)
        by_callee = kind == "cgrad"
        if kind in ("grad", "cgrad"):
            kind = "bin" if slot >= OUTPUT_SLOTS else "bout"
            slot %= OUTPUT_SLOTS
        direction, section = KINDS.get(kind, ("forward", None))
        try:
            with self._lock:
                if high < 0:                    # a new call: its token for its later taps
                    return self._open(-high - 1)
                if by_callee:                   # a gradient in an @ms.jit graph of PyNative: find its call
                    high = self._window_call(high, kind, slot)
                token = high
                call = self.tokens.get(token)
                if call is None:                # no call of this step (idle, opened before its reset, repeated)
                    return code
                callee, index, parent, _run = call
                if direction == "backward":
                    self.gradients_seen = True
                elif token in self.open:        # its own values come after the calls inside it
                    self.open.remove(token)
                prefix = self.callees[callee][0]
                key = (prefix, direction, index)
                name = entry_name(prefix, direction, index)
                entry = self.entries.get(key)
                if entry is None:
                    entry = self.entries[key] = [{}, None if parent is None else (parent[0], direction, parent[1]),
                                                 filters.selected(self.config, name, self._enclosing(call, direction)),
                                                 token]
                self.arrived += 1
                if direction == "forward":      # the call's arity, for its backward entry's null slots
                    arity = self.arity.setdefault(token, [0, 0, False])
                    arity[section == "output"] = max(arity[section == "output"], slot + 1)
                    if section == "input_args" and dtype_name(values.dtype).startswith(("Float", "BFloat")):
                        arity[2] = True
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
            return _idle(kind, code)
        return code

    def _window_call(self, callee: int, kind: str, slot: int) -> int:
        """The token of the call a gradient of `callee` belongs to (under the lock): in the backward window of jit
        call J, gradients arrive in the reverse order of J's calls of the callee (0: none)."""
        window = self.window
        if window is None or window[0] != "backward":
            return 0
        calls = self.window_calls.get(window[1:3], {}).get(callee, ())
        key = (callee, kind, slot)
        seen = self.window_counts.get(key, 0)
        self.window_counts[key] = seen + 1
        return calls[-1 - seen] if seen < len(calls) else 0

    def _open(self, callee: int) -> int:
        """The token of a new call of `callee` (under the lock): a call of this step, or (PyNative, outside a forward
        window) a repeated one, which records nothing."""
        token = _REGISTRY.next_token
        _REGISTRY.next_token += 1
        window = self.window
        if self.windowed and (window is None or window[0] != "forward"):
            return token                # a token of no call of the step: its values are not recorded
        index = self.calls.get(callee, 0)
        self.calls[callee] = index + 1
        if self.gradients_seen:         # the step's next graph run (gradient accumulation)
            self.run += 1
            self.gradients_seen = False
        prefix, parent_prefix = self.callees[callee]
        if prefix.startswith("Cell."):
            parent = (parent_prefix, self.latest[parent_prefix]) if parent_prefix in self.latest else None
            self.latest[prefix] = index
            self.open.append(token)
        else:                           # an API (mix): the innermost cell call still open
            parent = self.tokens[self.open[-1]][:2] if self.open else None
            parent = (self.callees[parent[0]][0], parent[1]) if parent else None
        if parent is None and window is not None:
            parent = window[1:3]
        self.tokens[token] = (callee, index, parent, self.run)
        self.parents[(prefix, index)] = parent
        if window is not None:
            self.window_calls.setdefault(window[1:3], {}).setdefault(callee, []).append(token)
        return token

    def _enclosing(self, call: tuple, direction: str) -> list:
        """The names of the cell calls around a call (`list` at mix selects the APIs called inside a listed cell):
        its parent, its parent's parent, ..., then the PyNative calls around the jit cell."""
        names = []
        parent = call[2]
        while parent is not None and len(names) < 64:
            names.append(entry_name(parent[0], direction, parent[1]))
            parent = self.parents.get(parent)
        if self.window is not None:
            names.extend(self.window[3])
        return names

    # ------------------------------------------------------------------ end of step
    def flush(self) -> None:
        """Wait for the graph's work, then hand the entries to the writer in the order PyNative writes them: for each
        graph run, the forward calls in the order they opened, each cell after the calls inside it, then the
        backward calls in the reverse order (the taps of independent ops run in any order the graph allows)."""
        _synchronize()
        with self._lock:
            entries, self.entries = self.entries, OrderedDict()
        if not entries:
            return
        children: dict = {}
        for key, found in entries.items():
            children.setdefault(found[1] if found[1] in entries else None, []).append(key)

        def post_order(keys, reverse):
            for key in sorted(keys, key=lambda k: entries[k][3], reverse=reverse):
                yield from post_order(children.get(key, ()), reverse)
                yield key

        roots = children.get(None, [])
        runs = {key: self.tokens[found[3]][3] if found[3] in self.tokens else 0 for key, found in entries.items()}
        sequence = []
        for run in sorted(set(runs.values())):
            sequence += [*post_order([k for k in roots if k[1] == "forward" and runs[k] == run], False),
                         *post_order([k for k in roots if k[1] == "backward" and runs[k] == run], True)]
        writer = self.writer
        config = self.config
        for key in sequence:
            sections, parent, selected, token = entries[key]
            direction = key[1]
            if not selected or not filters.direction_ok(config, direction):
                continue
            entry = entry_name(*key)
            if config.level != "L1":
                writer.add_construct(entry, entry_name(*parent) if parent else None)
            body: dict = {}
            arity = self.arity.get(token, (0, 0, False))
            # a backward entry has a slot per output and (when one is floating point) per argument, null where no
            # gradient came back, as PyNative's
            least = {"input": arity[1], "output": arity[0] if arity[2] else 0} if direction == "backward" else {}
            for section in (("input_args", "output") if direction == "forward" else ("input", "output")):
                slots = sections.get(section) or {}
                if filters.section_ok(config, "input" if section.startswith("input") else "output"):
                    size = max(max(slots, default=-1) + 1, least.get(section, 0))
                    body[section] = [slots.get(i) for i in range(size)]
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
    `jit_only` every cell inside an @ms.jit cell (not the jit cell itself)."""
    seen = {id(model)}
    todo = [(name, child, None, False) for name, child in reversed(list(model._cells.items())) if child]
    while todo:
        path, cell, parent, inside_jit = todo.pop()
        if id(cell) in seen:
            continue
        seen.add(id(cell))
        jit = inside_jit or is_jit_cell(cell)
        if not jit_only or inside_jit:
            yield path, cell, parent
        children = [(f"{path}.{name}", child, (path, cell), jit) for name, child in cell._cells.items() if child]
        todo.extend(reversed(children))


def _synchronize() -> None:
    """Wait until the graphs launched so far ran (their taps reported)."""
    try:
        from msprobe.mindspore.collector import _pynative_executor

        _pynative_executor.sync()
    except Exception:  # noqa: BLE001 - an older MindSpore: the step's outputs were read already
        pass


def graph_directory(dump_path: str, step: int, rank) -> str:
    """Where a graph-mode step writes: <dump_path>/step<N>/rank (rank<R> in a distributed job), as the reference."""
    return os.path.join(dump_path, f"step{step}", "rank" if rank is None else f"rank{rank}")


class GraphRoute:
    """The graph part of one PrecisionDebugger: in GRAPH_MODE every sub-cell of the model is tapped and the step
    is written to <dump_path>/step<N>/rank; in PyNative at L0/mix the cells inside the model's @ms.jit cells are
    tapped (on CPU) and their entries go into the PyNative step's own dump, in PyNative's order: the jit cell's
    PyNative hooks (cells.py) open and close its windows, and each window's entries are written before the jit
    cell's own entry."""

    def __init__(self, debugger):
        self.debugger = debugger
        self.cells = GraphCells(debugger.config, debugger.errors)
        self.graph_mode = False         # the debugger records a GRAPH_MODE network
        self.inside_jit = False         # PyNative: cells inside @ms.jit cells are tapped
        self.started = False
        self.rewritten = False          # the model was rewritten by ms.amp (O1, custom_mixed_precision)
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
        """Tap the cells (once) and let the taps record; True when the step is the graph's alone (GRAPH_MODE)."""
        debugger = self.debugger
        level = debugger.config.level
        cells = self.cells
        self.graph_mode = self.check(models)
        if not self.started:
            self._first(models, indexed)
        if not (self.graph_mode or self.inside_jit):
            return False
        from msprobe.mindspore.records import Recorder

        if self.graph_mode and level in ("mix", "L1"):
            cells.install_apis()
        writer = cells.writer = debugger.writer
        save = writer.save_tensor if debugger.config.task == "tensor" else None
        cells.recorder = Recorder(debugger.config.summary_mode, save, debugger.errors.failed)
        self._arrived_at_start = cells.arrived
        cells.active = True
        return self.graph_mode

    def _first(self, models: list, indexed: bool) -> None:
        """The taps, once: every sub-cell in GRAPH_MODE (not at L1), the cells inside the jit cells in PyNative at
        L0/mix."""
        import mindspore as ms

        debugger = self.debugger
        level = debugger.config.level
        cells = self.cells
        self.started = True
        self.graph_mode = ms.get_context("mode") != ms.PYNATIVE_MODE
        self.rewritten = any(_casts_arguments(cell) for model in models for _name, cell in model.cells_and_names())
        cells.windowed = not self.graph_mode
        if self.graph_mode:
            compiled = [type(m).__name__ for m in models if getattr(m, "_compile_cache", None)]
            if compiled:
                debugger.errors.once("compiled", "%s ran as a graph before start(model): its compiled graph "
                                     "has no taps and its cells are not recorded; create the debugger and "
                                     "call start(model) before the first call of the network",
                                     ", ".join(compiled))
            if level != "L1":
                cells.install(models, indexed)
        elif level in ("L0", "mix") and device_problem(ms.get_context("device_target")) is None:
            self.inside_jit = cells.install(models, indexed, jit_only=True) > 0
        if cells.skipped:
            debugger.errors.once("skipped", "cells not recorded in the graph (their backward is a custom "
                                 "bprop): %s", ", ".join(cells.skipped[:5]))

    # ------------------------------------------------------------------ the jit cells' windows (PyNative)
    def window(self, direction: str, prefix: str, index: int, enclosing: list) -> None:
        if self.inside_jit and self.cells.active:
            self.cells.enter(direction, prefix, index, enclosing)

    def window_closed(self) -> None:
        if self.inside_jit and self.cells.active:
            self.cells.leave()

    # ------------------------------------------------------------------ stop
    def flush(self) -> None:
        if not (self.graph_mode or self.inside_jit) or not self.cells.active:
            return
        self.cells.flush()
        self.cells.active = False

    def empty_reason(self) -> str | None:
        """Why a GRAPH_MODE step recorded nothing (never a silent empty dump), or None."""
        if not self.graph_mode or not self.cells.active:
            return None
        _synchronize()
        if self.cells.arrived > self._arrived_at_start:
            return None
        if self.rewritten and self.debugger.config.level == "L1":
            reason = ("no API call ran in the graph: the network was rewritten by ms.amp (level O1 or "
                      "custom_mixed_precision), which calls its own copies of the ops and mint functions, not "
                      "recorded; record its cells at level L0 or mix, or its kernels at L2")
        else:
            reason = ("no tapped cell ran in this step: the network was compiled before start(model) (create the "
                      "debugger and call start(model) before its first call), or was not called between start() "
                      "and stop()")
        self.debugger.errors.once(("empty graph step",), "GRAPH_MODE: %s", reason)
        return reason

    def directory(self, default: str) -> str:
        debugger = self.debugger
        if self.graph_mode:
            return graph_directory(debugger.config.dump_path, debugger.current_step, debugger._rank())
        return default

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
