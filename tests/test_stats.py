"""`speculab.stats`: every figure an `Estimate`, its spread found one way per kind, written one way."""

from __future__ import annotations

import math

import pytest

from speculab.stats import MEDIAN, RATIO, STANDARD_ERROR, Estimate, mean_estimate, median_estimate, ratio_estimate


def test_the_median_of_unit_medians_with_the_interval_of_a_median() -> None:
    values = [[1.0, 1.2, 5.0], [2.0, 2.1, 1.9], [3.0, 3.0, 3.3], [4.0, 0.1, 4.1], [5.0, 5.0, 5.0], [6.0]]
    found = median_estimate(values)  # unit medians 1.2, 2.0, 3.0, 4.0, 5.0, 6.0
    assert found.value == 3.5 and found.n == 6 and found.method == MEDIAN
    assert (found.low, found.high) == (1.2, 6.0)  # six units: only [min, max] reaches 95% (1 - 2/64)


def test_below_six_units_a_median_has_no_interval() -> None:
    found = median_estimate([[1.0, 2.0, 3.0, 4.0, 9.0]])  # one unit: its repetitions are not units
    assert found.value == 3.0 and found.n == 1 and not found.has_interval and found.method == ""
    assert not median_estimate([[1.0], [2.0], [3.0], [4.0], [5.0]]).has_interval


def test_ratio_estimate_by_hand() -> None:
    # R = 18/8; residuals -0.5, 1.5, -1; se = sqrt(3.5 / 6) / (8/3)
    found = ratio_estimate([4, 6, 8], [2, 2, 4])
    assert found.value == 18 / 8 and found.n == 3 and found.method == RATIO and not found.has_interval
    assert found.se == pytest.approx(math.sqrt(3.5 / 6) / (8 / 3))
    assert ratio_estimate([3, 6], [1, 2]).se == 0.0  # one ratio everywhere: no spread
    assert not ratio_estimate([3], [1]).has_se and math.isnan(ratio_estimate([0, 0], [0, 0]).value)


def test_the_mean_with_its_standard_error() -> None:
    found = mean_estimate([1.0, 2.0, 3.0, 4.0])
    assert found.value == 2.5 and found.se == pytest.approx(math.sqrt(5 / 3) / 2) and found.method == STANDARD_ERROR
    assert math.isnan(mean_estimate([1.0]).se) and math.isnan(mean_estimate([]).value)


def test_one_formatter_for_every_figure() -> None:
    assert f"{Estimate(0.83361, 0.82934, 0.83789)}" == "0.8336 [0.8293, 0.8379]"
    assert f"{Estimate(1.25, se=0.0312):+.3f}" == "+1.250 ± 0.031"  # a sign on the value only
    assert f"{Estimate(2.0):.2f}" == "2.00" and f"{Estimate(math.nan, 1.0, 2.0)}" == "n/a"
    assert Estimate(2.0, se=0.5).bar() == (1.5, 2.5) and Estimate(2.0, 1.0, 4.0).bar() == (1.0, 4.0)
    assert Estimate(0.95, se=0.1).bar(0.0, 1.0) == (0.85, 1.0) and Estimate(3.0).bar() == (3.0, 3.0)
    assert Estimate(2.0, 1.0, 3.0).cells("x") == {"x": 2.0, "x low": 1.0, "x high": 3.0}
