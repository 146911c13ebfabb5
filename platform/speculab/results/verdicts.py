"""The one rule that turns measurements into verdicts, for a run, a sweep, its parent run and the report.

A verdict says that a ratio differs from 1: a point's speedup over a baseline (faster or slower),
one point's speed over another's (the ratio of their speedups over the engine's autoregressive loop,
or of their throughputs where that baseline did not run), a compared verifier's acceptance length
over the configured one's (`algorithm.compare`). Each is a ratio of totals over units tested by the
bootstrap-t of `stats.log_ratio`, the computation that gives the figure's 95% interval, and paired
where the design pairs: two points that decoded the same units (the same prompts in the same
batches, with the same seeds) are resampled unit by unit together, so what a prompt does to both
cancels out of their ratio; points that share no units are compared unpaired.

The verdicts shown together are one family, corrected by Holm's step-down procedure so that the
chance of any false verdict among them is at most 5% (family-wise, whatever the dependence between
them): a run's speedups; a sweep's comparisons of its leader with every other point together with
every point against each baseline; a run's compared verifiers. A sweep names a leader only where its
comparison with every other point is decided. A test needs MIN_CLUSTERS units: with fewer, or for a
point read back without its units (a run logged before they were kept), the verdict is "too few
units". `tests/test_verdicts.py` runs simulated sweeps through these functions: one point truly 8%
faster over 16 shared prompts is named, and sweeps of equal points print no false verdict, at the
rates docs/measuring.md gives.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

from speculab.paired import PromptSums
from speculab.results.figures import relative
from speculab.results.point import PointResult, PointUnits
from speculab.results.ratios import Term, rate_terms
from speculab.stats import CONFIDENCE, MIN_CLUSTERS, RESAMPLES, Estimate, LogRatio, Totals, log_ratio, ratio_text

ALPHA = 1 - CONFIDENCE  # the family-wise error rate of a family of verdicts
# What a speedup is over, in words (`speedup_vs_hf`'s `generate` form is named where it is known).
OVER = {"speedup_vs_ar": "the autoregressive baseline", "speedup_vs_hf": "transformers' generate"}


class Call(Enum):
    """A verdict on "this ratio is 1"."""

    ABOVE = "above"  # decided: the ratio exceeds 1 (faster, higher)
    BELOW = "below"  # decided: the ratio is under 1
    INCONCLUSIVE = "inconclusive"  # tested, not decided within the family's 5%
    TOO_FEW = "too few units"  # not testable: fewer than MIN_CLUSTERS units, or none kept


@dataclass(frozen=True)
class Verdict:
    """A ratio (the figure, with its 95% interval), its two-sided p-value (NaN: not testable) and what
    Holm's procedure over its family of `family` tests decided."""

    ratio: Estimate
    p: float
    call: Call
    family: int

    @property
    def decided(self) -> bool:
        return self.call in (Call.ABOVE, Call.BELOW)


def holm(p: Sequence[float], family: int | None = None, alpha: float = ALPHA) -> list[bool]:
    """Holm's step-down procedure: which hypotheses are rejected, family-wise error at most `alpha`.
    The i-th smallest of the m testable p-values (NaN: not testable) is compared with alpha / (m - i);
    the first that exceeds its threshold stops the rejections. ``family``: m where the family holds
    hypotheses not tested here (each counted as p = 1, a valid p-value of any hypothesis, so the
    guarantee holds), else the testable ones."""
    testable = sorted((value, i) for i, value in enumerate(p) if not math.isnan(value))
    m = family if family is not None else len(testable)
    rejected = [False] * len(p)
    for step, (value, i) in enumerate(testable):
        if value > alpha / (m - step):
            break
        rejected[i] = True
    return rejected


def resamples_for(tests: int) -> int:
    """Bootstrap resamples for a family of `tests`: enough that the smallest p-value a bootstrap can give,
    2 / (resamples + 1), lies 10 times below Holm's first threshold, alpha / tests."""
    return max(RESAMPLES, math.ceil(20 * tests / ALPHA))


def tested(groups: Sequence[Totals] | None, tests: int) -> LogRatio | None:
    """The bootstrap of a ratio of totals (None: nothing to test), resampled enough for a family of
    `tests` only where it could matter: a p-value above ALPHA at the first pass is no rejection at any
    step, so only the rest are resampled again, more."""
    if not groups:
        return None
    found = log_ratio(*groups)
    more = resamples_for(tests)
    if more > RESAMPLES and found.p_value() <= ALPHA:
        found = log_ratio(*groups, resamples=more)
    return found


