"""`speculab.stats`: every figure an `Estimate`, its interval found one way per kind, written one way."""

from __future__ import annotations

import math

import pytest

from speculab.stats import BOOTSTRAP, RATIO, STANDARD_ERROR, Estimate, mean_estimate, median_estimate, ratio_estimate


def test_the_median_of_unit_medians_with_a_bootstrap_interval_over_units() -> None:
    values = [[1.0, 1.2, 5.0], [2.0, 2.1, 1.9], [3.0, 3.0, 3.3], [4.0, 0.1, 4.1], [5.0, 5.0, 5.0]]
    found = median_estimate(values)
    assert found.value == 3.0 and found.n == 5 and found.method == BOOTSTRAP  # unit medians 1.2, 2.0, 3.0, 4.0, 5.0
    assert 1.2 <= found.low < found.value < found.high <= 5.0
    assert median_estimate(values) == found  # seeded: the same interval every time


def test_one_unit_resamples_its_repetitions_and_one_sample_has_no_interval() -> None:
    found = median_estimate([[1.0, 2.0, 3.0, 4.0, 9.0]])
    assert found.value == 3.0 and 1.0 <= found.low < 3.0 < found.high <= 9.0
    single = median_estimate([[1.5]])
    assert single.value == 1.5 and not single.has_interval and single.method == ""
    assert median_estimate([[2.0], [2.0]]) == median_estimate([[2.0, 2.0]])


def test_ratio_estimate_by_hand() -> None:
    # R = 18/8; residuals -0.5, 1.5, -1; se = sqrt(3.5 / 6) / (8/3); t(0.975, 2) = 4.3027
    found = ratio_estimate([4, 6, 8], [2, 2, 4])
    half = 4.3027 * math.sqrt(3.5 / 6) / (8 / 3)
    assert found.value == 18 / 8 and found.n == 3 and found.method == RATIO
    assert (found.low, found.high) == pytest.approx((18 / 8 - half, 18 / 8 + half), rel=1e-4)
    assert ratio_estimate([3, 6], [1, 2]).low == ratio_estimate([3, 6], [1, 2]).high == 3.0  # no spread
    assert not ratio_estimate([3], [1]).has_interval and math.isnan(ratio_estimate([0, 0], [0, 0]).value)
    share = ratio_estimate([1, 2, 0], [1, 2, 3], share=True)
    assert share.low >= 0.0 and share.high <= 1.0  # a share's interval stays in [0, 1]


def test_the_mean_with_its_standard_error() -> None:
    found = mean_estimate([1.0, 2.0, 3.0, 4.0])
    assert found.value == 2.5 and found.se == pytest.approx(math.sqrt(5 / 3) / 2) and found.method == STANDARD_ERROR
    assert math.isnan(mean_estimate([1.0]).se) and math.isnan(mean_estimate([]).value)


def test_one_formatter_for_every_figure() -> None:
    assert f"{Estimate(0.83361, 0.82934, 0.83789)}" == "0.8336 [0.8293, 0.8379]"
    assert f"{Estimate(1.25, se=0.0312):+.3f}" == "+1.250 ± 0.031"  # a sign on the value only
    assert f"{Estimate(2.0):.2f}" == "2.00" and f"{Estimate(math.nan, 1.0, 2.0)}" == "n/a"
