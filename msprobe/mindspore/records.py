"""Argument records of dump.json for MindSpore values: tensors are read to the host once (`asnumpy`) and measured
there in float64, so no device kernel is needed; dtypes are named as MindSpore prints them (`Float32`,
`BFloat16`, ...)."""

from __future__ import annotations

import numpy as np
from mindspore import Tensor
from mindspore.common import dtype as mstype

from msprobe.mindspore._interim import array_crc32, array_stats, builtin_record

MAX_DEPTH = 64


def host_array(tensor) -> np.ndarray:
    """The tensor's values on the host; bfloat16 (which numpy<2 has only through ml_dtypes) becomes float32,
    exactly, as the reference saves and hashes it."""
    if tensor.dtype == mstype.bfloat16:
        tensor = tensor.float()
    return np.asarray(tensor.asnumpy())


def tensor_record(tensor, summary_mode: str, saver=None, data_name: str | None = None) -> dict:
    array = host_array(tensor)
    record = {"type": "mindspore.Tensor", "dtype": str(tensor.dtype), "shape": list(tensor.shape)}
    record.update(array_stats(array))
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
