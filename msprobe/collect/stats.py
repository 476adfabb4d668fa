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


def array_stat_vector(array, ops: tuple, eps: float = 1e-8, wide_limit: int = 8192) -> np.ndarray:
    """The training monitor's statistics of a tensor's values on the host: one float64 vector in the order of `ops`
    (a subset of msprobe.monitor.records.OPS). `min` and `max` exact; `mean` and `norm` reduced in float64 up to
    `wide_limit` elements (the PyTorch monitor's limit, msprobe.pytorch.stats.MONITOR_WIDE_LIMIT), in float32 with
    numpy's pairwise sums beyond (a few units of float32 rounding), and rounded once to the array's dtype
    (written_statistics' convention; integers and booleans as numbers, complex as magnitudes, a 0-d array: its
    value, `norm` its magnitude); `zeros` the count of elements whose magnitude is below `eps` (the monitor turns it
    into a fraction), `nans` and `infs` the counts of NaN and infinite elements. An empty array gives NaN
    everywhere."""
    a = np.asarray(array)
    if a.size == 0:
        return np.full(len(ops), np.nan)
    if np.iscomplexobj(a):
        a = np.abs(a)
    kind = a.dtype.kind
    back = a.dtype if (kind == "f" or a.dtype.name == "bfloat16") and a.dtype.itemsize <= 4 else None
    if kind == "b" or kind in "iu":
        data = a.astype(np.float64)
    elif a.dtype.itemsize < 4 or kind != "f":          # float16, ml_dtypes' bfloat16: their float32 values
        data = a.astype(np.float32)
    else:
        data = a
    data = data.reshape(-1)
    low, high = data.min(), data.max()                  # exact: NaN propagates
    parts = {"min": float(low), "max": float(high)}
    if "mean" in ops or "norm" in ops:
        wide = data.astype(np.float64) if data.size <= wide_limit else np.array(data)
        total = float(np.add.reduce(wide))
        np.multiply(wide, wide, out=wide)
        mean_norm = np.array([total / data.size, np.sqrt(float(np.add.reduce(wide)))])
        if back is not None:
            mean_norm = mean_norm.astype(back).astype(np.float64)
        parts["mean"], parts["norm"] = float(mean_norm[0]), float(mean_norm[1])
    if "zeros" in ops:
        parts["zeros"] = float(np.count_nonzero((data < eps) & (data > -eps)))
    if "nans" in ops or "infs" in ops:
        if np.isfinite(low) and np.isfinite(high):
            parts["nans"] = parts["infs"] = 0.0
        else:
            parts["nans"] = float(np.count_nonzero(np.isnan(data)))
            parts["infs"] = float(np.count_nonzero(np.isinf(data)))
    return np.array([parts[op] for op in ops], dtype=np.float64)
