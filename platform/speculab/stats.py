"""Estimates: a figure with how sure we are of it, and the methods that give one.

Every figure a point reports is an `Estimate`: its value and, where the data allows an honest one,
its CONFIDENCE interval, or else its standard error (a spread that claims no coverage), the number
of units it is over and the method behind the spread. An estimate is built once, where it is
measured, and every renderer (the console, MLflow, the sweep's table and plots, the report) shows it
through the one formatter, `format(estimate, spec)`.

- A ratio of totals (throughput: tokens over seconds; a speedup: one throughput over another; block
  efficiency and acceptance by depth: counts over sequence-rounds) is estimated as the ratio of its
  sums over units (`ratio_of_totals`), what the field reports. Its interval is a studentised bootstrap
  over units on the log scale (bootstrap-t: units are resampled whole, so what one unit's sums share,
  a long prompt's tokens and its seconds, stays together), never narrower than Student's t with the
  units' effective degrees of freedom (`LogRatio.df`): resamples keep drawing a unit that holds most of
  the totals, so the bootstrap alone cannot see how little a sample of one long and many short units
  says. It exists from MIN_CLUSTERS units on (12: below, simulated coverage of mixed prompts falls
  under 95%); below, the figure carries the ratio estimator's standard error where it is an
  acceptance figure, and nothing where it is a speed. A probability's interval stays in [0, 1]; where
  the data cannot bound a ratio at all (most resamples with no spread), it has no interval
  (`UNBOUNDED`).
- A test of a ratio of totals against 1 (`LogRatio.p_value`, the verdicts of
  `speculab.results.verdicts`) is Student's t on the same linearised standard error with the same
  effective degrees of freedom: its small p-values resolve at the levels a family of many tests
  needs, where the bootstrap's heavy tails at a few dozen units cannot (`LogRatio.bounds` is the
  interval that agrees with it at any level).
- A typical unit's speedup (`typical_speedup_vs_*`) is a median over units, and its interval is the
  distribution-free one of a median (order statistics): it covers the population median with
  probability at least CONFIDENCE whatever the distribution of the units' values, from MIN_UNITS units
  on (6 at 95%).
`tests/test_coverage.py` checks every interval's coverage by simulation, against its exact level.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import astuple, dataclass, field

import numpy as np

CONFIDENCE = 0.95
# How a spread was found (`Estimate.method`): docs/measuring.md says what each one estimates.
MEDIAN = "distribution-free interval of the median over units (order statistics)"
BOOTSTRAP_T = "bootstrap-t interval over units of a ratio of totals (log scale)"
RATIO = "standard error of the ratio estimator over units (linearised)"
UNBOUNDED = "no interval: the units cannot bound it"  # too few units reach the figure to resample a spread
MIN_CLUSTERS = 12  # units a ratio's interval and test need: from 12 on it covers mixed prompts (docs/measuring.md)
RESAMPLES = 1999  # bootstrap resamples of an interval
CHUNK = 1000  # resamples drawn at once: bounds the memory of a bootstrap over many units


def _same(a: object, b: object) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


@dataclass(frozen=True, eq=False)
class Estimate:
    """A figure: its value, the ends of its CONFIDENCE interval (NaN: none) or its standard error
    (NaN: none), the units it is over (0: one measurement) and how the interval was found."""

    value: float
    low: float = math.nan
    high: float = math.nan
    n: int = 0
    method: str = ""
    se: float = math.nan

    def __eq__(self, other: object) -> bool:
        """Field by field, NaN equal to NaN: "none" (no interval, no standard error) is a value here."""
        if not isinstance(other, Estimate):
            return NotImplemented
        return all(_same(a, b) for a, b in zip(astuple(self), astuple(other), strict=True))

    def __hash__(self) -> int:
        return hash(tuple("nan" if isinstance(v, float) and math.isnan(v) else v for v in astuple(self)))

    @property
    def has_interval(self) -> bool:
        return not (math.isnan(self.low) or math.isnan(self.high))

    @property
    def has_se(self) -> bool:
        return not math.isnan(self.se)

    @property
    def unbounded(self) -> bool:
        """Enough units for an interval, but too few of them reach the figure to bound it."""
        return self.method == UNBOUNDED

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
        if self.has_se:  # a spread of equal values is 0, not its rounding error (2.4 ± 3.6e-08)
            se = self.se if self.se > 1e-9 * abs(self.value) else 0.0
            return f"{self.value:{spec}} ± {se:{bare}}"
        if self.unbounded:
            return f"{self.value:{spec}} (no interval)"
        return f"{self.value:{spec}}"


def ratio_text(estimate: Estimate, digits: int = 3) -> str:
    """A ratio (a speedup, one point over another) written with `digits` significant digits, more where
    fewer would print an end of its interval (or its value) as 1 though it is not: a lower end of 1.001
    under a "faster" verdict reads 1.001, not 1."""
    ends = [estimate.value, *((estimate.low, estimate.high) if estimate.has_interval else ())]
    while digits < 6 and any(x != 1 and f"{x:.{digits}g}" == "1" for x in ends if not math.isnan(x)):
        digits += 1
    return f"{estimate:.{digits}g}"


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
    from scipy import stats  # 0.6 s of import on 2 cores: paid only where an interval is found

    found = stats.quantile_test(per_unit, q=value, p=0.5).confidence_interval(CONFIDENCE)
    return Estimate(value, float(found.low), float(found.high), len(per_unit), MEDIAN)


@dataclass(frozen=True)
class Totals:
    """Per-unit sums of what a ratio figure is made of, over one set of units: the figure is
    prod_k (sum_u values[k, u]) ** signs[k] (tokens over seconds: signs +1, -1)."""

    values: np.ndarray  # [k, U]
    signs: tuple[int, ...]  # [k]: +1 multiplies, -1 divides

    @classmethod
    def of(cls, *terms: tuple[int, Sequence[float] | np.ndarray]) -> Totals:
        """(sign, per-unit sums) terms over the same units: `Totals.of((1, tokens), (-1, seconds))`."""
        return cls(np.array([np.asarray(v, dtype=np.float64) for _, v in terms]), tuple(s for s, _ in terms))

    @property
    def units(self) -> int:
        return int(self.values.shape[1])

    def effective_units(self) -> float:
        """How many units the totals rest on (Kish's effective sample size of the units' shares
        w_u = mean_k values[k, u] / total_k): the units' count where they weigh alike, near 1 where one
        unit holds most of every total."""
        totals = self.values.sum(1, keepdims=True)
        shares = (self.values / np.where(totals > 0, totals, 1.0)).mean(0)  # [U]
        squares = float((shares**2).sum())
        return squares**2 / float((shares**4).sum()) if squares > 0 else float(self.units)


# counts [B, U]: how often each of the group's units is drawn (ones: the sample itself) -> ([B], [B])
def _weighted(group: Totals, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The log of the ratio of totals of each weighting of the units, and its linearised variance over
    units (the delta method): var = U / (U - 1) sum_u c_u (d_u - mean d)^2, d_u = sum_k s_k y_ku / T_k,
    with sum_u c_u d_u^2 found as a quadratic form in the products y_ku y_lu (no [B, U, k] array)."""
    signs, values, units = np.array(group.signs, dtype=np.float64), group.values, group.units
    totals = counts @ values.T  # [B, k]
    kinds = len(signs)
    products = (values[:, None, :] * values[None, :, :]).reshape(kinds * kinds, units)  # [k * k, U]
    with np.errstate(divide="ignore", invalid="ignore"):  # a zero total: non-finite, dropped by the caller
        log = np.log(totals) @ signs
        scaled = signs / totals  # [B, k]
        outer = (scaled[:, :, None] * scaled[:, None, :]).reshape(-1, kinds * kinds)  # [B, k * k]
        square = ((counts @ products.T) * outer).sum(1)
    correction = units / (units - 1) if units > 1 else math.nan  # one unit has no spread
    return log, correction * (square - signs.sum() ** 2 / units)


