"""Statistics-mode diff and relative-error texts (spec §4.4), case by case."""

from __future__ import annotations

import math

import pytest

from msprobe.compare.stats import stat_diff

INF = math.inf
NAN = math.nan


@pytest.mark.parametrize("target, golden, diff, rel", [
    (2.5, 2.0, "0.5", "25.0%"),
    (1.5, -2.0, "3.5", "175.0%"),
    (60, 59, "1.0", "1.694915254237288%"),   # integers: as floats, as the reference writes them (issue 28)
    (60, 60, "0", "0"),
    (3.0, 0.0, "3.0", "inf"),                # golden 0 -> inf
    (1, 1.0, "0", "0"),                      # an integer and the float of the same value are equal
    (None, None, "0", "0"),                  # equal texts
    (NAN, 1.0, "Nan", "Nan"),
    (1.0, NAN, "Nan", "Nan"),
    (NAN, NAN, "0", "0"),                    # texts "Nan" == "Nan"
    (INF, 1.0, "inf", "inf"),
    (INF, -INF, "inf", "inf"),
    (-INF, 1.0, "-inf", "-inf"),
    (-INF, INF, "-inf", "-inf"),
    (1.0, INF, "-inf", "-inf"),
    (1.0, -INF, "inf", "inf"),
    (INF, INF, "0", "0"),
    (1.0, "N/A", "N/A", "N/A"),
    ("npu:0", "npu:1", "N/A", "N/A"),        # two devices
    ("npu:0", 1.0, "Diff", "Diff"),
    (True, False, "Diff", "Diff"),           # booleans are not numbers
    ("True", "False", "Diff", "Diff"),
    ("abc", "abd", "Diff", "Diff"),
    (None, 1.0, "Diff", "Diff"),
    ("...", "...", "0", "0"),
])
def test_stat_diff_cases(target, golden, diff, rel):
    diffs, rels, _ = stat_diff([target], [golden])
    assert (diffs[0], rels[0]) == (diff, rel)


def test_relative_fraction_for_rules():
    _, _, fractions = stat_diff([2.5, 1.0, 3.0, None, 1.0], [2.0, 1.0, 0.0, 1.0, "N/A"])
    assert fractions[0] == pytest.approx(0.25)
    assert fractions[1] == 0.0
    assert fractions[2] == INF
    assert math.isnan(fractions[3]) and math.isnan(fractions[4])


def test_diff_is_float_repr_of_the_difference():
    diffs, rels, _ = stat_diff([2.96875], [2.9653379917144775])
    assert diffs == [repr(2.96875 - 2.9653379917144775)]
    assert rels == [f"{abs((2.96875 - 2.9653379917144775) / 2.9653379917144775 * 100)!r}%"]


def test_huge_integers_stay_exact():
    diffs, _, _ = stat_diff([2 ** 62 + 1, 2 ** 62], [2 ** 62, 2 ** 62])
    assert diffs == ["1.0", "0"]


@pytest.mark.parametrize("big", [10 ** 400, -(10 ** 400)], ids=["1e400", "-1e400"])
def test_integers_beyond_the_float_range_are_infinities(big):
    """A JSON integer beyond the float range (1 followed by 400 zeros) is an infinity, not an OverflowError."""
    diffs, rels, fractions = stat_diff([big, 1.0, big], [1.0, big, big])
    sign = "" if big > 0 else "-"
    other = "-" if big > 0 else ""
    assert diffs == [f"{sign}inf", f"{other}inf", "0"] and rels[:2] == diffs[:2]


def test_statistics_rounding_of_two_collectors():
    """Issue 32: across collectors, a tensor whose Max/Min are equal and whose Mean and Norm differ by a few float32
    units (4 + log2(n) of them, plus one of its dtype) is the same tensor; a larger difference, another Max or
    another dtype is not."""
    import numpy as np

    from msprobe.compare.stats import statistics_rounding

    def stats(*rows):
        return [np.array(column, dtype=np.float64) for column in zip(*rows)]

    one = 2.0 ** -23
    golden = stats((2.0, -1.0, 0.5, 6.3927364), (2.0, -1.0, 0.5, 6.3927364), (2.0, -1.0, 0.5, 6.3927364),
                   (2.0, -1.0, 0.5, 6.3927364), (2.0, -1.0, 0.5, 6.3927364))
    target = stats((2.0, -1.0, 0.5 + 3 * one, 6.3927360),      # a few units: the same tensor
                   (2.0, -1.0, 0.5, 6.3927364 * (1 + 1e-4)),      # a real difference
                   (2.0000002, -1.0, 0.5, 6.3927360),              # another Max
                   (2.0, -1.0, 0.5, 6.3927360),                    # another dtype
                   (2.0, -1.0, 0.5, 6.3927360))                    # shape unknown
    dtypes = (["Float32", "Float32", "Float32", "Float16", "Float32"],
              ["torch.float32", "torch.float32", "torch.float32", "torch.float32", "torch.float32"])
    shapes = (["[4, 16]"] * 5, ["[4, 16]"] * 4 + ["?"])
    (t_max, t_min, t_mean, t_norm), g = statistics_rounding((target, golden), dtypes, shapes)
    assert t_mean[0] == 0.5 and t_norm[0] == golden[3][0]
    assert list(t_norm[1:] == golden[3][1:]) == [False] * 4
    assert all(x is y for x, y in zip(g, golden))      # the golden is untouched
