"""Replay one dumped MindSpore API on the device under test and on the CPU benchmark (spec acc_check.md §4;
DECISIONS 16, 18).

* Tested: in random-data mode the API as found at call time (a patched or hooked API is what is tested) on the
  device MindSpore runs on (Ascend, GPU, here the CPU) in the dumped dtypes; in real-data mode the dumped outputs
  themselves (spec §4.1: they are not recomputed).
* Benchmark: the original API (captured when this module is imported) on the CPU with float16/bfloat16 inputs
  raised to float32 and float32 to float64 (`mindspore.dtype` arguments likewise); Functional.flash_attention_score
  uses the CPU reference of `ms_reference.py`.
* Backward, when the dump has a `.backward` record: `GradOperation(get_all=True, sens_param=True)` over the API with
  the record's incoming gradients as sens (zeros for missing ones); the gradients of all positional tensor inputs
  are compared, floating ones only (spec §4.3).
"""

from __future__ import annotations

import functools
import gc
import inspect
import json
import os

import numpy as np

from msprobe.acc_check.common import RAISE, SKIP, ApiResult, OutputResult, aggregate, first_line, raise_target
from msprobe.acc_check.mindspore.apis import ms_support_lists
from msprobe.acc_check.mindspore.compare import CASTS, MAX_ABS_ERR, Value, compare_values
from msprobe.acc_check.mindspore.inputs import (
    FLOATS,
    DtypeLeaf,
    MsInputBuilder,
    TensorLeaf,
    canonical,
    tensor_dtypes,
)
from msprobe.io import write_text
from msprobe.optional import require

NAMESPACES = {"Mint": "mindspore.mint", "MintFunctional": "mindspore.mint.nn.functional",
              "Tensor": "mindspore.Tensor", "Functional": "mindspore.ops"}


@functools.lru_cache(maxsize=1)
def import_mindspore():
    """mindspore, in PyNative mode; a clear error when it is not importable (it needs numpy<2)."""
    os.environ.setdefault("GLOG_v", "3")     # MindSpore's C++ log: errors only
    mindspore = require("mindspore", "acc_check of a MindSpore dump")
    mindspore.set_context(mode=mindspore.PYNATIVE_MODE)
    return mindspore


def device_name(device_id: int = 0) -> str:
    """The device under test (DECISIONS 18): the device MindSpore runs on; `device_id` is the first -d id."""
    ms = import_mindspore()
    target = ms.get_context("device_target")
    if target == "CPU":
        return "cpu"
    ms.set_device(target, device_id)
    return f"{target.lower()}:{device_id}"


def _owner(api_type: str):
    ms = import_mindspore()
    from mindspore import mint, ops

    return {"Mint": mint, "MintFunctional": mint.nn.functional, "Tensor": ms.Tensor, "Functional": ops}[api_type]


def resolve(api_type: str, name: str):
    """The API as it is found now (the device run); Tensor methods are called with self as argument 0, a Tensor
    property (size) is read."""
    owner = _owner(api_type)
    if api_type == "Tensor":
        static = inspect.getattr_static(owner, name, None)
        if static is None:
            return None
        if isinstance(static, property):
            return static.fget
        return getattr(owner, name)
    found = getattr(owner, name, None)
    return found if callable(found) and not inspect.isclass(found) else None


# The benchmark runs the original APIs, captured when this module is first imported (hooks or patches applied
# later, e.g. by a dump tool or a test, reach only the device run).
_ORIGINALS: dict = {}


def bench_function(api_type: str, name: str):
    if api_type == "Functional" and name == "flash_attention_score":
        from msprobe.acc_check.mindspore.reference import flash_attention_score

        return flash_attention_score
    key = (api_type, name)
    if key not in _ORIGINALS:
        _ORIGINALS[key] = resolve(api_type, name)
    return _ORIGINALS[key]


def _capture_originals() -> None:
    lists = ms_support_lists()
    for api_type, section in (("Mint", "mint"), ("MintFunctional", "mint_functional"), ("Tensor", "tensor")):
        for name in lists[section]:
            bench_function(api_type, name)


_capture_originals()