def _counts(units: int, start: int, size: int, seed: int) -> np.ndarray:
    """[size, units] draw counts of bootstrap resamples start..start + size over `units` (multinomial:
    units drawn with replacement), drawn from a generator seeded by (seed, units, start): the same for the
    same arguments, so every figure over the same units shares them (common random numbers), and one
    chunk at a time is ever held."""
    rng = np.random.default_rng((seed, units, start))
    return rng.multinomial(units, np.full(units, 1 / units), size=size).astype(np.float64)


def student(df: float, confidence: float) -> float:
    """Student's t quantile of a two-sided ``confidence`` at ``df`` degrees of freedom (any df > 0)."""
    from scipy.special import stdtrit  # light beside scipy.stats: a run that prints a verdict pays only this

    return float(stdtrit(df, 1 - (1 - confidence) / 2))


def student_tail(df: float, t: float) -> float:
    """P(T >= t), T Student's t with ``df`` degrees of freedom."""
    from scipy.special import stdtr

    return float(stdtr(df, -t))


@dataclass(frozen=True)
class LogRatio:
    """A ratio of totals on the log scale: its value, the linearised standard error, the units it is over,
    their effective degrees of freedom and the studentised bootstrap statistics t* = (log* - log) / se*
    over resampled units (non-finite resamples dropped)."""

    log: float
    se: float  # NaN below two units
    n: int  # units (of the smallest group)
    df: float = math.nan  # effective degrees of freedom of se (Welch-Satterthwaite over unpaired groups)
    t: np.ndarray = field(default_factory=lambda: np.empty(0))  # [resamples]

    @property
    def value(self) -> float:
        return math.exp(self.log)

    @property
    def testable(self) -> bool:
        """Enough units for an interval and a test."""
        return self.n >= MIN_CLUSTERS and math.isfinite(self.log) and math.isfinite(self.se)

    def interval(self, confidence: float = CONFIDENCE) -> tuple[float, float] | None:
        """A figure's interval exp(log -+ c se): c the `confidence` quantile of |t*| (symmetric bootstrap-t),
        at least Student's at the units' effective degrees of freedom; None where no resample kept a
        ratio, or too many had no spread, to bound it."""
        if not self.se:
            return self.value, self.value
        if not len(self.t):
            return None
        boot = float(np.quantile(np.abs(self.t), confidence, method="higher"))
        half = max(boot, student(self.df, confidence)) * self.se
        if not math.isfinite(self.log + half):
            return None
        return math.exp(self.log - half), math.exp(self.log + half)

    def bounds(self, confidence: float) -> tuple[float, float]:
        """The interval that agrees with `p_value` at every level: exp(log -+ q se), q Student's
        two-sided `confidence` quantile at the effective degrees of freedom; it excludes 1 exactly where
        p_value() < 1 - confidence."""
        half = student(self.df, confidence) * self.se if self.se else 0.0
        return math.exp(self.log - half), math.exp(self.log + half)

    def estimate(self, se_below: bool = False, most: float = math.inf) -> Estimate:
        """The ratio as an `Estimate`: with its CONFIDENCE interval (`interval`, kept within [0, most], the
        figure's possible values: a probability's `most` is 1) from MIN_CLUSTERS units on; below, its
        linearised standard error where ``se_below`` (acceptance figures), else the value alone (a speed:
        no spread claims what too few units cannot show). NaN where a total it divides by is 0, 0 where a
        total it multiplies is (with a standard error of 0 where ``se_below``: no interval can be resampled
        from units that all count 0)."""
        if math.isnan(self.log) or self.log == math.inf:
            return Estimate(math.nan, n=self.n)
        if self.log == -math.inf:
            return (
                Estimate(0.0, n=self.n, method=RATIO, se=0.0) if se_below and self.n >= 2 else Estimate(0.0, n=self.n)
            )
        if self.testable:
            if (found := self.interval()) is None:
                return Estimate(self.value, n=self.n, method=UNBOUNDED)
            return Estimate(self.value, max(found[0], 0.0), min(found[1], most), self.n, BOOTSTRAP_T)
        if se_below and self.n >= 2:
            return Estimate(self.value, n=self.n, method=RATIO, se=self.value * self.se)
        return Estimate(self.value, n=self.n)

    def p_value(self, alternative: str = "two-sided") -> float:
        """The p-value of "the ratio is 1" by Student's t on the linearised standard error, at the units'
        effective degrees of freedom: two-sided, or against a ratio above 1 (``alternative="greater"``);
        NaN where there is no test (fewer than MIN_CLUSTERS units)."""
        if not self.testable:
            return math.nan
        if self.se == 0:  # every unit gives the same ratio
            return 1.0 if self.log == 0 else float(self.log < 0) if alternative == "greater" else 0.0
        tail = student_tail(self.df, self.log / self.se if alternative == "greater" else abs(self.log / self.se))
        return tail if alternative == "greater" else min(1.0, 2 * tail)


