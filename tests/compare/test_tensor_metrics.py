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


# ---- the streaming kernel against the definitions, computed here in one shot ----------------------------------

def definition(target: np.ndarray, golden: np.ndarray) -> dict:
    """The six metrics by their definitions (spec §4.5), one shot over whole arrays: float64 sums taken exactly
    (math.fsum), the relative error in the relative-error dtype with epsilon on both sides where the golden value
    is 0, NaN/Inf at equal positions left out (set to 0)."""
    t, g = np.squeeze(target).reshape(-1), np.squeeze(golden).reshape(-1)
    rel_dtype = np.result_type(t.dtype, g.dtype, np.float32)
    rel_dtype = rel_dtype if rel_dtype.kind == "f" else np.dtype(np.float64)
    t64, g64 = t.astype(np.float64), g.astype(np.float64)
    finite_t, finite_g = np.isfinite(t64), np.isfinite(g64)
    t64[~finite_t], g64[~finite_g] = 0.0, 0.0
    t_rel = np.where(finite_t, t.astype(rel_dtype), 0).astype(rel_dtype)
    g_rel = np.where(finite_g, g.astype(rel_dtype), 0).astype(rel_dtype)
    eps = rel_dtype.type(np.finfo(rel_dtype).eps)
    zero = g_rel == 0
    t_rel, g_rel = np.where(zero, t_rel + eps, t_rel), np.where(zero, g_rel + eps, g_rel)
    with np.errstate(all="ignore"):
        relative = np.abs((t_rel - g_rel) / g_rel)
    diff = t64 - g64
    return {"dot": math.fsum(t64 * g64), "tt": math.fsum(t64 * t64), "gg": math.fsum(g64 * g64),
            "euc": math.sqrt(math.fsum(diff * diff)), "max_abs": float(np.abs(diff).max()),
            "max_rel": float(relative.max()), "one": int(np.count_nonzero(relative < 0.001)),
            "five": int(np.count_nonzero(relative < 0.005)), "n": t.size}


def assert_definition(result_cells, target, golden):
    d = definition(target, golden)
    cosine, euc, max_abs, max_rel, one, five = result_cells
    if d["tt"] == 0 or d["gg"] == 0:
        assert cosine == (1.0 if d["tt"] == d["gg"] else "Nan")
    else:
        expected = d["dot"] / math.sqrt(d["tt"] * d["gg"])
        assert abs(cosine - (round(expected, 6) if expected > 0.9999 else expected)) <= 1e-9
    assert euc == pytest.approx(d["euc"], rel=1e-12, abs=1e-300)
    assert max_abs == round(d["max_abs"], 12)          # single IEEE operations: exact
    assert max_rel == round(d["max_rel"], 12)
    assert one == round(d["one"] / d["n"], 12) and five == round(d["five"] / d["n"], 12)


def pairs(rng):
    """Pairs of odd sizes and every dtype combination the compare meets, with zeros and equal NaN/Inf."""
    out = []
    for size in (2, 3, 7, 31, 1000, 4099):
        golden = rng.standard_normal(size)
        golden[:: 5] = 0.0
        target = golden * (1 + rng.standard_normal(size) * 3e-3) + (rng.random(size) < 0.1) * 1e-7
        if size > 7:
            target[3] = golden[3] = np.nan
            target[5], golden[5] = np.inf, -np.inf
        out += [(target.astype(np.float32), golden.astype(np.float32)), (target, golden),
                (target.astype(np.float16), golden.astype(np.float16)), (target.astype(np.float32), golden),
                (target.astype(np.float16), golden.astype(np.float32))]
        ints = (rng.integers(-50, 50, size), rng.integers(-50, 50, size))
        out += [(ints[0], ints[1]), (ints[0].astype(np.int32), ints[1]), (ints[0] > 0, ints[1] > 0),
                (ints[0].astype(np.uint8), ints[1].astype(np.uint8)),
                (ints[0] > 0, np.nan_to_num(golden, posinf=1.0, neginf=-1.0).astype(np.float32))]
    return out


@pytest.mark.parametrize("chunk", [tm.CHUNK, 7, 64])
def test_streamed_metrics_follow_the_definitions(monkeypatch, chunk):
    monkeypatch.setattr(tm, "CHUNK", chunk)
    for target, golden in pairs(np.random.default_rng(1)):
        assert_definition(compare_arrays(target, golden).cells, target, golden)


