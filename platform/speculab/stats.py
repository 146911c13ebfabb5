"""Estimates: a figure with how sure we are of it, and the methods that give one.

Every figure a point reports is an `Estimate`: its value and, where the data allows an honest one,
its CONFIDENCE interval, or else its standard error (a spread that claims no coverage), the number
of units it is over and the method behind the spread. An estimate is built once, where it is
measured, and every renderer (the console, MLflow, the sweep's table and plots, the report) shows it
through the one formatter, `format(estimate, spec)`.

- A speed figure is a median over units, and its interval is the distribution-free one of a median
  (order statistics): it covers the population median with probability at least CONFIDENCE whatever
  the distribution of the units' values, and exists from MIN_UNITS units on (6 at 95%); below, the
  figure has none. `tests/test_coverage.py` checks the coverage by simulation, and the exact level.
- A ratio of sums over prompts (block efficiency, acceptance by depth) carries the ratio estimator's
  standard error: no interval, because the usual ones (Student t on the linearised ratio, the
  bootstrap) cover 75-96% from 4 to 64 prompts, under 95% in most cells up to 32, when prompts differ
  as much as code and prose do
  (`benchmarks/coverage.py`, benchmarks/RESULTS.md).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from scipy import stats

CONFIDENCE = 0.95
# How a spread was found (`Estimate.method`): docs/measuring.md says what each one estimates.
MEDIAN = "distribution-free interval of the median over units (order statistics)"
RATIO = "standard error of the ratio estimator over prompts (linearised)"
STANDARD_ERROR = "standard error of the mean over sequence-rounds"


@dataclass(frozen=True)
class Estimate:
    """A figure: its value, the ends of its CONFIDENCE interval (NaN: none) or its standard error
    (NaN: none), the units it is over (0: one measurement) and how the interval was found."""

    value: float
    low: float = math.nan
    high: float = math.nan
    n: int = 0
    method: str = ""
    se: float = math.nan

    @property
    def has_interval(self) -> bool:
        return not (math.isnan(self.low) or math.isnan(self.high))

    @property
    def has_se(self) -> bool:
        return not math.isnan(self.se)

    def bar(self, least: float = -math.inf, most: float = math.inf) -> tuple[float, float]:
        """(low, high) of an error bar: its interval's ends, else one standard error either side, else
        the value itself; kept within [least, most], the figure's possible values (one standard error
        over few prompts can reach past them)."""
        low, high = (self.low, self.high) if self.has_interval else (self.value - self.se, self.value + self.se)
        if not (self.has_interval or self.has_se):
            low = high = self.value
        return max(low, least), min(high, most)

    def cells(self, name: str, digits: int = 4) -> dict[str, float]:
        """The estimate as a table's numbers, the one way a CSV writes one: `name`, then `name low` and
        `name high` where it has an interval, `name se` where it has a standard error."""
        cells = {name: round(self.value, digits)}
        if self.has_interval:
            cells |= {f"{name} low": round(self.low, digits), f"{name} high": round(self.high, digits)}
        if self.has_se:
            cells[f"{name} se"] = round(self.se, digits)
        return cells

    def __format__(self, spec: str) -> str:
        """The one way a figure is written: `0.8336 [0.8293, 0.8379]` with an interval, `1.25 ± 0.03` with a
        standard error, `n/a` for NaN; `spec` formats each number (a `+` sign only the value)."""
        spec = spec or ".4g"
        if math.isnan(self.value):
            return "n/a"
        bare = spec.replace("+", "")
        if self.has_interval:
            return f"{self.value:{spec}} [{self.low:{bare}}, {self.high:{bare}}]"
        if self.has_se:
            return f"{self.value:{spec}} ± {self.se:{bare}}"
        return f"{self.value:{spec}}"


def min_units(confidence: float = CONFIDENCE) -> int:
    """The fewest units whose median has an interval at ``confidence``: the widest one, [min, max], misses
    the median only when every unit falls on one side of it, with probability 2 / 2^n."""
    n = 1
    while 1 - 2 * 0.5**n < confidence:
        n += 1
    return n


MIN_UNITS = min_units()


def median_estimate(values: list[list[float]]) -> Estimate:
    """The median over units of each unit's median over repetitions ([unit][repetition]), with the
    distribution-free CONFIDENCE interval of a median over units (order statistics, SciPy's
    `quantile_test`); none below MIN_UNITS units."""
    per_unit = [statistics.median(unit) for unit in values]
    value = statistics.median(per_unit)
    if len(per_unit) < MIN_UNITS:
        return Estimate(value, n=len(per_unit))
    found = stats.quantile_test(per_unit, q=value, p=0.5).confidence_interval(CONFIDENCE)
    return Estimate(value, float(found.low), float(found.high), len(per_unit), MEDIAN)


def ratio_estimate(numerators: list[float], denominators: list[float]) -> Estimate:
    """sum(numerators) / sum(denominators) over prompts (block efficiency, acceptance by depth) with the
    ratio estimator's linearised standard error over prompts (none below two), NaN where the
    denominators are all 0 (nothing to count)."""
    n, total = len(numerators), sum(denominators)
    if total <= 0:
        return Estimate(math.nan, n=n)
    ratio = sum(numerators) / total
    if n < 2:
        return Estimate(ratio, n=n)
    residuals = sum((y - ratio * x) ** 2 for y, x in zip(numerators, denominators))
    se = math.sqrt(residuals / ((n - 1) * n)) / (total / n)
    return Estimate(ratio, n=n, method=RATIO, se=se)


def mean_estimate(values: list[float]) -> Estimate:
    """The mean over units and its standard error (none below two units)."""
    n = len(values)
    if n == 0:
        return Estimate(math.nan)
    mean = sum(values) / n
    se = statistics.stdev(values) / math.sqrt(n) if n > 1 else math.nan
    return Estimate(mean, n=n, method=STANDARD_ERROR if n > 1 else "", se=se)