def _ms_dtype(name: str):
    ms = import_mindspore()
    name = canonical(name)
    return ms.bool_ if name == "bool" else getattr(ms, name)


class MsReplayer:
    """Runs the APIs of one MindSpore dump: builds inputs, runs tested and benchmark, compares."""

    def __init__(self, dump_data: dict, tensor_dir: str | None, device: str, options):
        self.ms = import_mindspore()
        self.data = dump_data
        self.builder = MsInputBuilder(tensor_dir)
        self.real_data = tensor_dir is not None
        self.device = device
        self.on_cpu = device == "cpu"
        self.max_abs_err = options.max_abs_err or MAX_ABS_ERR
        self.lists = options.lists

    def run(self, full_name: str, index: int = 0) -> ApiResult:
        forward = self.data.get(f"{full_name}.forward")
        backward = self.data.get(f"{full_name}.backward")
        result = ApiResult(full_name, "", "")

        def skip(message: str) -> ApiResult:
            result.forward_status = SKIP if forward is not None else ""
            result.backward_status = SKIP if backward is not None else ""
            result.message = message
            return result

        fields = full_name.split(".")
        if len(fields) != 3:   # spec §3.1: the API key must be Type.name.N
            return skip(f"API {full_name} is not of the form Type.name.N, acc_check cannot replay it. ")
        api_type, api_name, _ = fields
        if self.lists.excluded(api_name):
            return skip(f"API {api_name} in black list or not in white list. SKIP.")
        if isinstance(forward, dict) and isinstance(forward.get("dump_error"), str):
            return skip(f"API {full_name} was not fully dumped ({forward['dump_error']}). SKIP.")
        device_fn, bench_fn = resolve(api_type, api_name), bench_function(api_type, api_name)
        if device_fn is None or bench_fn is None:
            return skip(f"API {full_name} not support for acc_check: {NAMESPACES[api_type]} has no {api_name}. ")
        messages = []
        inputs, failure = None, ""
        if forward is not None:
            try:
                inputs = _side("inputs", lambda: self._inputs(forward))
            except SideError as exc:
                failure = str(exc)
        for direction, record in (("forward", forward), ("backward", backward)):
            if record is None:
                continue
            try:
                if forward is None:
                    raise SideError(f"forward info of {full_name} is not found, its backward cannot be replayed.")
                if failure:
                    raise SideError(failure)
                if direction == "forward":
                    rows, saved = self._forward(inputs, forward, device_fn, bench_fn, api_name in CASTS)
                else:
                    rows, saved = self._backward(inputs, backward, device_fn, bench_fn)
                setattr(result, direction, rows)
                setattr(result, f"{direction}_status", aggregate(rows))
                result.saved.update(saved)
                messages += [row.message for row in rows]
            except Exception as exc:  # one direction's failure is its SKIP cell, with the exception text
                setattr(result, f"{direction}_status", SKIP)
                messages.append(f"{_failure(exc)} ")
        result.message = "".join(messages)
        if SKIP in (result.forward_status, result.backward_status):
            gc.collect()   # no failed output tensor may survive into the next API (see _side)
        return result

    # --- one direction ----------------------------------------------------------------------------------------
    def _inputs(self, forward: dict) -> tuple:
        args = self.builder.build(forward.get("input_args") or [])
        kwargs = self.builder.build(forward.get("input_kwargs") or {})
        return args, kwargs, raise_target(tensor_dtypes(args) | tensor_dtypes(kwargs))

    def _forward(self, inputs: tuple, forward: dict, device_fn, bench_fn, cast: bool = False) -> tuple:
        args, kwargs, raised = inputs
        bench = _side("benchmark run", lambda: self._values(
            bench_fn(*self._make(args, raised, True), **self._make(kwargs, raised, True))))
        saved = {}
        if self.real_data:
            tested = _side("dumped outputs", lambda: self._dumped(forward.get("output")))
        else:
            def device_run():
                out = device_fn(*self._make(args, None, False), **self._make(kwargs, None, False))
                return self._values(out), _leaves_of(out)

            tested, leaves = _side(f"tested run ({self.device})", device_run)
            saved = {"forward": (args, kwargs, leaves)}
        return self._compare(bench, tested, backward=False, cast=cast), saved

    def _backward(self, inputs: tuple, backward: dict, device_fn, bench_fn) -> tuple:
        args, kwargs, raised = inputs
        grads = _side("inputs", lambda: self.builder.build(backward.get("input") or []))
        bench = _side("benchmark backward", lambda: [
            self._value(g) for g in self._grad(bench_fn, args, kwargs, grads, raised, True)])
        saved = {}
        if self.real_data:
            tested = _side("dumped gradients", lambda: self._dumped(backward.get("output")))
        else:
            def device_run():
                device_grads = self._grad(device_fn, args, kwargs, grads, None, False)
                return [self._value(g) for g in device_grads], _leaves_of(device_grads)

            tested, leaves = _side(f"tested backward ({self.device})", device_run)
            saved = {"backward": (grads, leaves)}
        return self._compare(bench, tested, backward=True), saved

    def _dumped(self, outputs) -> list:
        """Values of a record's dumped outputs (real-data mode: the tested side)."""
        return [_leaf_value(v) for v in _flatten(self.builder.build(outputs or []))]

    def _grad(self, fn, args, kwargs, grads, raised, cpu: bool) -> list:
        from mindspore import ops

        call_args, call_kwargs = self._make(args, raised, cpu), self._make(kwargs, raised, cpu)
        out = fn(*call_args, **call_kwargs)
        sens = self._sens(grads, out, raised, cpu)
        grad_fn = ops.GradOperation(get_all=True, sens_param=True)(lambda *xs: fn(*xs, **call_kwargs))
        return _flatten(grad_fn(*self._make(args, raised, cpu), sens))

    def _sens(self, grads: tuple, out, raised, cpu: bool):
        """The incoming gradient of every output (the backward record's `input`, zeros where it has none), in
        the output's dtype and shape; a tuple when the API returns several outputs."""
        outs = out if isinstance(out, (tuple, list)) else (out,)
        sens = []
        for i, output in enumerate(outs):
            leaf = grads[i] if i < len(grads) else None
            if not isinstance(output, self.ms.Tensor):
                sens.append(output)
                continue
            if isinstance(leaf, TensorLeaf):
                grad = self._make(leaf, raised, cpu)
                if grad.dtype != output.dtype:
                    grad = grad.astype(output.dtype)
                if grad.shape != output.shape and grad.size == output.size:
                    grad = grad.reshape(output.shape)
            else:
                grad = self._on(self.ms.Tensor(np.zeros(output.shape), output.dtype), cpu)
            sens.append(grad)
        return tuple(sens) if isinstance(out, (tuple, list)) else sens[0]

    def _compare(self, bench: list, tested: list, backward: bool, cast: bool = False) -> list:
        """cast: the outputs of a cast, each judged by the rounding of its own (the tested) dtype."""
        def keep(value):
            return value is not None and (not backward or value.dtype in FLOATS)

        bench, tested = [v for v in bench if keep(v)], [v for v in tested if keep(v)]
        rows = [compare_values(b, t, self.max_abs_err, canonical(t.dtype) if cast else None)
                for b, t in zip(bench, tested)]
        for extra in bench[len(tested):]:
            rows.append(OutputResult(extra.dtype, "", str(extra.shape or ""), "error",
                                     "the benchmark has this output, the tested API has not "))
        for extra in tested[len(bench):]:
            rows.append(OutputResult("", extra.dtype, "", "error",
                                     "the tested API has this output, the benchmark has not "))
        return rows

    # --- MindSpore objects --------------------------------------------------------------------------------------
    def _on(self, tensor, cpu: bool):
        return tensor.move_to("CPU") if cpu and not self.on_cpu else tensor

    def _make(self, tree, raised, cpu: bool):
        """MindSpore objects of a plain tree: dumped dtypes (raised is None) or every float16/bfloat16/float32
        tensor and dtype argument raised to `raised`, on the CPU for the benchmark."""
        if isinstance(tree, TensorLeaf):
            tensor = self.ms.Tensor(tree.array, dtype=_ms_dtype(tree.dtype))
            if raised and canonical(tree.dtype) in RAISE and canonical(tree.dtype) != raised:
                tensor = tensor.astype(_ms_dtype(raised))
            return self._on(tensor, cpu)
        if isinstance(tree, DtypeLeaf):
            name = canonical(tree.name)
            return _ms_dtype(raised if raised and name in RAISE else name)
        if isinstance(tree, tuple):
            return tuple(self._make(element, raised, cpu) for element in tree)
        if isinstance(tree, dict):
            return {key: self._make(value, raised, cpu) for key, value in tree.items()}
        return tree

    def _values(self, out) -> list:
        return [self._value(v) for v in _flatten(out)]

    def _value(self, value):
        ms = self.ms
        if value is None:
            return None
        if isinstance(value, ms.Tensor):
            dtype = str(value.dtype)
            array = (value.astype(ms.float32) if dtype == "BFloat16" else value).asnumpy()
            return Value(_as_float64(array), dtype)
        if isinstance(value, (bool, int, float, np.number, np.bool_, np.ndarray)):
            array = np.asarray(value)
            return Value(_as_float64(array), str(array.dtype) if isinstance(value, (np.ndarray, np.generic))
                         else type(value).__name__)
        if isinstance(value, (list, tuple)):
            try:
                return Value(np.asarray(value, dtype=np.float64), type(value).__name__)
            except (TypeError, ValueError):
                pass
        return Value(None, type(value).__name__, raw=_dtype_text(value))


