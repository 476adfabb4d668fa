"""The MindSpore acc_check judgement of one output (msprobe.acc_check.mindspore.compare), numpy only."""

from __future__ import annotations

import numpy as np

from msprobe.acc_check.mindspore.compare import Value, compare_values


def test_a_cast_is_judged_by_its_target_dtypes_rounding():
    """Issue 32: Tensor.to(float16) of values near 1 is off the float64 benchmark by up to 2**-11 (4.9e-4), its
    exact rounding: no error; one unit more than that rounding is."""
    rng = np.random.default_rng(3)
    bench = rng.uniform(0.5, 2.0, 1000)
    cast = bench.astype(np.float16).astype(np.float64)
    tested = Value(cast, "Float16")
    assert np.max(np.abs(bench - cast)) > 1e-4
    assert compare_values(Value(bench, "Float64"), tested).status == "error"             # MaxAbsErr 1e-4
    row = compare_values(Value(bench, "Float64"), tested, cast_to="float16")
    assert row.status == "pass" and row.message == "" and row.metrics["MaxAbsErr"] > 1e-4
    wrong = cast.copy()
    wrong[7] = bench[7] * (1 + 3 * 2.0 ** -10)       # three units of float16 off: not a rounding
    row = compare_values(Value(bench, "Float64"), Value(wrong, "Float16"), cast_to="float16")
    assert row.status == "error" and "cast to float16" in row.message
    tiny = np.array([1e-9, -3e-8, 0.0])               # below float16's subnormals: flushed to 0 (or the smallest)
    assert compare_values(Value(tiny, "Float64"), Value(tiny.astype(np.float16).astype(np.float64), "Float16"),
                          cast_to="float16").status == "pass"
