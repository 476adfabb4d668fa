"""Argument records of dump.json for MindSpore values: tensors are read to the host once (`asnumpy`) and measured
there in float64, so no device kernel is needed; dtypes are named as MindSpore prints them (`Float32`,
`BFloat16`, ...)."""

from __future__ import annotations

import numpy as np
from mindspore import Tensor
from mindspore.common import dtype as mstype

from msprobe.dump.reader import json_number
from msprobe.mindspore._interim import array_crc32, array_stats, builtin_record

MAX_DEPTH = 64


def host_array(tensor) -> np.ndarray:
    """The tensor's values on the host, in its own dtype (bfloat16 through ml_dtypes)."""
    return np.asarray(tensor.asnumpy())


def saved_array(array: np.ndarray) -> np.ndarray:
    """What a .npy file and the CRC-32 hold: bfloat16 (not a numpy dtype) widened to float32 exactly, as the
    reference saves and hashes it."""
    return array.astype(np.float32) if array.dtype.name == "bfloat16" else array


def tensor_statistics(array: np.ndarray) -> dict:
    """Max/Min/Mean/Norm computed in float64 and written at the precision the reference writes them: that of the
    tensor's dtype for floating-point tensors of 32 bits or fewer, float32 for the Mean and Norm of integer
    tensors (their Max and Min stay exact)."""
    stats = array_stats(array)
    kind = array.dtype.kind
    if kind == "f" or array.dtype.name == "bfloat16":
        if array.dtype.itemsize <= 4:
            return {k: _rounded(v, array.dtype) for k, v in stats.items()}
    elif kind in "iu":
        stats["Mean"] = _rounded(stats["Mean"], np.float32)
        stats["Norm"] = _rounded(stats["Norm"], np.float32)
    return stats


def _rounded(value, dtype):
    if isinstance(value, float):
        return json_number(float(np.asarray(value, dtype=dtype).astype(np.float64)))
    return value


def tensor_record(tensor, summary_mode: str, saver=None, data_name: str | None = None) -> dict:
    array = host_array(tensor)
    record = {"type": "mindspore.Tensor", "dtype": str(tensor.dtype), "shape": list(tensor.shape)}
    record.update(tensor_statistics(array))
    if summary_mode == "md5" or saver is not None:
        array = saved_array(array)
    if summary_mode == "md5":
        record["md5"] = array_crc32(array)
    if saver is not None and data_name is not None:
        saver(data_name, array)
        record["data_name"] = data_name
    return record


def value_record(value):
    """Record of a non-tensor leaf, or None when the value is not recorded."""
    found = builtin_record(value)
    if found is not None:
        return found
    if isinstance(value, mstype.Type):
        return {"type": "mindspore.dtype", "value": str(value)}
    if isinstance(value, np.generic):
        return {"type": type(value).__name__, "value": value.item()}
    return None


class Recorder:
    """Turns arguments, outputs and gradients into records; in the tensor task also saves every tensor as
    `<prefix>.npy` through `saver(data_name, array)`."""

    def __init__(self, summary_mode: str, saver=None):
        self.summary_mode = summary_mode
        self.saver = saver

    def record(self, value, prefix: str, depth: int = 0):
        if isinstance(value, Tensor):
            name = f"{prefix}.npy" if self.saver is not None else None
            return tensor_record(value, self.summary_mode, self.saver, name)
        if depth >= MAX_DEPTH:
            return None
        if isinstance(value, (list, tuple)):
            return [self.record(v, f"{prefix}.{i}", depth + 1) for i, v in enumerate(value)]
        if isinstance(value, dict):
            return {str(k): self.record(v, f"{prefix}.{k}", depth + 1) for k, v in value.items()}
        if isinstance(value, np.ndarray):
            record = {"type": "numpy.ndarray", "dtype": str(value.dtype), "shape": list(value.shape)}
            if value.dtype.kind not in "USOV":
                record.update(array_stats(value))
            return record
        return value_record(value)
