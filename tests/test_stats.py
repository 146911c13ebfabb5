"""`speculab.stats`: every figure an `Estimate`, its spread found one way per kind, written one way."""

from __future__ import annotations

import math

import numpy as np
import pytest

from speculab.stats import (
    BOOTSTRAP_T,
    MEDIAN,
    MIN_CLUSTERS,
    RATIO,
    Estimate,
    Totals,
    log_ratio,
    median_estimate,
    ratio_of_totals,
    ratio_text,
)


def test_the_median_of_unit_medians_with_the_interval_of_a_median() -> None:
    values = [[1.0, 1.2, 5.0], [2.0, 2.1, 1.9], [3.0, 3.0, 3.3], [4.0, 0.1, 4.1], [5.0, 5.0, 5.0], [6.0]]
    found = median_estimate(values)  # unit medians 1.2, 2.0, 3.0, 4.0, 5.0, 6.0
    assert found.value == 3.5 and found.n == 6 and found.method == MEDIAN
    assert (found.low, found.high) == (1.2, 6.0)  # six units: only [min, max] reaches 95% (1 - 2/64)


def test_below_six_units_a_median_has_no_interval() -> None:
    found = median_estimate([[1.0, 2.0, 3.0, 4.0, 9.0]])  # one unit: its repetitions are not units
    assert found.value == 3.0 and found.n == 1 and not found.has_interval and found.method == ""
    assert not median_estimate([[1.0], [2.0], [3.0], [4.0], [5.0]]).has_interval


def test_a_ratio_of_totals_and_its_standard_error_by_hand() -> None:
    # R = 18/8; residuals y - R x: -0.5, 1.5, -1; the ratio estimator's se = sqrt(3.5 / 6) / (8/3)
    found = ratio_of_totals(Totals.of((1, [4, 6, 8]), (-1, [2, 2, 4])), se_below=True)
    assert found.value == 18 / 8 and found.n == 3 and found.method == RATIO and not found.has_interval
    assert found.se == pytest.approx(math.sqrt(3.5 / 6) / (8 / 3))
    speed = ratio_of_totals(Totals.of((1, [4, 6, 8]), (-1, [2, 2, 4])))  # a speed below 8 units: the value alone
    assert speed.value == 18 / 8 and not speed.has_se and not speed.has_interval
    assert ratio_of_totals(Totals.of((1, [3, 6]), (-1, [1, 2])), se_below=True).se == 0.0  # one ratio: no spread
    assert math.isnan(ratio_of_totals(Totals.of((1, [0, 0]), (-1, [0, 0]))).value)
    assert ratio_of_totals(Totals.of((1, [0, 0]), (-1, [1, 2]))).value == 0.0


def test_the_linearised_variance_is_the_delta_methods_for_any_product_of_totals() -> None:
    """log of (sum a / sum b) / (sum c / sum d): its influence per unit is a_u/A - b_u/B - c_u/C + d_u/D."""
    rng = np.random.default_rng(3)
    a, b, c, d = rng.uniform(1, 4, (4, 12))
    found = log_ratio(Totals.of((1, a), (-1, b), (-1, c), (1, d)))
    influence = a / a.sum() - b / b.sum() - c / c.sum() + d / d.sum()
    influence -= influence.mean()
    assert found.se == pytest.approx(math.sqrt(12 / 11 * (influence**2).sum()))
    assert found.value == pytest.approx(a.sum() / b.sum() / (c.sum() / d.sum()))


def test_an_interval_from_twelve_units_the_same_for_the_same_sums() -> None:
    rng = np.random.default_rng(4)
    tokens, seconds = rng.uniform(10, 60, 12), rng.uniform(1, 3, 12)
    found = ratio_of_totals(Totals.of((1, tokens), (-1, seconds)))
    assert found.has_interval and found.method == BOOTSTRAP_T and found.n == MIN_CLUSTERS == 12
    assert found.low < found.value < found.high
    assert found == ratio_of_totals(Totals.of((1, tokens), (-1, seconds)))  # seeded: reproducible
    assert not ratio_of_totals(Totals.of((1, tokens[:11]), (-1, seconds[:11]))).has_interval


def test_the_test_and_its_interval_agree_on_one_at_every_level() -> None:
    """`bounds(c)` excludes 1 exactly where the two-sided p-value is under 1 - c; the one-sided p-value is
    half the two-sided one on the ratio's side of 1."""
    rng = np.random.default_rng(5)
    for shift in (1.0, 1.05, 1.1, 1.2, 1.4):
        fast, slow = rng.uniform(1, 2, 16), rng.uniform(1, 2, 16)
        found = log_ratio(Totals.of((1, fast * shift), (-1, slow)), resamples=0)
        for confidence in (0.9, 0.95, 0.99, 0.9999):
            low, high = found.bounds(confidence)
            assert (found.p_value() < 1 - confidence) == (not low <= 1 <= high), (shift, confidence)
        assert found.p_value("greater") == pytest.approx(
            found.p_value() / 2 if found.log > 0 else 1 - found.p_value() / 2
        )
    assert math.isnan(log_ratio(Totals.of((1, [1.0, 2.0]), (-1, [2.0, 1.0]))).p_value())  # too few units


