"""The one rule that turns measurements into verdicts, for a run, a sweep, its parent run and the report.

A verdict says that a ratio differs from 1: a point's speedup over a baseline (faster or slower), one
point's speed over another's (the ratio of their speedups over the engine's autoregressive loop, or of
their throughputs where that baseline did not run), a compared verifier's acceptance length over the
configured one's (`algorithm.compare`). Each is a ratio of totals over units tested by Student's t on
its linearised standard error at the units' effective degrees of freedom (`stats.LogRatio.p_value`),
paired where the design pairs: two points that decoded the same units (the same prompts in the same
batches, with the same seeds) are one group of sums, unit by unit, so what a prompt does to both
cancels out of their ratio; points that share no units are compared unpaired.

The verdicts shown together are one `Family`, whose chance of any false verdict is at most 5%
(family-wise), split equally between the questions it answers:
- **which point is fastest** (a sweep, a report's contests): Hsu's multiple comparisons with the best.
  The leader's one-sided test over each other point at share / (P - 1) (Bonferroni over the P - 1
  comparisons with the best, not the P (P - 1) / 2 pairs): a point it separates is **out** (some point
  is at least as fast as it), the others stay **in the running**, and the leader is **the fastest**
  where every other point is out. Whichever point is truly fastest is ruled out only if some test of
  another point over it errs, which has probability at most the share, so the fastest is in the
  running, and a point named fastest is it, with probability at least 1 - share.
- **which points beat each baseline**: Holm's step-down over every point against every baseline.
- **the contrasts a researcher names** (`sweep.contrast`): Holm's step-down over each pair of the
  contrasted key's values at every setting of the other swept keys.
A run's own speedups are a family of their own (Holm), and so are its compared verifiers. Every
verdict carries its p-value adjusted to the family (decided where it is at most 5%) and its ratio
with the interval at the level its test was judged at, so an interval beside a verdict excludes 1
exactly where the verdict is decided. A test needs MIN_CLUSTERS units: with fewer, or for a point
read back without its units (a run logged before they were kept), the verdict is "too few units".
`tests/test_verdicts.py` runs simulated sweeps through these functions (docs/measuring.md gives the
power by sweep size and prompt count).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from functools import cached_property

from speculab.core.paired import PromptSums
from speculab.results.figures import relative
from speculab.results.point import PointResult, PointUnits
from speculab.results.ratios import figure_groups, figure_terms
from speculab.results.selection import Selected, selected
from speculab.stats import CONFIDENCE, Estimate, LogRatio, Totals, log_ratio

ALPHA = 1 - CONFIDENCE  # the family-wise error rate of a family of verdicts
# What a speedup is over, in words (`speedup_vs_hf`'s `generate` form is named where it is known).
OVER = {"speedup_vs_ar": "the autoregressive baseline", "speedup_vs_hf": "transformers' generate"}


class Call(Enum):
    """A verdict on "this ratio is 1"."""

    ABOVE = "above"  # decided: the ratio exceeds 1 (faster, higher; for the leader over a point: it is out)
    BELOW = "below"  # decided: the ratio is under 1
    INCONCLUSIVE = "inconclusive"  # tested, not decided within the family's 5%
    TOO_FEW = "too few units"  # not testable: fewer than MIN_CLUSTERS units, or none kept


@dataclass(frozen=True)
class Family:
    """The verdicts decided together: what they are (`name`, as a page names them) and how many tests
    their 5% is shared over."""

    name: str
    tests: int

    def __str__(self) -> str:
        return f"{self.name}, {self.tests} test{'s' if self.tests != 1 else ''}, 5% family-wise"


@dataclass(frozen=True)
class RatioVerdict:
    """A verdict on "this ratio is 1" (a verifier's on a round's drafts is `verify.verdict.Verdict`): the
    ratio with the interval at `level` (the confidence its test was judged at; NaN: no test), its
    unadjusted p-value (NaN: not testable), its p-value adjusted to the family (decided where at most
    ALPHA) and what the family decided."""

    ratio: Estimate
    p: float
    adjusted: float
    call: Call
    family: Family
    level: float = math.nan

    @property
    def decided(self) -> bool:
        return self.call in (Call.ABOVE, Call.BELOW)


@dataclass(frozen=True)
class Step:
    """One hypothesis of a step-down: rejected or not, the level it was judged at and its adjusted p."""

    rejected: bool
    threshold: float
    adjusted: float


def holm(p: Sequence[float], alpha: float = ALPHA) -> list[Step]:
    """Holm's step-down at family-wise `alpha` over the testable p-values (NaN: not testable): the i-th
    smallest of m is compared with alpha / (m - i) and the first that exceeds its threshold stops the
    rejections. A rejected hypothesis was judged at its own step's threshold, the rest at the threshold
    where the procedure stopped; adjusted p-values are on the scale of ALPHA (a share `alpha` of the
    family's ALPHA scales them by ALPHA / alpha), so a hypothesis is rejected exactly where its adjusted
    p-value is at most ALPHA."""
    testable = sorted((value, i) for i, value in enumerate(p) if not math.isnan(value))
    m, found = len(testable), [Step(False, math.nan, math.nan)] * len(p)
    adjusted, stop = 0.0, None
    for step, (value, i) in enumerate(testable):
        threshold = alpha / (m - step)
        adjusted = max(adjusted, min(1.0, value * ALPHA / threshold))
        if stop is None and value > threshold:
            stop = threshold
        found[i] = Step(stop is None, threshold if stop is None else stop, adjusted)
    return found


def bonferroni(p: Sequence[float], tests: int, alpha: float) -> list[Step]:
    """Each testable p-value against alpha / tests (one threshold for all: a single step)."""
    threshold = alpha / max(tests, 1)
    return [
        Step(False, math.nan, math.nan)
        if math.isnan(v)
        else Step(v <= threshold, threshold, min(1.0, v * ALPHA / threshold))
        for v in p
    ]


def judged(ratio: LogRatio | None, step: Step, family: Family, shown: Estimate | None, one_sided: bool) -> RatioVerdict:
    """A ratio's verdict from its step: decided above or below 1 where rejected, shown with the interval
    that agrees with the test at the level it was judged at (a one-sided test at level g: the two-sided
    interval at 1 - 2g, whose lower end is the test's bound), or with ``shown`` (the figure as logged,
    an interval-free value) where there is no test."""
    if ratio is None or math.isnan(step.threshold):
        value = shown if shown is not None else ratio.estimate() if ratio is not None else Estimate(math.nan)
        units = ratio.n if ratio is not None else value.n  # what too few units it had, to say so
        return RatioVerdict(Estimate(value.value, n=units), math.nan, math.nan, Call.TOO_FEW, family)
    level = 1 - (2 if one_sided else 1) * step.threshold
    low, high = ratio.bounds(level)
    estimate = Estimate(ratio.value, low, high, ratio.n, f"t interval at {level:.4g}")
    call = Call.INCONCLUSIVE if not step.rejected else Call.ABOVE if ratio.log > 0 else Call.BELOW
    p = ratio.p_value("greater" if one_sided else "two-sided")
    return RatioVerdict(estimate, p, step.adjusted, call, family, level)


def tested(groups: Sequence[Totals] | None) -> LogRatio | None:
    """The test of a ratio of totals (None: nothing to test): its value, standard error and degrees of
    freedom, without the bootstrap a figure's interval resamples."""
    return log_ratio(*groups, resamples=0) if groups else None


def decide(
    ratios: Sequence[LogRatio | None], family: Family, alpha: float = ALPHA, unseen: int = 0
) -> list[RatioVerdict]:
    """One family's (or one question's, at its share `alpha`) two-sided verdicts by Holm's step-down;
    ``unseen``: hypotheses of the question left untested (a race's ruled-out points), counted in Holm's m
    with p = 1, which keeps its guarantee (Holm rejects less as any p-value grows)."""
    p = [r.p_value() if r is not None else math.nan for r in ratios]
    steps = holm([*p, *[1.0] * unseen], alpha)
    return [judged(r, step, family, None, False) for r, step in zip(ratios, steps)]


RUN_FAMILY = "this run"  # its speedups over its baselines


def run_verdicts(result: PointResult) -> dict[str, RatioVerdict]:
    """A run's verdicts on its speedups (`speedup_vs_ar`, `speedup_vs_hf`, those it has), one family."""
    keys = [key for key in OVER if key in result.figures]
    ratios = [tested(figure_groups(result.units, key)) for key in keys]
    return dict(zip(keys, decide(ratios, Family(RUN_FAMILY, sum(r is not None for r in ratios)))))


def compared(sums: PromptSums, configured: str) -> dict[str, RatioVerdict]:
    """`algorithm.compare`'s verdicts, one family: each compared verifier's acceptance length over the
    configured verifier's on the same drafts, paired by prompt."""
    names = [name for name in sums.accepted if name != configured]
    family = Family("algorithm.compare's verifiers", len(names))
    return dict(zip(names, decide([tested((relative(sums, name, configured),)) for name in names], family)))


def rank_key(points: Sequence[PointResult]) -> str:
    """The headline the points are ranked and judged by: speedup_vs_ar; speedup_vs_hf where a target ran
    on transformers' own code (`ar_lean` 0: its autoregressive loop may trail generate and inflate
    speedup_vs_ar) and generate was the faster baseline (its median speedup over the engine's loop above
    1); tokens_per_s where a point has no speedup over the engine's loop."""
    if any(math.isnan(p.figures.value("speedup_vs_ar")) for p in points):
        return "tokens_per_s"
    if slow_loop(points) and statistics.median(p.generate_vs_ar for p in points) > 1:
        return "speedup_vs_hf"
    return "speedup_vs_ar"


def slow_loop(points: Sequence[PointResult]) -> bool:
    """A point's target ran on transformers' own code, and every point has a speedup over generate."""
    has_hf = all(not math.isnan(p.figures.value("speedup_vs_hf")) for p in points)
    return has_hf and any(p.figures.value("ar_lean") == 0 for p in points)


def ranked(points: Sequence[PointResult], key: str | None = None) -> list[PointResult]:
    """Highest first by ``key`` (the ranking figure, `rank_key`), points without it last."""
    key = key or rank_key(points)
    return sorted(points, key=lambda p: -v if not math.isnan(v := p.figures.value(key)) else math.inf)


def paired_on(units: PointUnits, key: str) -> tuple[object, ...]:
    """What a figure's sums are over: prompts for block efficiency, units (a batch's prompts) for a speed."""
    return units.prompt_ids if key == "block_efficiency" else units.prompts


def effect_groups(a: PointUnits | None, b: PointUnits | None, key: str) -> tuple[Totals, ...] | None:
    """`a`'s figure `key` over `b`'s: one group paired unit by unit where both decoded the same units,
    else two groups resampled independently (None: a point without its units or the figure's sums)."""
    if a is None or b is None:
        return None
    over, under = figure_terms(a, key, 1), figure_terms(b, key, -1)
    if over is None or under is None:
        return None
    if paired_on(a, key) == paired_on(b, key):
        return (Totals.of(*over, *under),)
    return Totals.of(*over), Totals.of(*under)


def effect_paired(a: PointResult, b: PointResult) -> bool:
    """Whether two points decoded the same units (their comparison pairs unit by unit)."""
    return a.units is not None and b.units is not None and a.units.prompts == b.units.prompts


class Standing(Enum):
    """Where a point stands in its sweep's question "which point is fastest"."""

    FASTEST = "fastest"  # named: every other point is out
    RUNNING = "in the running"  # not ruled out: it may be the fastest
    OUT = "out"  # ruled out: some point is at least as fast as it
    UNTESTED = "too few units"  # no test: fewer than MIN_CLUSTERS units, or none kept


def comparisons_with_best(
    points: Sequence[PointResult], key: str, better: int, family: Family, alpha: float, tests: int | None = None
) -> list[RatioVerdict]:
    """Hsu's multiple comparisons with the best, Bonferroni over the P - 1 comparisons at `alpha` (the
    question's share; ``tests``: over that many instead, where the points are what is left of more): the
    best point by `key` (``points[0]``, in the direction `better` wins) against each other, one-sided in
    that direction, each ratio facing it (the leader's figure over the other's where higher wins, the
    other's over the leader's where lower does); ABOVE rules the other out."""
    leader, rest = points[0], points[1:]
    ratios = [tested(effect_groups(leader.units, other.units, key)) for other in rest]
    facing = [None if r is None else LogRatio(better * r.log, r.se, r.n, r.df, r.t) for r in ratios]
    p = [r.p_value("greater") if r is not None else math.nan for r in facing]
    steps = bonferroni(p, tests if tests is not None else len(rest), alpha)
    shown = [Estimate((leader.figures.value(key) / other.figures.value(key)) ** better) for other in rest]
    return [judged(r, step, family, value, True) for r, step, value in zip(facing, steps, shown)]


@dataclass(frozen=True)
class ContrastCell:
    """A point's place in a contrast: the contrasted key's value there and the setting of the other
    swept keys it was decoded at (`key=value` overrides)."""

    value: str
    setting: tuple[str, ...]


@dataclass(frozen=True)
class Contrast:
    """Two values of the contrasted key (`values`) at one setting of the others: `a`'s figure over `b`'s."""

    setting: tuple[str, ...]
    values: tuple[str, str]
    a: PointResult
    b: PointResult
    verdict: RatioVerdict


Pair = tuple[tuple[str, ...], tuple[str, str], PointResult, PointResult]  # setting, values, a, b


def contrast_pairs(points: Sequence[PointResult], cells: Sequence[ContrastCell], order: Sequence[str]) -> list[Pair]:
    """Every pair of the contrasted key's values (in the sweep's order of them) at every setting of the
    other swept keys where both were decoded."""
    at: dict[tuple[str, ...], dict[str, PointResult]] = {}
    for point, cell in zip(points, cells):
        at.setdefault(cell.setting, {})[cell.value] = point
    pairs = []
    for setting, by_value in at.items():
        present = [v for v in order if v in by_value]
        pairs += [(setting, (x, y), by_value[x], by_value[y]) for i, x in enumerate(present) for y in present[i + 1 :]]
    return pairs


@dataclass(frozen=True)
class SweepAnswer:
    """A sweep's verdicts, one family: its points ranked by `key`, the leader's ratio over each other
    point (in ranking order: Hsu's comparisons with the best), each point's speedup over each baseline
    it ran (in ranking order), the contrasts asked for, and the leader's figure as its selection allows."""

    key: str
    ranked: list[PointResult]
    versus: list[RatioVerdict]  # ranked[0] over ranked[i + 1]: ABOVE rules ranked[i + 1] out
    against: dict[str, list[RatioVerdict]]  # speedup key -> one verdict per point of `ranked`
    contrasts: list[Contrast]
    family: Family
    ruled_out_before: int = 0  # points a race's earlier stages ruled out (`results.race`)

    @property
    def leader(self) -> PointResult:
        return self.ranked[0]

    @cached_property
    def leader_figure(self) -> Selected:
        """The leader's figure with its interval simultaneous over the sweep's points (found once, on demand:
        its bootstrap is the costliest part of an answer)."""
        return selected(self.leader, self.key, self.chosen_from)

    @cached_property
    def figures(self) -> list[Estimate]:
        """Every point's figure, in ranking order, with its interval simultaneous over the sweep's points:
        what a ranking shows, where every row is chosen by the same data."""
        return [self.leader_figure.figure] + [selected(p, self.key, self.chosen_from).figure for p in self.ranked[1:]]

    @property
    def chosen_from(self) -> int:
        """The points the leader was chosen from: the sweep's, or every point its race began with."""
        return len(self.ranked) + self.ruled_out_before

    @property
    def best(self) -> PointResult | None:
        """The leader where every other point is out (and there is another point, here or ruled out at an
        earlier stage of a race)."""
        others = self.versus or self.ruled_out_before
        return self.leader if others and all(v.call is Call.ABOVE for v in self.versus) else None

    def standing(self, point: PointResult) -> Standing:
        """Where `point` stands on "which point is fastest"."""
        if self.best is not None and point is self.leader:
            return Standing.FASTEST
        if len(self.ranked) < 2 or all(v.call is Call.TOO_FEW for v in self.versus):
            return Standing.UNTESTED
        if point is self.leader:
            return Standing.FASTEST if self.best is not None else Standing.RUNNING
        verdict = self.versus[self.place(point) - 1]
        if verdict.call is Call.TOO_FEW:
            return Standing.UNTESTED
        return Standing.OUT if verdict.call is Call.ABOVE else Standing.RUNNING

    def place(self, point: PointResult) -> int:
        """Where `point` ranks (0: the leader), found by identity: two points may measure alike."""
        return next(at for at, p in enumerate(self.ranked) if p is point)

    def running(self) -> list[PointResult]:
        """The leader and every point not ruled out: what the data leave as possibly the fastest."""
        return [p for p in self.ranked if self.standing(p) in (Standing.FASTEST, Standing.RUNNING)]


SWEEP_FAMILY = "the sweep's verdicts"


def allotted(blocks: Sequence[Sequence[float]], ranking: bool, spent: float = 0.0) -> tuple[list[float], float]:
    """The share of ALPHA each question of a family is tested at: the Holm questions' p-values (`blocks`)
    and, where `ranking`, which point is fastest. Each question starts with an equal share; a Holm
    question whose every hypothesis is rejected passes its share on, equally, to the questions not yet
    passed (the ranking among them), which are tested again. Valid because a question fully rejected
    either holds no true hypothesis (it could not err) or has already erred: either way the family's
    chance of any false verdict stays within the shares first given, ALPHA in all. ``spent``: what a race's
    earlier stages already spent of the ranking's share (`results.race`)."""
    live = [i for i, p in enumerate(blocks) if p]
    count = len(live) + ranking
    shares = [ALPHA / count if i in live else 0.0 for i in range(len(blocks))]
    rank_share = ALPHA / count - spent if ranking else 0.0
    passed: set[int] = set()
    while True:
        full = [i for i in live if i not in passed and all(step.rejected for step in holm(blocks[i], shares[i]))]
        receivers = [i for i in live if i not in passed and i not in full]
        if not full or not (receivers or ranking):
            return shares, rank_share
        given = sum(shares[i] for i in full) / (len(receivers) + ranking)
        passed |= set(full)
        for i in receivers:
            shares[i] += given
        rank_share += given if ranking else 0.0


def sweep_answer(
    points: Sequence[PointResult],
    cells: Sequence[ContrastCell] | None = None,
    order: Sequence[str] = (),
    spent: float = 0.0,
    ruled_out_before: int = 0,
) -> SweepAnswer:
    """Rank the points and decide, as one family split equally between its questions (`allotted`): which
    point is fastest (Hsu's comparisons with the best), which points beat each baseline (Holm) and, where
    `cells` place the points in a contrast (the values in `order`), each pair of the contrasted values at
    every setting of the other swept keys (Holm). ``spent``: what a race's earlier stages spent of the
    ranking's share, ``ruled_out_before``: how many points they ruled out (its answer is this one, over the
    points left, each pooled over its stages: `results.race.pooled`; every test the race began with is
    counted, those of the points ruled out as never rejected)."""
    key = rank_key(points)
    order_ = ranked(points, key)
    baselines = [k for k in OVER if any(k in p.figures for p in order_)]
    against_ratios = [tested(figure_groups(p.units, k)) for k in baselines for p in order_]
    pairs = [] if cells is None else contrast_pairs(points, cells, order)
    contrast_ratios = [tested(effect_groups(a.units, b.units, key)) for _, _, a, b in pairs]
    unseen = ruled_out_before * len(baselines)  # a race's ruled-out points' tests over each baseline, as p = 1
    blocks = [
        [r.p_value() if r is not None else math.nan for r in ratios] + [1.0] * extra
        for ratios, extra in ((against_ratios, unseen), (contrast_ratios, 0))
    ]
    (base_share, contrast_share), rank_share = allotted(blocks, len(order_) > 1, spent)
    rivals = len(order_) - 1 + ruled_out_before  # a race's leader was chosen from every point it began with
    family = Family(SWEEP_FAMILY, rivals + len(against_ratios) + unseen + len(pairs))
    versus = comparisons_with_best(order_, key, 1, family, rank_share, tests=rivals) if len(order_) > 1 else []
    against = decide(against_ratios, family, base_share, unseen)
    contrasts = [Contrast(*pair, v) for pair, v in zip(pairs, decide(contrast_ratios, family, contrast_share))]
    by_baseline = {k: against[i * len(order_) : (i + 1) * len(order_)] for i, k in enumerate(baselines)}
    return SweepAnswer(key, order_, versus, by_baseline, contrasts, family, ruled_out_before)


@dataclass(frozen=True)
class Contest:
    """Points competing on one figure (a report table's row of K values, or its methods at one T and K):
    `better` +1 where higher wins, -1 where lower does."""

    points: list[PointResult]
    key: str
    better: int


REPORT_FAMILY = "the report's contests"


def winners(contests: Sequence[Contest]) -> list[PointResult | None]:
    """Each contest's winner, as a paper would set it in bold, where the rule names it: the best point
    by its figure, every other point of its contest ruled out by Hsu's comparisons with the best in the
    direction that wins. One family: 5% split equally between the contests."""
    ordered = [sorted(c.points, key=lambda p: -c.better * p.figures.value(c.key)) for c in contests]
    family = Family(REPORT_FAMILY, sum(max(len(points) - 1, 0) for points in ordered))
    share = ALPHA / max(sum(len(points) > 1 for points in ordered), 1)
    found: list[PointResult | None] = []
    for contest, points in zip(contests, ordered):
        verdicts = comparisons_with_best(points, contest.key, contest.better, family, share) if len(points) > 1 else []
        found.append(points[0] if verdicts and all(v.call is Call.ABOVE for v in verdicts) else None)
    return found
