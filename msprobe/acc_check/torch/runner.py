"""Replay one dumped PyTorch API on the device under test and on the CPU benchmark (spec §5.1, §5.4, §5.5)."""

from __future__ import annotations

import os

import torch

from msprobe.acc_check.common import (  # noqa: F401 (ApiResult re-exported)
    BLANK,
    SKIP,
    ApiResult,
    aggregate,
    first_line,
    raise_target,
    skip_result,
)
from msprobe.acc_check.torch.apis import BLACK_LIST, parse_api, support_lists
from msprobe.acc_check.torch.inputs import InputBuilder
from msprobe.acc_check.torch.standards import compare_output

RAISE = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.float32: torch.float64}
GRAD_INDEX = {"topk": 0, "npu_fusion_attention": 0}
NO_BACKWARD_DATA = {"repeat_interleave"}
NO_BACKWARD = {"masked_select"}
INPLACE_VIEW = {"resize_", "resize_as_", "set_", "transpose_", "t_", "squeeze_", "unsqueeze_"}


def _resolve(api_type: str, name: str):
    import torch.nn.functional as functional

    if api_type == "Functional":
        return getattr(functional, name, None)
    if api_type == "Tensor":
        return getattr(torch.Tensor, name, None)
    if api_type == "Torch":
        for module in (torch, torch.linalg, torch.special):
            found = getattr(module, name, None)
            if found is not None:
                return found
    return None


# The CPU benchmark runs the original APIs, captured when this module is first imported; the device run looks
# the API up at call time (a patched or hooked API is what the device under test executes).
_ORIGINALS: dict = {}


def bench_function(api_type: str, name: str):
    key = (api_type, name)
    if key not in _ORIGINALS:
        _ORIGINALS[key] = _resolve(api_type, name)
    return _ORIGINALS[key]


def _capture_originals() -> None:
    for api_type, names in support_lists().items():
        for name in names:
            bench_function(api_type, name)


_capture_originals()


def device_name(device_id: int = 0) -> str:
    """The device under test (DECISIONS 18): Ascend NPU with torch_npu, else CUDA, else CPU; `device_id` is the
    first -d id (ignored on the CPU)."""
    try:
        import torch_npu  # noqa: F401

        return f"npu:{device_id}"
    except ImportError:
        pass
    return f"cuda:{device_id}" if torch.cuda.is_available() else "cpu"


def set_jit_compile(jit_compile: bool) -> None:
    """-j on an Ascend NPU (spec §2.3): jit compile mode on and internal formats allowed; off: both off."""
    torch.npu.set_compile_mode(jit_compile=jit_compile)
    torch.npu.config.allow_internal_format = jit_compile


def save_error(directory: str, result) -> None:
    """Save the inputs and outputs of a failing API as .pt files (spec §5.9); args and kwargs get distinct names
    (DECISIONS 19)."""
    os.makedirs(directory, mode=0o750, exist_ok=True)
    for key, value in result.saved.items():
        leaves = []
        _leaves(value, leaves)
        for k, leaf in enumerate(leaves):
            if isinstance(leaf, torch.Tensor):
                leaf = leaf.detach().cpu().contiguous()
            torch.save(leaf, os.path.join(directory, f"{result.full_name}.{key}.{k}.pt"))


def _leaves(value, out: list) -> None:
    if isinstance(value, (list, tuple)):
        for element in value:
            _leaves(element, out)
    elif isinstance(value, dict):
        for element in value.values():
            _leaves(element, out)
    else:
        out.append(value)