def test_non_contiguous_and_odd_shaped_inputs():
    rng = np.random.default_rng(2)
    base_t = rng.standard_normal((6, 5, 7)).astype(np.float32)
    base_g = (base_t * 1.001).astype(np.float32)
    for target, golden in ((base_t.T, base_g.T), (base_t[:, ::2, 1:], base_g[:, ::2, 1:]),
                           (base_t[::-1, 1], base_g[::-1, 1]), (base_t.reshape(1, 210, 1), base_g.reshape(210))):
        result = compare_arrays(target, golden).cells
        assert_definition(result, target, golden)
        assert result == compare_arrays(np.ascontiguousarray(target), np.ascontiguousarray(golden)).cells


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns of float32 values (rounded to nearest even), as a .pt file holds them."""
    bits = np.asarray(values, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return bits.astype(np.uint16)


def test_bfloat16_bits_compare_as_their_float32_values(monkeypatch):
    from msprobe.dump.tensors import TensorData, bfloat16_to_float32

    monkeypatch.setattr(tm, "CHUNK", 64)
    rng = np.random.default_rng(3)
    golden = rng.standard_normal(1001).astype(np.float32)
    golden[[0, 500]] = 0.0
    golden[7] = np.nan
    bits = bf16_bits(golden * 1.002)
    bits[7] = 0x7FC0                      # a bfloat16 NaN where the golden is NaN
    widened = bfloat16_to_float32(bits)
    assert widened.dtype == np.float32 and np.isnan(widened[7])
    assert np.array_equal(widened[:7], (bits[:7].astype(np.uint32) << 16).view(np.float32))
    for target, golden_side in ((TensorData(bits, True), golden), (TensorData(bits, True), TensorData(bits, True)),
                                (golden, TensorData(bits, True)), (TensorData(bits.reshape(7, 11, 13), True),
                                                                   golden.reshape(7, 11, 13))):
        plain = [x.widened() if isinstance(x, TensorData) else x for x in (target, golden_side)]
        result = compare_arrays(target, golden_side)
        assert result.cells == compare_arrays(*plain).cells and result.notes == compare_arrays(*plain).notes
        assert_definition(result.cells, *plain)
    scalar = compare_arrays(TensorData(bits[1:2].reshape(()), True), golden[1:2].reshape(()))
    assert scalar.cells[2] == round(abs(float(widened[1]) - float(golden[1])), 12)


def test_nan_positions_that_differ_in_a_later_chunk(monkeypatch):
    monkeypatch.setattr(tm, "CHUNK", 5)
    target, golden = np.arange(1.0, 23.0), np.arange(1.0, 23.0)
    target[17] = np.nan
    result = compare_arrays(target, golden)
    assert result.problem == "nan_position" and result.cells == ("N/A",) * 6


def test_threads_share_nothing():
    """The per-thread work arrays: pairs of different dtypes compared in parallel give the serial results."""
    from concurrent.futures import ThreadPoolExecutor

    work = pairs(np.random.default_rng(4)) * 3
    serial = [compare_arrays(t, g).cells for t, g in work]
    with ThreadPoolExecutor(4) as pool:
        parallel = list(pool.map(lambda pair: compare_arrays(*pair).cells, work))
    assert parallel == serial


@pytest.mark.parametrize("chunk", [tm.CHUNK, 16])
def test_bit_identical_chunks_follow_the_definitions(monkeypatch, chunk):
    """Tensors both runs share (all chunks identical), and tensors identical for their first chunks only: the same
    cells as the full computation gives them, and (where finite) the definitions."""
    from msprobe.dump.tensors import TensorData

    monkeypatch.setattr(tm, "CHUNK", chunk)
    rng = np.random.default_rng(5)
    golden = rng.standard_normal(101)
    golden[::7] = 0.0
    golden[50] = -0.0
    with_nan = golden.copy()
    with_nan[[30, 90]] = np.nan, np.inf
    tail_differs = golden.copy()
    tail_differs[95:] *= 1.01
    cases = []
    with np.errstate(all="ignore"):
        for base in (golden, with_nan, tail_differs, np.zeros(40), np.full(40, 1e200)):
            for dtype in (np.float64, np.float32, np.float16):
                other = golden if base is tail_differs else base
                cases.append((base.astype(dtype), other.astype(dtype)))
    ints = rng.integers(-9, 9, 77)
    cases += [(target, target.copy()) for target in (ints, ints.astype(np.int8), ints > 0, ints.astype(np.uint8))]
    bits = bf16_bits(golden.astype(np.float32))
    cases.append((TensorData(bits, True), TensorData(bits.copy(), True)))
    shortcut = [compare_arrays(target, same).cells for target, same in cases]
    monkeypatch.setattr(tm._Accumulator, "_same", lambda *args: False)
    for (target, same), cells in zip(cases, shortcut):
        assert cells == compare_arrays(target, same).cells
        plain = [x.widened() if isinstance(x, TensorData) else x for x in (target, same)]
        with np.errstate(all="ignore"):
            finite = np.isfinite(np.dot(plain[0].astype(float), plain[0].astype(float)))
        if finite:
            assert_definition(cells, *plain)
