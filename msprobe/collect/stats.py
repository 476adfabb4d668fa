"""Records of dump.json that need no framework: statistics and CRC-32 of a numpy array, records of plain Python
values (spec compare.md §2.5)."""

from __future__ import annotations

import zlib

import numpy as np

from msprobe.dump.reader import json_number

NO_STATISTICS = {"Max": None, "Min": None, "Mean": None, "Norm": None}


def array_statistics(array) -> dict:
    """Max/Min/Mean/Norm of a numpy array (any shape; MindSpore computes them on the host this way):

    * floats (and any dtype numpy can cast to float64, such as ml_dtypes' bfloat16): reduced in float64;
    * integers: Max/Min exact (Python ints), Mean/Norm in float64;
    * bool: Max = any, Min = all, Mean/Norm None;
    * complex: the statistics of the magnitudes;
    * empty: all None. NaN propagates to every statistic; non-finite values are the dump format's tokens."""
    a = np.asarray(array)
    if a.size == 0:
        return dict(NO_STATISTICS)
    if a.dtype == np.bool_:
        return {"Max": bool(a.any()), "Min": bool(a.all()), "Mean": None, "Norm": None}
    if np.iscomplexobj(a):
        a = np.abs(a)
    if a.dtype.kind in "iu":
        values = a.astype(np.float64)
        return {"Max": int(a.max()), "Min": int(a.min()), "Mean": json_number(float(values.mean())),
                "Norm": json_number(float(np.linalg.norm(values.reshape(-1))))}
    values = a.astype(np.float64, copy=False)
    return {"Max": json_number(float(values.max())), "Min": json_number(float(values.min())),
            "Mean": json_number(float(values.mean())), "Norm": json_number(float(np.linalg.norm(values.reshape(-1))))}


def written_statistics(array) -> dict:
    """The statistics a collector writes for a tensor's values on the host (every collector follows this one
    convention, so identical tensors give identical statistics whichever framework or vector width made the dump):
    reduced in float64 (array_statistics: the Norm is the square root of the sum of squares) and rounded once to
    the tensor's dtype for floating-point tensors of 32 bits or fewer; the Mean and Norm of an integer tensor
    rounded to float32 (Max and Min stay exact). A 0-d tensor's four statistics are its value."""
    array = np.asarray(array)
    if array.ndim == 0 and array.dtype != np.bool_ and array.dtype.kind != "c":
        value = array.item() if array.dtype.kind in "iu" else json_number(float(array.astype(np.float64)))
        return {"Max": value, "Min": value, "Mean": value, "Norm": value}
    stats = array_statistics(array)
    if array.dtype.kind == "f" or array.dtype.name == "bfloat16":
        if array.dtype.itemsize <= 4:
            return {k: rounded_to(v, array.dtype) for k, v in stats.items()}
    elif array.dtype.kind in "iu":
        stats["Mean"] = rounded_to(stats["Mean"], np.float32)
        stats["Norm"] = rounded_to(stats["Norm"], np.float32)
    return stats


def rounded_to(value, dtype):
    """A float statistic rounded (to nearest even) to a narrower floating dtype, written as a float64 number; any
    other value unchanged."""
    if isinstance(value, float):
        return json_number(float(np.asarray(value, dtype=dtype).astype(np.float64)))
    return value


def array_crc32(array) -> str:
    """CRC-32 of the array's bytes in row-major order, 8 lower-case hex digits."""
    data = np.ascontiguousarray(array).reshape(-1)
    return format(zlib.crc32(data.view(np.uint8)) if data.size else zlib.crc32(b""), "08x")


def value_record(value):
    """Record of a plain Python leaf, or None when it is not recorded (the leaf is written as null). An int beyond
    64 bits is written as its exact JSON number, as the reference writes it."""
    if isinstance(value, bool):
        return {"type": "bool", "value": value}
    if isinstance(value, int):
        return {"type": "int", "value": int(value)}
    if isinstance(value, float):
        return {"type": "float", "value": json_number(float(value))}
    if isinstance(value, str):
        return {"type": "str", "value": str(value)}
    if value is Ellipsis:
        return {"type": "ellipsis", "value": "..."}
    if isinstance(value, slice):
        parts = [value.start, value.stop, value.step]
        return {"type": "slice", "value": [p if isinstance(p, int) else None for p in parts]}
    return None
