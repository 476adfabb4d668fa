"""Arguments of one dumped MindSpore API call (spec acc_check.md §4.1, §4.2), built framework-free first.

A record becomes a tree of plain values in which every tensor is a `TensorLeaf` (numpy array + dump dtype) and
every `mindspore.dtype` a `DtypeLeaf`; `ms_runner` turns the tree into MindSpore objects twice, in the dumped
dtypes for the device under test and raised for the benchmark, so both runs see exactly the same numbers.

Random-data mode (`task: statistics`): numpy's generator is seeded with 42 before every tensor; Bool tensors are
uniform [0, 1) > 0.5 (a constant when Max == Min), others uniform(Min, Max) cast to the dump dtype (BFloat16
drawn in float64); an infinite bound is replaced by the dtype's largest finite value. Real-data mode
(`task: tensor`): the `.npy` of the item's data_name, cast to the dump dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from msprobe.acc_check.common import InputError, is_tensor_item, number
from msprobe.dump.tensors import TensorReadError, load_tensor

SEED = 42
# dump dtype -> numpy dtype of the generated / loaded values (BFloat16 has none: float64, cast by MindSpore)
NUMPY = {"Bool": np.bool_, "Int8": np.int8, "Int16": np.int16, "Int32": np.int32, "Int64": np.int64,
         "UInt8": np.uint8, "UInt16": np.uint16, "UInt32": np.uint32, "UInt64": np.uint64, "Float16": np.float16,
         "Float32": np.float32, "Float64": np.float64, "BFloat16": np.float64}
FLOATS = {"Float16", "BFloat16", "Float32", "Float64"}
FINITE_MAX = {"Float16": 65504.0, "BFloat16": 3.3895313892515355e38, "Float32": float(np.finfo(np.float32).max),
              "Float64": float(np.finfo(np.float64).max) / 2}   # halved: uniform(-max, max) would overflow


def canonical(dtype: str) -> str:
    """`Float32` -> `float32`, `BFloat16` -> `bfloat16` (the names of common.RAISE)."""
    return str(dtype).lower()


@dataclass
class TensorLeaf:
    array: np.ndarray
    dtype: str          # dump dtype, MindSpore spelling (Float32)


@dataclass
class DtypeLeaf:
    name: str           # Float32


class MsInputBuilder:
    """Turns dumped argument records into plain trees (TensorLeaf / DtypeLeaf / Python values)."""

    def __init__(self, tensor_dir: str | None):
        self.tensor_dir = tensor_dir   # None: random-data mode

    def build(self, node):
        if node is None:
            return None
        if isinstance(node, list):
            return tuple(self.build(element) for element in node)
        if not isinstance(node, dict):
            return node
        if "type" not in node:          # the kwargs dict
            return {key: self.build(value) for key, value in node.items()}
        if is_tensor_item(node):
            return self.tensor(node)
        kind, value = node.get("type"), node.get("value")
        if kind == "mindspore.dtype":
            return DtypeLeaf(str(value))
        if kind == "slice":
            return slice(*[number(v) for v in value])
        if kind == "ellipsis":
            return Ellipsis
        if kind in ("int", "float", "bool"):
            return number(value)
        if isinstance(value, list):
            return tuple(number(v) for v in value)
        return value if kind == "str" else number(value)

    def tensor(self, item: dict) -> TensorLeaf:
        if isinstance(item.get("dump_error"), str):
            raise InputError(f"an input was not fully dumped ({item['dump_error']}).")
        dtype = str(item.get("dtype"))
        if dtype not in NUMPY:
            raise InputError(f"a tensor of dtype {dtype} cannot be rebuilt (supported: {', '.join(NUMPY)}).")
        shape = tuple(int(s) for s in item.get("shape") or [])
        if self.tensor_dir is not None:
            return TensorLeaf(self.load(item, dtype, shape), dtype)
        return TensorLeaf(random_array(item, dtype, shape), dtype)

    def load(self, item: dict, dtype: str, shape: tuple) -> np.ndarray:
        name = item.get("data_name") or item.get("datapath")
        if not name:
            raise InputError("a tensor of this API has no data_name in a tensor dump.")
        try:
            array = np.array(load_tensor(self.tensor_dir, name))
        except TensorReadError as exc:
            raise InputError(str(exc)) from None
        if array.shape != shape and array.size == math.prod(shape):
            array = array.reshape(shape)
        return array.astype(NUMPY[dtype], copy=False)


def random_array(item: dict, dtype: str, shape: tuple) -> np.ndarray:
    low, high = number(item.get("Min")), number(item.get("Max"))
    if not all(isinstance(v, (bool, int, float)) for v in (low, high)):
        raise InputError(f"a {dtype} input of shape {list(shape)} has no numeric Max/Min ({high!r}, {low!r}); "
                         "random inputs need both.")
    generator = np.random.RandomState(SEED)
    if dtype == "Bool":
        if bool(low) == bool(high):
            return np.full(shape, bool(high))
        return generator.uniform(size=shape) > 0.5
    limit = FINITE_MAX.get(dtype, FINITE_MAX["Float64"])
    low = max(min(float(low), limit), -limit) if not math.isnan(low) else low
    high = max(min(float(high), limit), -limit) if not math.isnan(high) else high
    return generator.uniform(low, high, shape).astype(NUMPY[dtype])


def tensor_dtypes(tree) -> set:
    """The canonical dtype names of the TensorLeafs of a tree."""
    found = set()
    if isinstance(tree, TensorLeaf):
        found.add(canonical(tree.dtype))
    elif isinstance(tree, (list, tuple)):
        for element in tree:
            found |= tensor_dtypes(element)
    elif isinstance(tree, dict):
        for element in tree.values():
            found |= tensor_dtypes(element)
    return found