def _failure(exc: Exception) -> str:
    return str(exc) if isinstance(exc, SideError) else first_line(exc)


def _as_float64(array: np.ndarray) -> np.ndarray:
    if array.dtype.kind == "c":
        return np.stack([array.real, array.imag], axis=-1).astype(np.float64)
    return array.astype(np.float64)


def _dtype_text(value):
    """Dtype-valued outputs (Tensor.type(), dtype objects) compare by their unraised name: the benchmark's raised
    Float64 stands for the tested Float32."""
    text = str(value)
    name = canonical(text)
    inverse = {"float64": "float32"}
    return inverse.get(name, name) if name in RAISE or name in inverse else text


def _flatten(out) -> list:
    """Outputs as a flat list (spec §4.3: normalised to a tuple): a tuple or list holding tensors is unpacked
    (recursively); any other value, a list of numbers from Tensor.tolist() included, is one output."""
    if isinstance(out, (tuple, list)) and _holds_tensor(out):
        found = []
        for element in out:
            found.extend(_flatten(element))
        return found
    return [out]


def _holds_tensor(value) -> bool:
    if isinstance(value, (tuple, list)):
        return any(_holds_tensor(v) for v in value)
    return isinstance(value, TensorLeaf) or type(value).__name__ in ("Tensor", "Parameter") or value is None


