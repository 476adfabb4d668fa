"""Real-data metrics against hand computation, including every edge case of spec §4.5."""

from __future__ import annotations

import math

import numpy as np
import pytest

from msprobe.compare import tensor_metrics as tm
from msprobe.compare.tensor_metrics import compare_arrays


def cells(target, golden):
    return compare_arrays(np.asarray(target), np.asarray(golden)).cells


def test_hand_computed_float32():
    cosine, euc, max_abs, max_rel, one, five = cells(np.float32([1, 2, 3, 4]), np.float32([1, 2, 3, 5]))
    assert cosine == round(34 / math.sqrt(30 * 39), 12)   # 1+4+9+20 / sqrt(30 * 39)
    assert euc == 1.0
    assert max_abs == 1.0
    assert max_rel == round(float(np.float32(1) / np.float32(5)), 12)  # |4 - 5| / 5 in float32
    assert one == 0.75 and five == 0.75


def test_thousandth_ratios_are_strictly_below_threshold():
    golden = np.float64([1000, 1000, 1000, 1000])
    target = golden + np.float64([0.5, 1.0, 4.0, 6.0])   # relative 0.0005, 0.001, 0.004, 0.006
    _, _, _, _, one, five = cells(target, golden)
    assert one == 0.25    # only 0.0005 < 0.001 (0.001 itself is not below)
    assert five == 0.75


def test_cosine_rounded_to_six_decimals_above_0_9999():
    target = np.float64([1.0, 2.0, 3.0])
    golden = np.float64([1.0, 2.0, 3.0001])
    exact = float(target @ golden / (np.linalg.norm(target) * np.linalg.norm(golden)))
    assert exact > 0.9999
    assert cells(target, golden)[0] == round(exact, 6)


def test_relative_error_uses_float32_for_float32_inputs():
    target = np.float32([1.0000001, 2.0])
    golden = np.float32([1.0, 2.0])
    max_rel = cells(target, golden)[3]
    expected = float(np.abs((target - golden) / golden).max())  # computed in float32
    assert max_rel == round(expected, 12)


def test_zero_golden_gets_machine_epsilon_on_both_sides():
    max_rel = cells(np.float32([0.0, 1.0]), np.float32([0.0, 1.0]))[3]
    assert max_rel == 0.0
    eps = float(np.finfo(np.float32).eps)
    max_rel = cells(np.float32([1e-3, 1.0]), np.float32([0.0, 1.0]))[3]
    expected = float(np.float32(abs((np.float32(1e-3) + np.float32(eps) - np.float32(eps)) / np.float32(eps))))
    assert max_rel == pytest.approx(expected, rel=1e-6)


def test_all_zero_sides():
    assert cells(np.zeros(4), np.zeros(4))[0] == 1.0
    result = compare_arrays(np.zeros(4), np.ones(4))
    assert result.cells[0] == "Nan" and tm.MSG_NPU_ZERO in result.notes
    result = compare_arrays(np.ones(4), np.zeros(4))
    assert result.cells[0] == "Nan" and tm.MSG_BENCH_ZERO in result.notes


def test_nan_and_inf_at_the_same_positions_are_ignored():
    target = np.float64([1.0, np.nan, np.inf, 2.0])
    golden = np.float64([1.0, np.nan, -np.inf, 4.0])   # the sign of an Inf is not compared
    cosine, euc, max_abs, max_rel, one, five = cells(target, golden)
    assert euc == 2.0 and max_abs == 2.0 and max_rel == 0.5
    assert one == 0.75   # three zeroed/equal positions of four
    assert cosine == round((1 + 8) / math.sqrt(5 * 17), 12)


def test_nan_positions_that_differ_give_na():
    result = compare_arrays(np.float64([1.0, np.nan]), np.float64([np.nan, 1.0]))
    assert result.cells == ("N/A",) * 6
    assert result.problem == "nan_position"


def test_shape_mismatch_and_squeeze():
    result = compare_arrays(np.zeros((2, 3)), np.zeros((3, 2)))
    assert result.cells == ("shape unmatched",) * 6 and result.problem == "shape"
    # size-1 dimensions are squeezed away on both sides before shapes are compared
    assert compare_arrays(np.ones((1, 3, 1)), np.ones((3,))).cells[0] == 1.0


def test_empty_tensor():
    result = compare_arrays(np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32))
    assert result.cells == ("unsupported",) * 6 and tm.MSG_EMPTY in result.notes


def test_zero_d_and_single_element():
    for target, golden in ((np.float32(3.0), np.float32(2.0)), (np.float32([[3.0]]), np.float32([2.0]))):
        result = compare_arrays(np.asarray(target), np.asarray(golden))
        assert result.cells == ("unsupported", "unsupported", 1.0, 0.5, "unsupported", "unsupported")
        assert tm.MSG_ZERO_D in result.notes


def test_zero_d_nan_is_reported_not_skipped():
    result = compare_arrays(np.float64(np.nan), np.float64(1.0))
    assert result.cells[2] == "Nan" and result.cells[3] == "Nan"


def test_bool_and_integer_tensors_compare_as_numbers():
    cosine, euc, max_abs, max_rel, one, five = cells(np.array([True, False, True]), np.array([True, True, True]))
    assert max_abs == 1.0 and euc == 1.0 and one == round(2 / 3, 12)
    assert cosine == round(2 / math.sqrt(2 * 3), 12)
    cosine, euc, max_abs, max_rel, _, _ = cells(np.int64([10, 20]), np.int64([10, 25]))
    assert max_abs == 5.0 and max_rel == 0.2


def test_float16_relative_error_in_float32():
    result = compare_arrays(np.float16([1.0, 2.0]), np.float16([1.0, 2.0]))
    assert result.cells == (1.0, 0.0, 0.0, 0.0, 1.0, 1.0)


def test_dtype_difference_is_noted_but_computed():
    result = compare_arrays(np.float32([1, 2]), np.float64([1, 2]))
    assert result.cells[0] == 1.0 and tm.MSG_DTYPE in result.notes


def test_chunked_streaming_equals_one_shot(monkeypatch):
    rng = np.random.default_rng(0)
    golden = rng.standard_normal(10_001).astype(np.float32)
    target = golden + rng.standard_normal(10_001).astype(np.float32) * 1e-3
    golden[17] = 0.0
    target[[5, 9000]] = np.nan
    golden[[5, 9000]] = np.nan
    one_shot = compare_arrays(target, golden).cells
    monkeypatch.setattr(tm, "CHUNK", 1000)
    chunked = compare_arrays(target, golden).cells
    for a, b in zip(one_shot, chunked):
        assert b == pytest.approx(a, rel=1e-9)


def test_memory_mapped_input_is_not_modified(tmp_path):
    path = tmp_path / "a.npy"
    np.save(path, np.float32([1.0, np.nan, 0.0]))
    before = path.read_bytes()
    array = np.load(path, mmap_mode="r")
    compare_arrays(array, np.float32([1.0, np.nan, 1.0]))
    assert path.read_bytes() == before
