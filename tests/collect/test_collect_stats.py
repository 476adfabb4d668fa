"""Statistics of host arrays and records of plain values (msprobe.collect.stats), checked against hand computation."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

from msprobe.collect.guard import ErrorLog, one_line
from msprobe.collect.stats import array_crc32, array_statistics, value_record, written_statistics
from msprobe.dump.reader import json_number


def test_float_statistics_are_float64_reductions():
    array = np.array([[1.5, -2.0], [0.25, 4.0]], dtype=np.float32)
    assert array_statistics(array) == {"Max": 4.0, "Min": -2.0, "Mean": 0.9375,
                                       "Norm": math.sqrt(1.5 ** 2 + 4 + 0.0625 + 16)}
    # float64 accumulation: a float32 sum of 1 + 1e-8 * many would lose them
    tiny = np.full(10_000, 1e-8, dtype=np.float32)
    tiny[0] = 1.0
    assert abs(array_statistics(tiny)["Mean"] - (1.0 + 9_999 * float(np.float32(1e-8))) / 10_000) < 1e-15


def test_written_statistics_are_float64_reductions_rounded_once_to_the_dtype():
    # the issue's case: a float32 sum of squares (another summation order) moved the Norm of the same x by an ulp
    rng = np.random.default_rng(5)
    x = rng.standard_normal(4097).astype(np.float32)
    exact = math.sqrt(math.fsum(float(v) ** 2 for v in x))
    mean = math.fsum(float(v) for v in x) / x.size
    stats = written_statistics(x)
    assert stats["Norm"] == float(np.float32(exact)) and stats["Mean"] == float(np.float32(mean))
    assert stats["Max"] == float(x.max()) and stats["Min"] == float(x.min())
    # the order of the elements (a vector width, a thread count, another framework's kernel) changes nothing
    assert written_statistics(x[::-1].copy()) == stats and written_statistics(x.reshape(17, 241).T.copy()) == stats
    half = x.astype(np.float16)
    assert written_statistics(half)["Norm"] == float(np.float16(math.sqrt(math.fsum(float(v) ** 2 for v in half))))
    assert written_statistics(np.array([3, 4], dtype=np.int32)) == {"Max": 4, "Min": 3, "Mean": 3.5, "Norm": 5.0}
    assert written_statistics(np.float32(2.5)) == {"Max": 2.5, "Min": 2.5, "Mean": 2.5, "Norm": 2.5}
    wide = np.array([0.1, 0.2])
    assert written_statistics(wide)["Norm"] == math.sqrt(0.01 + 0.04000000000000001)   # float64: not rounded


def test_integers_bool_complex_empty_and_non_finite():
    assert array_statistics(np.array([3, -7, 2**40], dtype=np.int64)) == {
        "Max": 2**40, "Min": -7, "Mean": (2**40 - 4) / 3, "Norm": math.sqrt(9 + 49 + 2.0**80)}
    assert array_statistics(np.array([2**64 - 1, 0], dtype=np.uint64))["Max"] == 2**64 - 1     # exact
    assert array_statistics(np.array([True, False])) == {"Max": True, "Min": False, "Mean": None, "Norm": None}
    assert array_statistics(np.array([3 + 4j, 0j]))["Max"] == 5.0
    assert array_statistics(np.zeros((0, 3))) == {"Max": None, "Min": None, "Mean": None, "Norm": None}
    stats = array_statistics(np.array([1.0, np.inf]))
    assert stats["Max"] == json_number(math.inf) and stats["Mean"] == json_number(math.inf)
    assert array_statistics(np.array([np.nan, 1.0]))["Min"] == json_number(math.nan)
    assert array_statistics(np.float16(2.5)) == {"Max": 2.5, "Min": 2.5, "Mean": 2.5, "Norm": 2.5}


def test_crc32_of_the_bytes_in_row_major_order():
    array = np.arange(12, dtype=np.int32).reshape(3, 4)
    assert array_crc32(array.T) == format(zlib.crc32(np.ascontiguousarray(array.T).tobytes()), "08x")
    assert array_crc32(np.zeros(0)) == "00000000"


def test_plain_value_records():
    assert value_record(True) == {"type": "bool", "value": True}
    assert value_record(2**70) == {"type": "int", "value": 2**70}
    assert value_record(float("-inf")) == {"type": "float", "value": json_number(-math.inf)}
    assert value_record("a/b") == {"type": "str", "value": "a/b"}
    assert value_record(...) == {"type": "ellipsis", "value": "..."}
    assert value_record(slice(1, None, 2)) == {"type": "slice", "value": [1, None, 2]}
    assert value_record(None) is None and value_record(object()) is None


def test_errors_are_logged_once_per_kind_with_a_one_line_reason(msprobe_records):
    errors = ErrorLog()
    long = RuntimeError("first line\n" + "dispatcher detail\n" * 100)
    assert one_line(long) == "RuntimeError: first line"
    assert len(one_line(ValueError("x" * 1000))) == 300
    for name in ("A.0.forward", "A.1.forward"):
        assert errors.failed("output", name, long) == "output: RuntimeError: first line"
    errors.failed("input", "A.2.forward", long)
    messages = [r.getMessage() for r in msprobe_records]
    assert len(messages) == 2 and "A.0.forward" in messages[0] and "A.2.forward" in messages[1]
    assert all("dispatcher" not in m for m in messages)
    errors.failed("output", "Module.heads.\x1b]0;owned\x07.forward.0", ValueError("key \x1b[2J"))   # names are data
    assert msprobe_records[-1].getMessage().count("\\x1b") == 2 and "\x1b" not in msprobe_records[-1].getMessage()


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int8, np.uint16, np.int32])
def test_every_numeric_numpy_dtype(dtype):
    stats = array_statistics(np.arange(1, 5, dtype=dtype))
    assert (stats["Max"], stats["Min"], stats["Mean"]) == (4, 1, 2.5) and abs(stats["Norm"] - math.sqrt(30)) < 1e-12
