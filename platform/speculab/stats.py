"""Estimates: a figure with how sure we are of it, and the methods that give one.

Every figure a point reports is an `Estimate`: its value and, where the data allows one, its
CONFIDENCE interval (or, for a paired difference, its standard error), the number of units it
is over and the method that gave the interval. An estimate is built once, where it is measured,
and every renderer (the console, MLflow, the sweep's table and plots, the report) shows it
through the one formatter, `format(estimate, spec)`.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
RESAMPLES = 2000
# How an interval was found (`Estimate.method`): docs/measuring.md says what each one estimates.
BOOTSTRAP = "percentile bootstrap of the median over units"
RATIO = "ratio estimator over prompts (Student t)"
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


def median_estimate(values: list[list[float]], seed: int = 0) -> Estimate:
    """The median over units of each unit's median over repetitions ([unit][repetition]), with a
    percentile bootstrap interval over units; with one unit its repetitions are the resampled sample
    (no interval when that is one value too)."""
    per_unit = [statistics.median(unit) for unit in values]
    sample = per_unit if len(per_unit) > 1 else values[0]
    value = statistics.median(per_unit)
    if len(sample) < 2:
        return Estimate(value, n=len(per_unit))
    if min(sample) == max(sample):
        return Estimate(value, sample[0], sample[0], len(sample), BOOTSTRAP)
    result = stats.bootstrap(
        (np.asarray(sample),),
        np.median,
        confidence_level=CONFIDENCE,
        n_resamples=RESAMPLES,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    low, high = result.confidence_interval
    return Estimate(value, float(low), float(high), len(sample), BOOTSTRAP)


def ratio_estimate(numerators: list[float], denominators: list[float], share: bool = False) -> Estimate:
    """sum(numerators) / sum(denominators) over prompts (block efficiency, acceptance by depth), with
    the ratio estimator's CONFIDENCE interval (its linearised standard error, Student t with n - 1
    degrees of freedom), clipped to [0, 1] for a ``share``; no interval below two prompts, NaN where
    the denominators are all 0 (nothing to count)."""
    n, total = len(numerators), sum(denominators)
    if total <= 0:
        return Estimate(math.nan, n=n)
    ratio = sum(numerators) / total
    if n < 2:
        return Estimate(ratio, n=n)
    residuals = sum((y - ratio * x) ** 2 for y, x in zip(numerators, denominators))
    se = math.sqrt(residuals / ((n - 1) * n)) / (total / n)
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1) * se)
    low, high = ratio - half, ratio + half
    if share:
        low, high = max(low, 0.0), min(high, 1.0)
    return Estimate(ratio, low, high, n, RATIO)


def mean_estimate(values: list[float]) -> Estimate:
    """The mean over units and its standard error (none below two units)."""
    n = len(values)
    if n == 0:
        return Estimate(math.nan)
    mean = sum(values) / n
    se = statistics.stdev(values) / math.sqrt(n) if n > 1 else math.nan
    return Estimate(mean, n=n, method=STANDARD_ERROR if n > 1 else "", se=se)