def decide(
    ratios: Sequence[LogRatio | None], shown: Sequence[Estimate] | None = None, untested: int = 0
) -> list[Verdict]:
    """One family's verdicts: Holm over the testable ratios and ``untested`` hypotheses more; each shown
    with its own estimate (``shown``: the figure as the point logged it) or the ratio's."""
    p = [r.p_value() if r is not None else math.nan for r in ratios]
    family = sum(not math.isnan(value) for value in p) + untested
    rejected = holm(p, family)
    verdicts = []
    for at, (ratio, value, decided) in enumerate(zip(ratios, p, rejected)):
        estimate = shown[at] if shown is not None else ratio.estimate() if ratio is not None else Estimate(math.nan)
        if math.isnan(value):
            call = Call.TOO_FEW
        elif not decided:
            call = Call.INCONCLUSIVE
        else:
            call = Call.ABOVE if ratio is not None and ratio.log > 0 else Call.BELOW
        verdicts.append(Verdict(estimate, value, call, family))
    return verdicts


def baseline_groups(units: PointUnits | None, key: str) -> tuple[Totals, ...] | None:
    """The sums of a point's speedup `key` (`speedup_vs_ar`, `speedup_vs_hf`) over its baseline (None:
    not kept, or the baseline did not run)."""
    terms = None if units is None else figure_terms(units, key, 1)
    return None if terms is None else (Totals.of(*terms),)


def run_verdicts(result: PointResult) -> dict[str, Verdict]:
    """A run's verdicts on its speedups (`speedup_vs_ar`, `speedup_vs_hf`, those it has), one family."""
    keys = [key for key in OVER if key in result.figures]
    ratios = [tested(baseline_groups(result.units, key), len(keys)) for key in keys]
    return dict(zip(keys, decide(ratios, [result.figures[key] for key in keys])))


def compared(sums: PromptSums, configured: str) -> dict[str, Verdict]:
    """`algorithm.compare`'s verdicts, one family: each compared verifier's acceptance length over the
    configured verifier's on the same drafts, paired by prompt."""
    names = [name for name in sums.accepted if name != configured]
    return dict(zip(names, decide([tested((relative(sums, name, configured),), len(names)) for name in names])))


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


def headline_note(points: Sequence[PointResult]) -> str:
    """What the run says where its autoregressive loop ran on transformers' own code (empty otherwise)."""
    if not any(p.figures.value("ar_lean") == 0 for p in points):
        return ""
    why = "this model's layers ran on transformers' own code, not speculab's lean layers"
    if not slow_loop(points):
        return f"{why}: speedup_vs_ar may read high (baseline_hf=true measures generate beside it)"
    if rank_key(points) == "speedup_vs_hf":
        return f"{why}, and generate was the faster baseline: the headline is speedup_vs_hf"
    return f"{why}; the engine's loop was still the faster baseline: the headline stays speedup_vs_ar"


def ranked(points: Sequence[PointResult], key: str | None = None) -> list[PointResult]:
    """Highest first by ``key`` (the ranking figure, `rank_key`), points without it last."""
    key = key or rank_key(points)
    return sorted(points, key=lambda p: -v if not math.isnan(v := p.figures.value(key)) else math.inf)


def figure_terms(units: PointUnits, key: str, sign: int) -> list[Term] | None:
    """A point's figure `key` as terms of sums (None: a baseline it did not run): a speedup is its
    throughput over the baseline's, ms_per_token the inverse of its throughput, block efficiency its kept
    tokens over its rounds, per prompt."""
    if key == "block_efficiency":
        return [(sign, units.kept), (-sign, units.rounds)]
    own = rate_terms(units.speculative, -sign if key == "ms_per_token" else sign)
    if key in OVER:
        baseline = units.autoregressive if key == "speedup_vs_ar" else units.generate
        return None if baseline is None else own + rate_terms(baseline, -sign)
    return own


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


@dataclass(frozen=True)
class SweepAnswer:
    """A sweep's verdicts, one family: its points ranked by `key`, the leader's ratio over each other
    point (in ranking order) and each point's speedup over each baseline it ran (in ranking order)."""

    key: str  # the ranking figure
    ranked: list[PointResult]
    versus: list[Verdict]  # ranked[0] over ranked[i + 1]
    against: dict[str, list[Verdict]]  # speedup key -> one verdict per point of `ranked`
    family: int  # tests corrected together

    @property
    def leader(self) -> PointResult:
        return self.ranked[0]

    @property
    def best(self) -> PointResult | None:
        """The leader where its ratio over every other point is decided (and there is another point)."""
        return self.leader if self.versus and all(v.call is Call.ABOVE for v in self.versus) else None


