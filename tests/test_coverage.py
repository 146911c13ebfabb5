"""Every interval the platform prints covers what it claims (docs/measuring.md).

A speed figure is a median over units with the distribution-free interval of a median: checked by
simulation on skewed, heavy-tailed and two-humped per-unit values from 2 to 64 units (no interval
below `MIN_UNITS`, at least 95% coverage within simulation error from there on), and at its exact
level, computed here from the binomial law of the order statistics SciPy picks. An acceptance figure
(a ratio of sums over prompts) carries a standard error and no interval: `benchmarks/coverage.py`
shows the intervals it would otherwise get covering 85-94%.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from scipy import stats

from speculab.algorithms import get_verifier
from speculab.engine import decode
from speculab.results.figures import acceptance_by_depth, per_round
from speculab.stats import CONFIDENCE, MEDIAN, MIN_UNITS, median_estimate, ratio_estimate
from support.engine import TOY_PROMPTS, settings, toy_roles

TRIALS = 400
SLACK = 3 * math.sqrt(CONFIDENCE * (1 - CONFIDENCE) / TRIALS)  # three standard errors of a simulated coverage
Draw = Callable[[np.random.Generator, int], np.ndarray]
# per-unit speedups as the simulation drew them, and two harder shapes; each with its true median
SHAPES: dict[str, tuple[Draw, float]] = {
    "lognormal, sigma 0.3": (lambda rng, n: rng.lognormal(0.0, 0.3, n), 1.0),
    "1 + 0.1 t(3)": (lambda rng, n: 1 + 0.1 * rng.standard_t(3, n), 1.0),
    "exponential": (lambda rng, n: rng.exponential(1.0, n), math.log(2)),
    "two humps (70% at 0.8, 30% at 1.5)": (
        lambda rng, n: np.where(rng.random(n) < 0.7, rng.normal(0.8, 0.05, n), rng.normal(1.5, 0.05, n)),
        float(stats.norm.ppf(0.5 / 0.7, 0.8, 0.05)),  # the 50% point lies in the first hump
    ),
}


def coverage(draw: Draw, truth: float, n: int, seed: int) -> tuple[float, int]:
    """(share of TRIALS intervals holding the true median, how many trials had an interval)."""
    rng = np.random.default_rng(seed)
    held = given = 0
    for _ in range(TRIALS):
        found = median_estimate([[float(v)] for v in draw(rng, n)])
        given += found.has_interval
        held += found.has_interval and found.low <= truth <= found.high
    return held / TRIALS, given


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 8, 16, 32, 64])
def test_a_speed_interval_covers_the_median_or_is_not_given(shape: str, n: int) -> None:
    draw, truth = SHAPES[shape]
    covered, given = coverage(draw, truth, n, seed=n)
    if n < MIN_UNITS:
        assert given == 0  # no honest 95% interval of a median exists over so few units
    else:
        assert given == TRIALS and covered >= CONFIDENCE - SLACK, (shape, n, covered)


@pytest.mark.parametrize("n", [6, 7, 9, 12, 20, 40, 64])
def test_the_order_statistics_chosen_have_an_exact_level_of_at_least_95(n: int) -> None:
    """The interval runs from the k-th smallest to the k-th largest unit; it misses the median only
    when fewer than k units fall on one side, with probability 2 P(Binomial(n, 1/2) < k)."""
    values = [[float(v)] for v in range(1, n + 1)]  # the ranks themselves
    found = median_estimate(values)
    k = int(found.low)
    assert found.high == n + 1 - k and found.method == MEDIAN
    assert 1 - 2 * stats.binom.cdf(k - 1, n, 0.5) >= CONFIDENCE
    assert 1 - 2 * stats.binom.cdf(k, n, 0.5) < CONFIDENCE  # and the narrowest that reaches it


def test_the_fewest_units_with_an_interval() -> None:
    assert MIN_UNITS == 6  # [min, max] of 5 units misses the median with probability 2/32 > 5%
    assert not median_estimate([[1.0], [2.0], [3.0], [4.0], [5.0]]).has_interval
    assert median_estimate([[float(v)] for v in range(6)]).has_interval


def test_acceptance_figures_carry_a_standard_error_and_no_interval() -> None:
    target, drafter = toy_roles(3)
    run = decode(target, drafter, get_verifier("token"), TOY_PROMPTS * 4, settings(T=1.0, K=1, L=3, max_new=20))
    by_depth = acceptance_by_depth(run)
    ratios = [
        per_round(run, lambda p: len(p.tokens)),
        *(by_depth[f"{s}_{j}"] for s in ("alpha", "overlap") for j in (1, 2)),
    ]
    assert all(e.has_se and not e.has_interval and e.n == len(TOY_PROMPTS) * 4 for e in ratios)
    assert not any(e.has_interval for e in by_depth.values())
    found = ratio_estimate([4, 6, 8], [2, 2, 4])  # R = 18/8; residuals -0.5, 1.5, -1
    assert found.se == pytest.approx(math.sqrt(3.5 / 6) / (8 / 3)) and not found.has_interval