def _resampled_t(groups: tuple[Totals, ...], log: float, se: float, resamples: int, seed: int) -> np.ndarray:
    """t* of `resamples` bootstrap resamples: each group's units drawn with replacement, independently
    of the other groups' (paired sums are one group's rows, so they are drawn together), CHUNK at a
    time. A resample with no spread (its units all give one ratio) or a ratio of 0 (a zero total it
    multiplies) has |t*| infinite unless it gives the sample's own ratio, so the quantiles count it
    rather than drop it; one whose ratio is undefined (a zero total it divides by) is dropped."""
    found = []
    for start in range(0, resamples, CHUNK):
        size = min(CHUNK, resamples - start)
        logs = variances = np.zeros(size)
        for g, group in enumerate(groups):
            drawn, spread = _weighted(group, _counts(group.units, start, size, seed + g))
            logs, variances = logs + drawn, variances + spread
        with np.errstate(divide="ignore", invalid="ignore"):
            t = (logs - log) / np.sqrt(variances)
            flat = ~(variances > 1e-12 * se**2)  # no spread, to float precision (NaN included)
            t = np.where(flat & np.isfinite(logs), np.where(logs == log, 0.0, np.inf), t)
            t = np.where(logs == -np.inf, np.inf, t)
        found.append(t[~np.isnan(t) & (logs != np.inf)])
    return np.concatenate(found)