def leader_over(leader: PointResult, other: PointResult, key: str, ratio: LogRatio | None) -> Estimate:
    """The leader's figure over another point's, with its interval where it was tested, else the ratio of
    their values alone."""
    return ratio.estimate() if ratio is not None else Estimate(leader.figures.value(key) / other.figures.value(key))


def sweep_answer(points: Sequence[PointResult]) -> SweepAnswer:
    """Rank the points and decide, as one family, the leader against every other point and every point
    against each baseline. The leader is chosen after seeing the data, so its comparisons stand for
    every pair of points that could have been compared: the family counts all P (P - 1) / 2 pairs
    (those not tested here as p = 1, `holm`), so the verdicts printed keep their 5% whichever point
    leads."""
    key = rank_key(points)
    order = ranked(points, key)
    leader, rest = order[0], order[1:]
    baselines = [k for k in OVER if any(k in p.figures for p in order)]
    pairs = len(order) * len(rest) // 2
    tests = pairs + len(baselines) * len(order)
    versus = [tested(effect_groups(leader.units, other.units, key), tests) for other in rest]
    against = [tested(baseline_groups(p.units, k), tests) for k in baselines for p in order]
    shown = [leader_over(leader, other, key, ratio) for other, ratio in zip(rest, versus)]
    shown += [p.figures.get(k, Estimate(math.nan)) for k in baselines for p in order]
    decided = decide([*versus, *against], shown, pairs - len(rest))
    by_baseline = decided[len(rest) :]
    return SweepAnswer(
        key,
        order,
        decided[: len(rest)],
        {k: by_baseline[i * len(order) : (i + 1) * len(order)] for i, k in enumerate(baselines)},
        decided[0].family if decided else 0,
    )


def units_words(n: int, batch_size: int) -> str:
    """`n` units in words: prompts where a unit is one prompt (batch 1), else units and their size."""
    plural = "s" if n != 1 else ""
    return f"{n} prompt{plural}" if batch_size == 1 else f"{n} unit{plural} (batches of {batch_size} prompts)"


def too_few(verdict: Verdict, batch_size: int) -> str:
    """Why a verdict was not tested: too few units, or enough but none kept to test on."""
    if verdict.ratio.n == 0 or verdict.ratio.n >= MIN_CLUSTERS:
        return "no per-unit measurements kept (a run logged before units.json)"
    return f"too few to tell: {units_words(verdict.ratio.n, batch_size)}, needs at least {MIN_CLUSTERS}"


def call_words(verdict: Verdict, above: str = "faster", below: str = "slower") -> str:
    """`faster` / `slower` (or the words given) where decided, else `inconclusive` or `too few units`."""
    return {Call.ABOVE: above, Call.BELOW: below}.get(verdict.call, verdict.call.value)


def evidence(verdict: Verdict) -> str:
    """The test behind a verdict, in brackets: its p-value and the family Holm corrected it over."""
    family = f"Holm over {verdict.family} tests" if verdict.family > 1 else "one test"
    return f"(p = {verdict.p:.2g}; {family}, 5% family-wise)"


def baseline_sentence(key: str, verdict: Verdict, baseline: str, batch_size: int) -> str:
    """One sentence on a speedup over a baseline: `speedup_vs_ar 1.23 [1.1, 1.37]: faster than ...`."""
    shown = f"{key} {ratio_text(verdict.ratio)}"
    if verdict.call is Call.TOO_FEW:
        return f"{shown}: no verdict against {baseline}, {too_few(verdict, batch_size)}"
    if verdict.decided:
        return f"{shown}: {call_words(verdict)} than {baseline} {evidence(verdict)}"
    return f"{shown}: inconclusive against {baseline} {evidence(verdict)}"


def first_place(answer: SweepAnswer) -> list[PointResult]:
    """The leader and every point its comparison did not separate from it (the leader alone when it is
    named best)."""
    return [answer.leader, *(p for p, v in zip(answer.ranked[1:], answer.versus) if not v.decided)]


def leader_sentence(answer: SweepAnswer, name: Callable[[PointResult], str]) -> str:
    """The sweep's answer: `leader_headline`, then `leader_detail`."""
    return " ".join(filter(None, (leader_headline(answer, name), leader_detail(answer, name))))


