"""Build the arguments of one dumped API call (spec acc_check.md §5.3).

Random-data mode synthesises every tensor from its dtype, shape, Max and Min (seeded generator);
real-data mode loads the dumped tensor files of dump_tensor_data (msprobe.dump.tensors.load_tensor).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from msprobe.acc_check.common import InputError, data_names, number  # noqa: F401 (re-exported)

FLOAT_DTYPES = {"torch.float16", "torch.half", "torch.bfloat16", "torch.float32", "torch.float", "torch.float64",
                "torch.double", "torch.float8_e4m3fn", "torch.float8_e5m2"}
TENSOR_TYPES = ("torch.Tensor", "torch.nn.parameter.Parameter")
NUMPY_TYPES = ("numpy.int8", "numpy.int16", "numpy.int32", "numpy.int64", "numpy.uint8", "numpy.uint16",
               "numpy.uint32", "numpy.uint64", "numpy.float16", "numpy.float32", "numpy.float64", "numpy.bool_",
               "numpy.complex64", "numpy.complex128", "numpy.str_")


def torch_dtype(text: str) -> torch.dtype:
    dtype = getattr(torch, str(text).replace("torch.", ""), None)
    if not isinstance(dtype, torch.dtype):
        raise InputError(f"unknown torch dtype {text!r}.")
    return dtype


class InputBuilder:
    """Turns dumped argument records into Python/torch values for one API call."""

    def __init__(self, tensor_dir: str | None, seed: int = 1234):
        self.tensor_dir = tensor_dir   # None: random-data mode
        self.generator = torch.Generator().manual_seed(seed)

    def reseed(self, seed: int) -> None:
        self.generator.manual_seed(seed)

    def build(self, node, requires_grad: bool = False):
        if node is None:
            return None
        if isinstance(node, list):
            return [self.build(element, requires_grad) for element in node]
        if not isinstance(node, dict):
            return node
        kind = node.get("type")
        if kind is None:   # a nested dict of arguments
            return {key: self.build(value, requires_grad) for key, value in node.items()}
        if kind in TENSOR_TYPES:
            tensor = self.tensor(node)
            if requires_grad and node.get("requires_grad") and (tensor.is_floating_point() or tensor.is_complex()):
                tensor.requires_grad_(True)
            return tensor
        value = node.get("value")
        if isinstance(value, list) and kind != "str":
            value = [number(v) for v in value]
        elif kind != "str":
            value = number(value)
        if kind == "slice":
            return slice(*value)
        if kind == "ellipsis":
            return Ellipsis
        if kind == "torch.Size":
            return torch.Size(value)
        if kind == "torch.dtype":
            return torch_dtype(value)
        if kind == "torch.device":
            return {"type": "torch.device", "value": value}
        if kind in NUMPY_TYPES:
            return getattr(np, kind.split(".", 1)[1])(value)
        return value

    def tensor(self, item: dict) -> torch.Tensor:
        if isinstance(item.get("dump_error"), str):
            raise InputError(f"an input was not fully dumped ({item['dump_error']}).")
        dtype = torch_dtype(item.get("dtype"))
        shape = [int(s) for s in item.get("shape") or []]
        name = item.get("datapath") or item.get("data_name")
        if self.tensor_dir is not None:
            if not name:
                raise InputError("a tensor of this API has no data_name in a tensor dump.")
            from msprobe.dump.tensors import TensorReadError, load_tensor

            try:
                array = load_tensor(self.tensor_dir, name)
            except TensorReadError as exc:
                raise InputError(str(exc)) from None
            tensor = torch.from_numpy(np.array(array)).to(dtype)
            if list(tensor.shape) != shape and tensor.numel() == math.prod(shape):
                tensor = tensor.reshape(shape)
            return tensor
        return self.random_tensor(item, dtype, shape)

    def random_tensor(self, item: dict, dtype: torch.dtype, shape: list) -> torch.Tensor:
        low_origin, high_origin = number(item.get("Min")), number(item.get("Max"))
        low = number(item.get("Min_except_inf_nan", low_origin))
        high = number(item.get("Max_except_inf_nan", high_origin))
        if 0 in shape:
            return torch.zeros(shape, dtype=dtype)
        try:
            low, high = float(low), float(high)
        except (TypeError, ValueError):
            raise InputError(f"a {item.get('dtype')} input has non-numeric Max/Min ({high!r}, {low!r}).") from None
        if dtype == torch.bool:
            low, high = sorted((int(low), int(high)))
            return torch.randint(low, high + 1, shape, generator=self.generator) > 0
        text = str(dtype)
        if text in FLOAT_DTYPES or dtype.is_floating_point:
            work = torch.float32 if dtype.itemsize == 1 else dtype
            if math.isnan(high):
                return torch.full(shape, math.nan, dtype=dtype)
            if high_origin and math.isinf(high):
                tensor = torch.full(shape, high, dtype=work)
                tensor.view(-1)[-1] = low
                return tensor.to(dtype)
            finfo = torch.finfo(dtype)
            lo = finfo.min if math.isinf(low) else low
            hi = finfo.max if math.isinf(high) else high
            tensor = (torch.rand(shape, generator=self.generator, dtype=torch.float64) * (hi - lo) + lo).to(work)
        elif dtype.is_complex:
            raise InputError(f"random complex inputs ({text}) are not supported.")
        else:
            tensor = torch.randint(int(low), int(high) + 1, shape, generator=self.generator, dtype=torch.int64)
            work = dtype
        flat = tensor.view(-1)
        if flat.numel():
            flat[0] = low
            flat[-1] = high
            if isinstance(high_origin, float) and math.isnan(high_origin) and tensor.is_floating_point():
                if flat.numel() <= 2:
                    flat[0] = math.nan
                else:
                    flat[1] = math.nan
            if isinstance(high_origin, (int, float)) and math.isinf(high_origin) and tensor.is_floating_point():
                flat[-1] = high_origin
            if isinstance(low_origin, (int, float)) and math.isinf(low_origin) and tensor.is_floating_point():
                flat[0] = low_origin
        return tensor.to(dtype)