class SideError(Exception):
    """A failure of one side of a comparison; its text names the side."""


def _side(label: str, action):
    """Run one side (inputs, tested run, benchmark run) so that its failure names the side. The original exception
    is dropped before raising: a MindSpore kernel error is raised again at every later synchronisation while the
    failed output tensor lives (the traceback's frames would keep it alive and fail the following APIs)."""
    try:
        return action()
    except SideError:
        raise
    except Exception as exc:
        message = f"{label}: {first_line(exc)}"
    raise SideError(message)


def _leaf_value(leaf):
    """A Value of a dumped output (real-data mode: the tested side)."""
    if leaf is None:
        return None
    if isinstance(leaf, TensorLeaf):
        return Value(_as_float64(np.asarray(leaf.array)), leaf.dtype)
    if isinstance(leaf, DtypeLeaf):
        return Value(None, "mindspore.dtype", raw=_dtype_text(leaf.name))
    if isinstance(leaf, (bool, int, float)):
        return Value(np.asarray(leaf, dtype=np.float64), type(leaf).__name__)
    return Value(None, type(leaf).__name__, raw=leaf)


def _leaves_of(out) -> list:
    """Device outputs as TensorLeafs (numpy arrays in their dtype; bfloat16 as float32) for -save_error_data."""
    import mindspore

    leaves = []
    for value in _flatten(out):
        if isinstance(value, mindspore.Tensor):
            dtype = str(value.dtype)
            array = (value.astype(mindspore.float32) if dtype == "BFloat16" else value).asnumpy()
            leaves.append(TensorLeaf(array, dtype))
        else:
            leaves.append(value)
    return leaves


