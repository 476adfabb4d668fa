"""Argument records of dump.json for MindSpore values. A tensor is read to the host once (`asnumpy`) and measured
there in float64 (msprobe.collect.stats), so no device kernel is needed; its dtype is named as MindSpore prints it
(`Float32`, `BFloat16`, ...)."""

from __future__ import annotations

import numpy as np
from mindspore import Tensor
from mindspore.common import dtype as mstype

from msprobe.collect.stats import array_crc32, value_record, written_statistics
from msprobe.dump.reader import json_number

MAX_DEPTH = 64


def host_array(tensor) -> np.ndarray:
    """The tensor's values on the host, in its own dtype (bfloat16 through ml_dtypes)."""
    return np.asarray(tensor.asnumpy())


def dtype_name(dtype: np.dtype) -> str:
    """A numpy dtype as MindSpore prints the tensor dtype it comes from: Float32, UInt8, BFloat16, Bool."""
    name = np.dtype(dtype).name
    if name.startswith("uint"):
        return "UInt" + name[4:]
    if name.startswith("bfloat"):
        return "BFloat" + name[6:]
    return name[:1].upper() + name[1:]


def saved_array(array: np.ndarray) -> np.ndarray:
    """What a .npy file and the CRC-32 hold: bfloat16 (not a numpy dtype) widened to float32 exactly, as the
    reference saves and hashes it."""
    return array.astype(np.float32) if array.dtype.name == "bfloat16" else array


def ms_value_record(value):
    """Record of a non-tensor leaf (plain Python values, MindSpore dtypes, numpy scalars), or None."""
    found = value_record(value)
    if found is not None:
        return found
    if isinstance(value, mstype.Type):
        return {"type": "mindspore.dtype", "value": str(value)}
    if isinstance(value, np.generic):
        item = value.item()
        return {"type": type(value).__name__, "value": json_number(item) if isinstance(item, float) else item}
    return None


class Recorder:
    """Turns arguments, outputs and gradients into records. `save(name, array)` (task tensor) saves a tensor and
    returns its data_name; a failure there is reported by `failed(what, name, exc)` and marks the record."""

    def __init__(self, summary_mode: str, save=None, failed=None):
        self.summary_mode = summary_mode
        self.save = save
        self.failed = failed

    def tensor(self, tensor, name: str) -> dict:
        return self.array(host_array(tensor), str(tensor.dtype), name)

    def array(self, array: np.ndarray, dtype: str, name: str) -> dict:
        """The record of a MindSpore tensor of dtype `dtype` (as MindSpore prints it) whose values on the host are
        `array` (a graph-mode host callback hands the values alone)."""
        record = {"type": "mindspore.Tensor", "dtype": dtype, "shape": list(array.shape)}
        record.update(written_statistics(array))
        if self.summary_mode == "md5" or self.save is not None:
            array = saved_array(array)
        if self.summary_mode == "md5":
            record["md5"] = array_crc32(array)
        if self.save is not None:
            try:
                record["data_name"] = self.save(name, array)
            except Exception as exc:  # noqa: BLE001 - the user's training must go on
                record["dump_error"] = self.failed("tensor file", name, exc)
        return record

    def record(self, value, prefix: str, depth: int = 0):
        if isinstance(value, Tensor):
            return self.tensor(value, prefix)
        if depth >= MAX_DEPTH:
            return None
        if isinstance(value, (list, tuple)):
            return [self.record(v, f"{prefix}.{i}", depth + 1) for i, v in enumerate(value)]
        if isinstance(value, dict):
            return {str(k): self.record(v, f"{prefix}.{k}", depth + 1) for k, v in value.items()}
        if isinstance(value, np.ndarray):
            record = {"type": "numpy.ndarray", "dtype": str(value.dtype), "shape": list(value.shape)}
            if value.dtype.kind not in "USOV":
                record.update(written_statistics(value))
            return record
        return ms_value_record(value)
