"""The training monitor's statistics of MindSpore tensors (msprobe.monitor.records.OPS), in one of two places:

* on an accelerator (Ascend, GPU), by MindSpore ops on the device: each tensor's statistics are one small float32
  tensor there (`device_vector`), and a step's vectors are stacked and cross to the host in one transfer
  (`device_values`); nothing waits for the device before the step's end;
* on the CPU, where the device's memory is the host's, each tensor's values are read in place and reduced by numpy
  in float64 (`host_vector`: msprobe.collect.stats.array_stat_vector, the convention of the collectors' dump
  statistics): MindSpore's CPU kernels take ~0.1 ms per reduction in PyNative mode, numpy a few microseconds.

Both give min and max exact, mean and norm rounded once to the tensor's dtype, and counts for zeros, nans and infs
(`zeros` becomes the reference's fraction in the values: `*_values` divide it by the element count)."""

from __future__ import annotations

import mindspore as ms
import numpy as np
from mindspore import Tensor, mint, ops

from msprobe.collect.stats import array_stat_vector
from msprobe.mindspore.apis import is_float_dtype

_LOW_PRECISION = (ms.float16, ms.bfloat16)
_TINY = float(np.finfo(np.float32).tiny)


def on_host() -> bool:
    """Whether tensors live in the host's memory (device target CPU): statistics by numpy."""
    return ms.get_context("device_target") == "CPU"


def host_vector(tensor: Tensor, ops_: tuple, eps: float) -> np.ndarray:
    """The statistics of a tensor on the CPU: float64 [len(ops_)] (zeros as a count)."""
    return array_stat_vector(tensor.asnumpy(), ops_, eps)


def device_vector(tensor: Tensor, ops_: tuple, eps: float) -> Tensor:
    """The statistics of a tensor by MindSpore ops on its device: a float32 (float64 for a float64 tensor) tensor
    [len(ops_)] (zeros as a count); nothing is read back."""
    t = tensor
    if t.size == 0:
        return Tensor(np.full((len(ops_),), np.nan, np.float32))      # (mint.full has no CPU kernel)
    if t.dtype in (ms.complex64, ms.complex128):
        t = ops.real(ops.abs(t))
    back = t.dtype if t.dtype in _LOW_PRECISION else None
    wide = ms.float64 if t.dtype == ms.float64 else ms.float32
    data = t if t.dtype == wide else t.astype(wide)      # integers, booleans: as numbers
    if data.ndim == 0:
        data = data.reshape(1)
    parts = {}
    if "min" in ops_:
        parts["min"] = mint.min(data)
    if "max" in ops_:
        parts["max"] = mint.max(data)
    if "mean" in ops_:
        parts["mean"] = mint.mean(data)
    if "norm" in ops_:
        parts["norm"] = mint.sqrt(mint.sum(mint.square(data)))
    if back is not None:
        for op in ("mean", "norm"):
            if op in parts:
                parts[op] = parts[op].astype(back).astype(wide)
    if "zeros" in ops_:
        parts["zeros"] = mint.sum(mint.lt(mint.abs(data), eps).astype(wide))
    if "nans" in ops_:
        parts["nans"] = mint.sum(mint.isnan(data).astype(wide))
    if "infs" in ops_:
        parts["infs"] = mint.sum(mint.isinf(data).astype(wide))
    return ops.stack([parts[op].astype(ms.float32) if wide == ms.float64 else parts[op] for op in ops_])


def host_values(vectors: list, numels: list, ops_: tuple) -> np.ndarray:
    """host_vector results -> float64 [tensors, len(ops_)], zeros as a fraction."""
    return _fractions(np.stack(vectors) if vectors else np.zeros((0, len(ops_))), numels, ops_)


def device_values(vectors: list, numels: list, ops_: tuple) -> np.ndarray:
    """device_vector results -> float64 [tensors, len(ops_)] in one transfer to the host, zeros as a fraction."""
    if not vectors:
        return np.zeros((0, len(ops_)))
    return _fractions(ops.stack(vectors).asnumpy().astype(np.float64), numels, ops_)


def _fractions(values: np.ndarray, numels: list, ops_: tuple) -> np.ndarray:
    if "zeros" in ops_ and len(values):
        column = ops_.index("zeros")
        values[:, column] = values[:, column] / np.maximum(np.asarray(numels, dtype=np.float64), 1.0)
    return values


def host_norm(tensors: list) -> np.ndarray:
    """The global L2 norm of tensors on the CPU, reduced in float64: a 0-d float32 array."""
    total = 0.0
    for tensor in tensors:
        wide = tensor.asnumpy().astype(np.float64).reshape(-1)
        total += float(np.add.reduce(np.multiply(wide, wide, out=wide)))
    return np.asarray(np.sqrt(total), dtype=np.float32)


def device_norm(tensors: list) -> Tensor:
    """The global L2 norm of tensors by ops on their device: a 0-d float32 tensor."""
    squares = [mint.sum(mint.square(t.astype(ms.float32))) for t in tensors]
    return mint.sqrt(mint.sum(ops.stack(squares)) if len(squares) > 1 else squares[0])


def host_update_ratio(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """dw / max(|w before|, |w after|) of a parameter on the CPU, in float32 (its norm is the update ratio)."""
    old = before.astype(np.float32)
    new = after.astype(np.float32)
    scale = max(float(np.sqrt(np.add.reduce(np.square(old, dtype=np.float64), axis=None))),
                float(np.sqrt(np.add.reduce(np.square(new, dtype=np.float64), axis=None))), _TINY)
    return ((new - old) / np.float32(scale)).astype(np.float32)


def device_update_ratio(before: Tensor, after: Tensor) -> Tensor:
    """The same by ops on the parameter's device."""
    old, new = before.astype(ms.float32), after.astype(ms.float32)
    scale = mint.maximum(mint.sqrt(mint.sum(mint.square(old))), mint.sqrt(mint.sum(mint.square(new))))
    return mint.div(mint.sub(new, old), mint.maximum(scale, Tensor(_TINY, ms.float32)))


def is_float(tensor) -> bool:
    return isinstance(tensor, Tensor) and is_float_dtype(tensor.dtype)
