"""Argument records of dump.json: tensor statistics, CRC-32, non-tensor values (spec compare.md §2.5)."""

from __future__ import annotations

import zlib

import torch

from msprobe.dump.flatten import crc32_text
from msprobe.dump.reader import json_number

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _number(value: torch.Tensor, dtype=None):
    """0-d tensor -> Python number; low-precision statistics are rounded back to the tensor's dtype."""
    if dtype is not None and value.dtype != dtype:
        value = value.to(dtype)
    number = value.item()
    return json_number(number) if isinstance(number, float) else number


def tensor_stats(t: torch.Tensor) -> dict:
    """Max/Min/Mean/Norm the way the reference records them."""
    if t.numel() == 0 or t.is_meta:
        return {"Max": None, "Min": None, "Mean": None, "Norm": None}
    if t.dtype == torch.bool:
        return {"Max": bool(t.any().item()), "Min": bool(t.all().item()), "Mean": None, "Norm": None}
    if t.is_complex():
        t = t.abs()
    if t.dim() == 0:          # the value itself for every statistic, integer or float (as the reference)
        value = t.item()
        value = json_number(value) if isinstance(value, float) else value
        return {"Max": value, "Min": value, "Mean": value, "Norm": value}
    if not t.is_floating_point():
        low, high = torch.aminmax(t)
        return {"Max": high.item(), "Min": low.item(), "Mean": None, "Norm": None}
    data = t.float() if t.dtype in _LOW_PRECISION else t
    back = t.dtype if t.dtype in _LOW_PRECISION else None
    low, high = torch.aminmax(data)   # one pass for both
    return {"Max": _number(high, back), "Min": _number(low, back),
            "Mean": _number(data.mean(), back), "Norm": _number(torch.linalg.vector_norm(data), back)}


def tensor_crc32(t: torch.Tensor) -> str:
    """CRC-32 of the tensor's bytes in row-major order, 8 lower-case hex digits."""
    data = t.detach().cpu().contiguous().reshape(-1)
    if data.numel() == 0:
        return crc32_text("")
    raw = data.view(torch.uint8) if data.element_size() > 0 else data
    return format(zlib.crc32(raw.numpy().tobytes()), "08x")


def tensor_record(t: torch.Tensor, summary_mode: str = "statistics") -> dict:
    requires_grad = bool(t.requires_grad)
    t = t.detach()
    record = {"type": "torch.Tensor", "dtype": str(t.dtype), "shape": list(t.shape)}
    record.update(tensor_stats(t))
    record["requires_grad"] = requires_grad
    if summary_mode == "md5":
        record["md5"] = tensor_crc32(t)
    return record


def value_record(value):
    """Record of a non-tensor leaf, or None when the value is not recorded."""
    if isinstance(value, bool):
        return {"type": "bool", "value": value}
    if isinstance(value, int):
        return {"type": "int", "value": value}
    if isinstance(value, float):
        return {"type": "float", "value": json_number(value)}
    if isinstance(value, str):
        return {"type": "str", "value": value}
    if value is Ellipsis:
        return {"type": "ellipsis", "value": "..."}
    if isinstance(value, slice):
        parts = [value.start, value.stop, value.step]
        return {"type": "slice", "value": [p if isinstance(p, int) else None for p in parts]}
    if isinstance(value, torch.dtype):
        return {"type": "torch.dtype", "value": str(value)}
    if isinstance(value, torch.device):
        return {"type": "torch.device", "value": str(value)}
    if isinstance(value, torch.memory_format):
        return {"type": "torch.memory_format", "format": str(value).split(".")[-1]}
    return _distributed_record(value)


def _distributed_record(value):
    if not torch.distributed.is_available():
        return None
    import torch.distributed as dist

    if isinstance(value, dist.ReduceOp) or type(value).__name__ == "RedOpType":
        return {"type": "torch.distributed.ReduceOp", "value": str(value)}
    if isinstance(value, dist.ProcessGroup):
        try:
            ranks = dist.get_process_group_ranks(value)
        except Exception:  # noqa: BLE001 - a group of another backend; record what is known
            ranks = []
        return {"type": "torch.ProcessGroup", "group_ranks": ranks, "group_id": crc32_text(str(ranks))}
    return None