# --- -save_error_data (spec §4.7) ------------------------------------------------------------------------------
def save_error(directory: str, result: ApiResult) -> None:
    """Add a failing API's inputs and tested outputs to the L1 tensor dump in `directory` (dump.json, stack.json,
    dump_error_info.log, tensors as .npy in error_data/); random-data mode only. The dump can be checked again
    with `msprobe acc_check -api_info <directory>/dump.json` (real-data mode). The splits of a multi_acc_check run
    add to the same dump at the same time: dump.json is updated under an exclusive lock."""
    import fcntl


    data_dir = os.path.join(directory, "error_data")
    os.makedirs(data_dir, mode=0o750, exist_ok=True)
    name = result.full_name
    records = {}
    if "forward" in result.saved:
        args, kwargs, outputs = result.saved["forward"]
        records[f"{name}.forward"] = {
            "input_args": [_item(v, data_dir, f"{name}.forward.input.{i}") for i, v in enumerate(args)],
            "input_kwargs": {k: _item(v, data_dir, f"{name}.forward.input.{k}") for k, v in kwargs.items()},
            "output": [_item(v, data_dir, f"{name}.forward.output.{i}") for i, v in enumerate(outputs)]}
    if "backward" in result.saved:
        grads, outputs = result.saved["backward"]
        records[f"{name}.backward"] = {
            "input": [_item(v, data_dir, f"{name}.backward.input.{i}") for i, v in enumerate(grads)],
            "output": [_item(v, data_dir, f"{name}.backward.output.{i}") for i, v in enumerate(outputs)]}
    dump_path = os.path.join(directory, "dump.json")
    with open(os.path.join(directory, ".dump.json.lock"), "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)      # released when the file is closed
        content = {"task": "tensor", "level": "L1", "framework": "mindspore", "dump_data_dir": data_dir, "data": {}}
        if os.path.isfile(dump_path):
            with open(dump_path, encoding="utf-8") as handle:
                content = json.load(handle)
        content["data"].update(records)
        write_text(dump_path, json.dumps(content, indent=1, default=str) + "\n")
        stack_path = os.path.join(directory, "stack.json")
        if not os.path.isfile(stack_path):
            write_text(stack_path, "{}\n")
        with open(os.path.join(directory, "dump_error_info.log"), "a", encoding="utf-8") as handle:
            handle.write(f"{name}: forward {result.forward_status or '-'}, backward {result.backward_status or '-'}: "
                         f"{result.message.strip()}\n")


def _item(value, data_dir: str, file_stem: str):
    """A dump.json record of one value; tensors are written to <file_stem>.npy."""
    if value is None:
        return None
    if isinstance(value, TensorLeaf):
        array = np.asarray(value.array)
        np.save(os.path.join(data_dir, f"{file_stem}.npy"), array, allow_pickle=False)
        stats = array.astype(np.float64) if array.size else np.zeros(1)
        return {"type": "mindspore.Tensor", "dtype": value.dtype, "shape": list(array.shape),
                "Max": _stat(stats.max()), "Min": _stat(stats.min()), "Mean": _stat(stats.mean()),
                "Norm": _stat(np.linalg.norm(stats)), "data_name": f"{file_stem}.npy"}
    if isinstance(value, DtypeLeaf):
        return {"type": "mindspore.dtype", "value": value.name}
    if isinstance(value, tuple):
        return [_item(v, data_dir, f"{file_stem}.{i}") for i, v in enumerate(value)]
    if isinstance(value, slice):
        return {"type": "slice", "value": [value.start, value.stop, value.step]}
    if value is Ellipsis:
        return {"type": "ellipsis", "value": "..."}
    return {"type": type(value).__name__, "value": value}


def _stat(value) -> float:
    return float(value)    # NaN/inf are written as the dump tool writes them (NaN, Infinity)