def leader_headline(answer: SweepAnswer, name: Callable[[PointResult], str]) -> str:
    """The sweep's answer in a few words: the fastest point, or how many points the data do not separate
    from the leader, or why there is no verdict; points named by `name`."""
    if len(answer.ranked) == 1:
        return f"One point ({name(answer.leader)}): nothing to compare it with."
    if all(v.call is Call.TOO_FEW for v in answer.versus):
        why = too_few(answer.versus[0], answer.leader.shape.batch_size)
        return f"No verdict on {answer.key}: {why}; the points are ranked by their figures alone."
    leader = f"**{name(answer.leader)}**"
    if answer.best is not None:
        return f"Fastest: {leader}, {answer.key} {ratio_text(answer.leader.figures[answer.key])}."
    close = sum(not v.decided for v in answer.versus)
    return f"No single fastest point: {leader} ranks first, and the data do not separate it from {close} point(s)."


def leader_detail(answer: SweepAnswer, name: Callable[[PointResult], str]) -> str:
    """What the verdict rests on: the leader's margin over the runner-up, or its ratio over each point it is
    not separated from, with the units and the family they were tested over (empty without a test)."""
    if len(answer.ranked) == 1 or all(v.call is Call.TOO_FEW for v in answer.versus):
        return ""
    runner, margin = answer.ranked[1], answer.versus[0]
    paired = "paired" if effect_paired(answer.leader, runner) else "unpaired (the points decoded different prompts)"
    units = units_words(margin.ratio.n, answer.leader.shape.batch_size)
    over = f"{units}, {paired}; Holm over {answer.family} tests, 5% family-wise"
    if answer.best is not None:
        return (
            f"It is ahead of every other point, of the runner-up {name(runner)} by {ratio_text(margin.ratio)}: {over}."
        )
    close = [(p, v) for p, v in zip(answer.ranked[1:], answer.versus) if not v.decided]
    listed = "; ".join(f"{name(p)} {ratio_text(v.ratio)}" for p, v in close)
    return f"Inconclusive over {over}; the leader's ratio over each: {listed}."


def effect_paired(a: PointResult, b: PointResult) -> bool:
    """Whether two points decoded the same units (their comparison pairs unit by unit)."""
    return a.units is not None and b.units is not None and a.units.prompts == b.units.prompts


def baselines_sentence(answer: SweepAnswer) -> str:
    """How many points are faster, slower and inconclusive against each baseline (and how many could not
    be tested), under the sweep's one family."""
    parts = []
    for key, verdicts in answer.against.items():
        counts: dict[str, int] = {}
        for verdict in verdicts:
            if not math.isnan(verdict.ratio.value):
                counts[call_words(verdict)] = counts.get(call_words(verdict), 0) + 1
        words = ", ".join(
            f"{counts[w]} {w}" for w in ("faster", "slower", "inconclusive", "too few units") if w in counts
        )
        parts.append(f"against {OVER[key]}, {words}")
    family = f" (Holm over the sweep's {answer.family} tests, 5% family-wise)" if answer.family else ""
    return ("Of the points: " + "; ".join(parts) + f"{family}.") if parts else ""


@dataclass(frozen=True)
class Contest:
    """Points competing on one figure (a report table's row of K values, or its methods at one T and K):
    `better` +1 where higher wins, -1 where lower does."""

    points: list[PointResult]
    key: str
    better: int


def winners(contests: Sequence[Contest]) -> list[PointResult | None]:
    """Each contest's winner, as a paper would set it in bold, where the rule separates it: the best
    point by its figure, decided against every other point of its contest in the direction that wins.
    One family: every pair within every contest (those not tested counted as in `sweep_answer`)."""
    ordered = [sorted(c.points, key=lambda p: -c.better * p.figures.value(c.key)) for c in contests]
    pairs = sum(len(points) * (len(points) - 1) // 2 for points in ordered)
    compared = [(c, points[0], other) for c, points in zip(contests, ordered) if points for other in points[1:]]
    ratios = [tested(effect_groups(best.units, other.units, c.key), pairs) for c, best, other in compared]
    verdicts = iter(decide(ratios, untested=pairs - len(ratios)))
    wins = {Call.ABOVE: 1, Call.BELOW: -1}
    found: list[PointResult | None] = []
    for contest, points in zip(contests, ordered):
        calls = [wins.get(next(verdicts).call, 0) for _ in points[1:]]
        found.append(points[0] if calls and all(call == contest.better for call in calls) else None)
    return found