def _walk(value, fn):
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, list):
        return [_walk(v, fn) for v in value]
    if isinstance(value, tuple):
        return tuple(_walk(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: _walk(v, fn) for k, v in value.items()}
    return value


def _tensors(value) -> list:
    found = []
    _walk(value, lambda t: found.append(t) or t)
    return found


def _raise_plan(args, kwargs, output_dtype):
    """(raise dtype, autocast dtype or None) of the benchmark copy (spec §5.4)."""
    dtypes = {t.dtype for t in _tensors([args, kwargs]) if t.dtype in RAISE}
    if not dtypes:
        return None, None
    raise_dtype = getattr(torch, raise_target(str(d).replace("torch.", "") for d in dtypes))
    if len(dtypes) == 1:
        (autocast_dtype,), autocast = dtypes, False
    else:
        autocast_dtype = next(d for d in sorted(dtypes, key=str) if d != torch.float32)
        autocast = True
    if not autocast and output_dtype is not None and autocast_dtype != output_dtype:
        autocast, autocast_dtype = True, output_dtype
    if autocast_dtype not in (torch.float16, torch.bfloat16):
        autocast = False
    return raise_dtype, (autocast_dtype if autocast else None)


def _hf32(tensor: torch.Tensor) -> torch.Tensor:
    bits = tensor.detach().contiguous().view(torch.int32).to(torch.int64)
    bits = (((bits >> 11) + 1) >> 1) << 12
    return ((bits + 2 ** 31) % 2 ** 32 - 2 ** 31).to(torch.int32).view(torch.float32)


class Replayer:
    """Runs APIs of one dump: builds inputs, runs device and benchmark, compares."""

    def __init__(self, dump_data: dict, tensor_dir: str | None, device: str = "cpu", seed: int = 1234, lists=None):
        self.data = dump_data
        self.builder = InputBuilder(tensor_dir, seed)
        self.seed = seed
        self.device = device
        self.lists = lists     # select.ApiLists of -config, or None
        torch.manual_seed(seed)

    def run(self, full_name: str, index: int) -> ApiResult:
        parsed = parse_api(full_name)
        if parsed is None:
            return skip_result(full_name, f"API {full_name} not support for acc_check. SKIP.")
        api_type, api_name = parsed
        if api_name in BLACK_LIST or (self.lists is not None and self.lists.excluded(api_name)):
            return skip_result(full_name, f"API {api_name} in black list or not in white list. SKIP.")
        if api_name not in support_lists().get(api_type, ()) or bench_function(api_type, api_name) is None:
            return skip_result(full_name, f"API {full_name} not support for acc_check. SKIP.")
        try:
            return self._run(full_name, api_type, api_name, index)
        except Exception as exc:  # any failure of one API becomes its SKIP row (spec §5.1 step 5)
            return skip_result(full_name, f"Run {full_name} failed: {first_line(exc)}")

    def _run(self, full_name: str, api_type: str, api_name: str, index: int) -> ApiResult:
        forward = self.data[f"{full_name}.forward"]
        backward = self.data.get(f"{full_name}.backward")
        if isinstance(forward.get("dump_error"), str):      # the collector could not record all of it
            return skip_result(full_name, f"API {full_name} was not fully dumped ({forward['dump_error']}). SKIP.")
        kwargs_record = forward.get("input_kwargs") or {}
        messages = []
        need_backward = backward is not None
        if need_backward and "out" in kwargs_record:
            need_backward = False
            messages.append("function with out=... arguments don't support automatic differentiation, "
                            "skip backward.")
        elif need_backward and api_name in NO_BACKWARD_DATA:
            need_backward = False
            messages.append("This API does not have backward input data, skip backward.")
        elif need_backward and api_name in NO_BACKWARD:
            need_backward = False
            messages.append("This API does not support backward ut, skip backward.")
        self.builder.reseed(self.seed + index)
        args_record = self._preprocess(api_name, forward.get("input_args") or [])
        args = self.builder.build(args_record, requires_grad=need_backward)
        kwargs = self.builder.build(kwargs_record, requires_grad=need_backward)
        if api_name in ("conv1d", "conv2d"):
            args = _walk(args, lambda t: _hf32(t) if t.dtype == torch.float32 and not t.requires_grad else t)
        output_dtype = _first_output_dtype(forward.get("output"))
        raise_dtype, autocast_dtype = _raise_plan(args, kwargs, output_dtype)
        if api_name == "type_as" or api_name in ("conv1d", "conv2d") and raise_dtype == torch.float64:
            raise_dtype = None
        keep_view = api_name in INPLACE_VIEW
        device_args, device_kwargs = self._copy(args, self.device, None, keep_view), \
            self._device_kwargs(self._copy(kwargs, self.device, None, keep_view), True)
        bench_args, bench_kwargs = self._copy(args, "cpu", raise_dtype, keep_view), \
            self._device_kwargs(self._copy(kwargs, "cpu", raise_dtype, keep_view), False)

        bench_out = bench_function(api_type, api_name)(*bench_args, **bench_kwargs)
        device_fn = _resolve(api_type, api_name)
        if autocast_dtype is not None:
            with torch.autocast(self.device.split(":")[0], dtype=autocast_dtype):
                device_out = device_fn(*device_args, **device_kwargs)
        else:
            device_out = device_fn(*device_args, **device_kwargs)
        forward_rows = compare_output(bench_out, device_out, api_name.split(".")[-1], full_name)
        result = ApiResult(full_name, aggregate(forward_rows), BLANK, forward=forward_rows)
        result.saved = {"forward.input": args, "forward.kwargs": kwargs, "forward.output.bench": bench_out,
                        "forward.output.device": device_out}
        if need_backward:
            self._backward(result, api_name, backward, bench_args, bench_out, device_args, device_out,
                           raise_dtype, messages)
        if messages:
            result.backward_status = SKIP
            result.message = "".join(messages)
        return result

    def _backward(self, result, api_name, backward, bench_args, bench_out, device_args, device_out, raise_dtype,
                  messages) -> None:
        grad_index = GRAD_INDEX.get(api_name)
        if isinstance(device_out, (list, tuple)):
            if grad_index is None:
                messages.append("Multiple backward is not supported.")
                return
            bench_out, device_out = bench_out[grad_index], device_out[grad_index]
        if not (isinstance(device_out, torch.Tensor) and device_out.requires_grad):
            messages.append("The output does not require grad, skip backward.")
            return
        grads = self.builder.build((backward.get("input") or backward.get("grad_input") or [None])[:1])
        grad = grads[0]
        if not isinstance(grad, torch.Tensor):
            messages.append("The backward record has no input gradient, skip backward.")
            return
        grad = grad.reshape(device_out.shape) if grad.numel() == device_out.numel() else grad
        device_out.backward(grad.to(self.device, dtype=device_out.dtype))
        bench_grad = grad.to(raise_dtype) if raise_dtype is not None and grad.dtype in RAISE else grad
        bench_out.backward(bench_grad.to(bench_out.dtype))
        bench_grads = [t.grad for t in _tensors(bench_args)]
        device_grads = [t.grad for t in _tensors(device_args)]
        rows = compare_output(bench_grads, device_grads, api_name.split(".")[-1], result.full_name)
        result.backward = rows
        result.backward_status = aggregate(rows)
        result.saved.update({"backward.input": grad, "backward.output.bench": bench_grads,
                             "backward.output.device": device_grads})

    @staticmethod
    def _preprocess(api_name: str, args_record: list) -> list:
        if api_name == "cross_entropy" and len(args_record) > 1 and isinstance(args_record[1], dict):
            target = dict(args_record[1])
            if isinstance(target.get("Min"), (int, float)) and target["Min"] <= 0:
                target["Min"] = 0
            if target.get("dtype") == "torch.int32":
                target["dtype"] = "torch.int64"
            args_record = [args_record[0], target, *args_record[2:]]
        if api_name == "histc" and args_record and isinstance(args_record[0], dict):
            first = dict(args_record[0])
            if "int" in str(first.get("dtype")):
                first["dtype"] = "torch.float32"
            args_record = [first, *args_record[1:]]
        return args_record

    @staticmethod
    def _copy(value, device: str, raise_dtype, keep_view: bool):
        def copy(tensor):
            grad = tensor.requires_grad
            out = tensor if keep_view else tensor.detach().clone()
            if raise_dtype is not None and tensor.dtype in RAISE and tensor.dtype != raise_dtype:
                out = out.to(raise_dtype)
            out = out.to(device)
            if grad and not keep_view:
                out.requires_grad_(True)
            return out

        return _walk(value, copy)

    def _device_kwargs(self, kwargs, device_run: bool):
        if not isinstance(kwargs, dict):
            return kwargs
        out = {}
        for key, value in kwargs.items():
            if isinstance(value, dict) and value.get("type") == "torch.device":
                if device_run:
                    out[key] = torch.device(self.device)
                continue
            out[key] = value
        if "device" in out and not device_run:
            del out["device"]
        return out


def _first_output_dtype(outputs):
    first = outputs[0] if isinstance(outputs, list) and outputs else outputs
    if isinstance(first, dict) and first.get("dtype") in ("torch.bfloat16", "torch.float16", "torch.float32",
                                                          "torch.float64"):
        return getattr(torch, first["dtype"].replace("torch.", ""))
    return None