def degrees_of_freedom(groups: Sequence[Totals], variances: Sequence[float]) -> float:
    """The effective degrees of freedom of a standard error summed over groups: each group's effective
    units less one (`Totals.effective_units`, scaled so that units that weigh alike give U - 1),
    combined by Welch-Satterthwaite where groups are resampled apart."""
    own = [g.effective_units() * (g.units - 1) / g.units for g in groups]
    total = sum(variances)
    spread = sum(v**2 / d for v, d in zip(variances, own) if d > 0)
    return total**2 / spread if spread > 0 else min(own)


def log_ratio(*groups: Totals, resamples: int = RESAMPLES, seed: int = 0) -> LogRatio:
    """The ratio of totals that multiplies every group's (unpaired groups: a comparison between points
    that share no units), with its degrees of freedom and, from MIN_CLUSTERS units on, its bootstrap-t
    over `resamples` resamples of the units (none for a test alone). Seeded: the same sums give the same
    interval."""
    observed = [_weighted(g, np.ones((1, g.units))) for g in groups]
    log, n = float(sum(found[0][0] for found in observed)), min(g.units for g in groups)
    if n < 2 or not math.isfinite(log):
        return LogRatio(log, math.nan, n)
    variances = [max(float(found[1][0]), 0.0) for found in observed]
    se, df = math.sqrt(sum(variances)), degrees_of_freedom(groups, variances)
    if n < MIN_CLUSTERS or se == 0 or not resamples:  # resamples=0: a test, which needs no bootstrap
        return LogRatio(log, se, n, df)
    return LogRatio(log, se, n, df, _resampled_t(groups, log, se, resamples, seed))


def ratio_of_totals(*groups: Totals, se_below: bool = False, most: float = math.inf) -> Estimate:
    """The ratio of totals as an `Estimate` (`LogRatio.estimate`)."""
    return log_ratio(*groups).estimate(se_below, most)