def test_a_unit_that_holds_most_of_the_totals_leaves_few_degrees_of_freedom() -> None:
    """Kish's effective units: units that weigh alike count as themselves (U - 1 degrees of freedom), one
    unit ten times the rest as far fewer, so its interval and test widen where the bootstrap does not."""
    rng = np.random.default_rng(7)
    alike = Totals.of((1, np.full(12, 30.0)), (-1, rng.uniform(1, 2, 12)))
    assert log_ratio(alike).df == pytest.approx(11, rel=0.05)
    tokens = np.full(12, 30.0)
    tokens[0] = 300.0
    dominated = log_ratio(Totals.of((1, tokens), (-1, tokens / rng.uniform(10, 20, 12))))
    assert dominated.df < 4
    interval = dominated.interval()
    assert interval is not None  # widened, not dropped: the resamples still bound it
    low, high = interval
    assert high / low > math.exp(2 * 2.2 * dominated.se)  # wider than a t interval at 11 degrees of freedom


def test_unpaired_groups_add_their_variances() -> None:
    rng = np.random.default_rng(6)
    a, b = Totals.of((1, rng.uniform(1, 2, 10))), Totals.of((-1, rng.uniform(1, 2, 12)))
    both = log_ratio(a, b)
    assert both.log == pytest.approx(log_ratio(a).log + log_ratio(b).log)
    assert both.se == pytest.approx(math.hypot(log_ratio(a).se, log_ratio(b).se)) and both.n == 10


def test_one_formatter_for_every_figure() -> None:
    assert f"{Estimate(0.83361, 0.82934, 0.83789)}" == "0.8336 [0.8293, 0.8379]"
    assert f"{Estimate(1.25, se=0.0312):+.3f}" == "+1.250 ± 0.031"  # a sign on the value only
    assert f"{Estimate(2.0):.2f}" == "2.00" and f"{Estimate(math.nan, 1.0, 2.0)}" == "n/a"
    assert Estimate(2.0, se=0.5).bar() == (1.5, 2.5) and Estimate(2.0, 1.0, 4.0).bar() == (1.0, 4.0)
    assert Estimate(0.95, se=0.1).bar(0.0, 1.0) == (0.85, 1.0) and Estimate(3.0).bar() == (3.0, 3.0)
    assert Estimate(2.0, 1.0, 3.0).cells("x") == {"x": 2.0, "x low": 1.0, "x high": 3.0}


def test_a_ratio_keeps_its_side_of_one_visible() -> None:
    assert ratio_text(Estimate(1.09, 1.001, 1.24)) == "1.09 [1.001, 1.24]"  # not [1, 1.24] beside "faster"
    assert ratio_text(Estimate(0.95, 0.9, 0.9996)) == "0.95 [0.9, 0.9996]"
    assert ratio_text(Estimate(2.5, 2.1, 3.3)) == "2.5 [2.1, 3.3]" and ratio_text(Estimate(1.0004)) == "1.0004"


def test_a_figure_the_units_cannot_bound_has_no_interval_and_says_so() -> None:
    """Twelve prompts where only one reached a depth: most resamples hold no spread (their t* infinite),
    so there is no interval, rather than [0, inf] or a falsely narrow one, and the figure says so."""
    reached = Totals.of((1, [1] + [0] * 11), (-1, [2] + [1] * 11))
    found = ratio_of_totals(reached, se_below=True, most=1.0)
    assert found.unbounded and not found.has_interval and f"{found:.3g}" == "0.0769 (no interval)"
    rng = np.random.default_rng(8)
    spread = log_ratio(Totals.of((1, rng.uniform(1, 2, 12)), (-1, rng.uniform(1, 2, 12))))
    assert np.isinf(spread.t).sum() == 0 and spread.testable and spread.interval() is not None


def test_a_probabilitys_interval_stays_in_0_1() -> None:
    rng = np.random.default_rng(9)
    rounds = rng.integers(5, 9, 12).astype(float)
    accepted = rounds - (rng.random(12) < 0.2)  # nearly every round accepted: the interval reaches past 1
    found = ratio_of_totals(Totals.of((1, accepted), (-1, rounds)), se_below=True, most=1.0)
    unclipped = ratio_of_totals(Totals.of((1, accepted), (-1, rounds)), se_below=True)
    assert unclipped.high > 1 and found.high == 1.0 and found.low == unclipped.low


def test_estimates_without_an_interval_are_equal_and_hash_alike() -> None:
    assert Estimate(math.nan) == Estimate(float("nan")) and Estimate(1.0) == Estimate(1.0)
    assert Estimate(1.0, 0.5, 1.5) != Estimate(1.0) and hash(Estimate(math.nan)) == hash(Estimate(float("nan")))
