"""Adaptive draft length (`algorithm.L=auto`): before each round, the length L in 0..L_max (0: one
autoregressive step, nothing drafted) that maximises the expected tokens per second of the round.

Two online estimates feed the objective E[tokens | L] / seconds(L, rows) (docs/algorithms.md, "Adaptive
draft length"):

- `DepthCounts`, acceptance by depth from the unit's own rounds, started afresh at each prefill: at each
  depth j the rounds that drafted it and reached it (tau >= j - 1) and those that accepted it (tau >= j);
  a depth's rate is shrunk towards the same depth's over the loop's life, and that towards the life's
  pooled rate, itself from an optimistic prior, so a fresh unit starts where the units before it left off
  and a depth never drafted takes the pooled rate (and is tried when it makes it pay);
- `CostFit`, a round's seconds by its length and rows from the rounds the loop's phase clock closed
  (`PhaseClock.finished`): their moving mean where enough were measured, else least squares on the length
  and rows, kept for the loop's life (a point's units and repeats) with a slow decay;
- the draft's catch-up on a unit it has not read (its deferred prefill, `core.engine`), in seconds a token
  read: a round that drafts first in a unit pays it once, so before then a drafting length is priced with
  the catch-up spread over the tokens the unit has left (`Unread`).

Warm-up: the policy's first rounds draft a fixed set of lengths; after that a neighbour of its choice every
EXPLORE_EVERY rounds (EXPLORE_YOUNG while the loop's life holds few trials of depth 1: `AdaptiveLength.choose`).

The policy sees only the past (earlier rounds' lengths, accepted lengths and times, and the carry a
verifier left), never the round's own draws: a round of any fixed length is lossless given its past, so
the decode's output follows the target (certified by enumeration: tests/verify/test_adaptive_certificates.py).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from speculab.core.clock import Closed
from speculab.verify.modification import ModifiedTarget

PRIOR_RATE = 0.8  # the pooled acceptance rate before any round: optimistic, so that drafting is tried
PRIOR_WEIGHT = 2.0  # ... worth this many draft tokens
DEPTH_WEIGHT = 4.0  # a depth's rate shrinks towards its prior with this many pseudo-trials
COST_DECAY = 0.995  # per round observed: a round's weight in the cost fit halves after about 140 rounds
RIDGE = 1e-9  # relative ridge of the cost fit: features a loop never varied (its rows, say) stay solvable
COST_FEATURES = 6  # `cost_features`
WARM_UP_TRIES = 2  # rounds of each warm-up length: the fit leaves a length's first out (`CostFit.observe`)
EXPLORE_EVERY = 16  # every so many rounds chosen by the objective, a neighbour of the choice instead
EXPLORE_TRIALS = 32  # ... off a choice of 0 before the draft read the unit, while depth 1 has fewer trials in life
EXPLORE_YOUNG = 4  # ... and meanwhile every so many rounds: a young life's few trials are what its rates stand on
MEASURED_ROUNDS = 4  # rounds at a length and rows from which their mean prices them, not the fit
MEAN_RATE = 0.05  # ... a moving mean over about the last 20 of them
REFIT_EVERY = 8  # rounds between two cost fits: the fit moves slowly, and a fit is most of the policy's time


def warm_up(longest: int) -> tuple[int, ...]:
    """The lengths of the policy's first rounds, in its life (not per prefill), WARM_UP_TRIES rounds
    each whatever the estimates say: the longest (acceptance at every depth it reaches), an autoregressive
    step, one token and half the longest, so that the cost fit has seen drafting's fixed cost and its
    slope in L."""
    return tuple(dict.fromkeys((longest, 0, 1, max(1, longest // 2))))


@dataclass
class DepthCounts:
    """Acceptance by depth over some rounds (a unit's since its prefill, or the loop's life), pooled over
    the batch's rows."""

    longest: int
    trials: list[float] = field(default_factory=list)  # [L_max] rounds that drafted depth j and reached it
    accepted: list[float] = field(default_factory=list)  # [L_max] of those, the rounds that accepted it

    def __post_init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        self.trials, self.accepted = [0.0] * self.longest, [0.0] * self.longest

    def observe(self, length: int, taus: list[int]) -> None:
        """A round that drafted `length` tokens and accepted `taus` (one a row)."""
        for tau in taus:
            for j in range(min(tau + 1, length)):  # depth j + 1 was reached
                self.trials[j] += 1
                self.accepted[j] += tau > j

    def pooled(self) -> float:
        """The rate over every depth, shrunk towards PRIOR_RATE."""
        return (sum(self.accepted) + PRIOR_RATE * PRIOR_WEIGHT) / (sum(self.trials) + PRIOR_WEIGHT)

    def rates(self, prior: list[float]) -> list[float]:
        """[L_max] conditional acceptance at each depth: its counts shrunk towards `prior` (one a depth)."""
        return [(a + r * DEPTH_WEIGHT) / (n + DEPTH_WEIGHT) for a, n, r in zip(self.accepted, self.trials, prior)]


def expected_tokens(rates: list[float]) -> list[float]:
    """[L_max + 1] E[tau + 1] of a round that drafts L = 0..L_max tokens: 1 + sum over l <= L of
    prod_{j <= l} rate_j."""
    totals, reach = [1.0], 1.0
    for rate in rates:
        reach *= rate
        totals.append(totals[-1] + reach)
    return totals


def cost_features(size: int, rows: int) -> list[float]:
    """A round's cost features: a fixed cost and a drafting round's (the draft's catch-up pass), the
    slope in its draft's size n (L tokens of one path: draft steps and target nodes; or a tree's budget B:
    target nodes and the build), each also per row (a batch's rows share a pass)."""
    drafts = float(size > 0)
    return [1.0, drafts, float(size), float(rows), rows * drafts, float(rows * size)]


@dataclass
class Measured:
    """Rounds of one draft size and rows: their count and the moving mean of their seconds (the mean of the
    first 1 / MEAN_RATE rounds, then an exponential moving average at MEAN_RATE)."""

    count: int = 0
    mean: float = 0.0

    def add(self, seconds: float) -> None:
        self.count += 1
        self.mean += (seconds - self.mean) * max(1.0 / self.count, MEAN_RATE)


@dataclass
class CostFit:
    """Seconds of a round by its draft's size n (`cost_features`: a path's length L, a tree's budget B) and
    rows: the moving mean of the rounds measured at that size and rows where MEASURED_ROUNDS or more were,
    else weighted least squares on `cost_features` (the weights decaying by COST_DECAY a round; sufficient
    statistics: each update is O(1), a fit, a 6 x 6 solve, every REFIT_EVERY rounds), which a line in n may
    fit ill near the sizes the policy chooses between."""

    gram: np.ndarray = field(default_factory=lambda: np.zeros((COST_FEATURES, COST_FEATURES)))
    moment: np.ndarray = field(default_factory=lambda: np.zeros(COST_FEATURES))
    sizes: set[int] = field(default_factory=set)  # the sizes with an observation in the fit
    first_seen: set[int] = field(default_factory=set)  # the sizes whose first round was left out
    beta: list[float] | None = None  # [COST_FEATURES] the fit (None: none yet)
    unfitted: int = 0  # rounds observed since the last fit
    measured: dict[tuple[int, int], Measured] = field(default_factory=dict)  # (size, rows) -> its rounds

    def observe(self, size: int, rows: int, seconds: float) -> None:
        """A round's seconds (a catch-up's left out: `AdaptiveLength.catch_up`); a size's first round is
        left out too: its one-off costs (allocations, kernels first run for its shapes), kept, would price
        that size off the policy's choice."""
        if size not in self.first_seen:
            self.first_seen.add(size)
            return
        x = np.array(cost_features(size, rows))
        self.gram = COST_DECAY * self.gram + np.outer(x, x)
        self.moment = COST_DECAY * self.moment + x * seconds
        if size not in self.sizes:  # a new size refits at once: the warm-up's fit must see it
            self.beta = None
        self.sizes.add(size)
        self.unfitted += 1
        self.measured.setdefault((size, rows), Measured()).add(seconds)

    @property
    def ready(self) -> bool:
        """Whether the fit has seen two drafted sizes (its slope in n)."""
        return len(self.sizes - {0}) >= 2

    def seconds(self, sizes: Sequence[int], rows: int) -> list[float]:
        """Predicted seconds of a round at each of `sizes` with `rows` rows."""
        if self.beta is None or self.unfitted >= REFIT_EVERY:
            self.unfitted = 0
            ridge = RIDGE * float(np.trace(self.gram)) / COST_FEATURES
            self.beta = np.linalg.solve(self.gram + ridge * np.eye(COST_FEATURES), self.moment).tolist()
        # the fit at `rows`, as a line in n: a round's fixed cost, a drafting one's, and a draft node's
        b = self.beta
        fixed, drafting, node = b[0] + b[3] * rows, b[1] + b[4] * rows, b[2] + b[5] * rows
        line = [fixed + drafting * (n > 0) + node * n for n in sizes]
        found = [self.measured.get((n, rows)) for n in sizes]
        return [m.mean if m is not None and m.count >= MEASURED_ROUNDS else x for m, x in zip(found, line)]


@dataclass(frozen=True)
class Unread:
    """A unit the draft has not read yet: the tokens its catch-up would read (the batch's prompts and what
    its rounds emitted since) and the most tokens a row of it has left to decode."""

    tokens: int
    remaining: int


@dataclass(frozen=True)
class Choice:
    """A round's length, the tokens a row the policy expects of it (its calibration's prediction), and for a
    tree its node budget (0: a path round, or a tree of the config's budget)."""

    length: int
    predicted: float
    budget: int = 0


@dataclass(frozen=True)
class Observed:
    """A round's verdict as a policy learns from it: the tokens it drafted a path (L), each row's accepted
    draft tokens (tau), and for a tree its budget and each row's accepted nodes below the root (a best-first
    tree numbers its nodes in pop order: `core.adaptive_budget`)."""

    length: int
    taus: list[int]
    budget: int = 0
    nodes: list[list[int]] = field(default_factory=list)


class Policy(Protocol):
    """What the engine asks of an adaptive policy: `AdaptiveLength` (algorithm.L=auto) or
    `core.adaptive_budget.AdaptiveBudget` (algorithm.budget=auto)."""

    drafts_every_round: bool  # False: a round may draft nothing, so the draft reads a unit once a round drafts
    resting: bool  # the unit's rounds are settled at L = 0 (`AdaptiveLength.resting`)

    def restart(self) -> None: ...
    def measured(self, closed: Closed) -> None: ...
    def choose(self, rows: int, floor: int = 0, unread: Unread | None = None) -> Choice: ...
    def observe(self, observed: Observed) -> None: ...


@dataclass
class AdaptiveLength:
    """The policy: one per decode loop, its costs kept across units, its acceptance restarted at each
    prefill (`restart`). ``longest_first``: a verifier whose carry modifies the next round's first positions
    (greedy block verification): each prefill's first round drafts the longest, which sizes its carry for
    every length after it (`verify.modification.ModifiedTarget`: one slot a position a round may modify)."""

    longest: int  # L_max
    longest_first: bool = False
    depths: DepthCounts = field(init=False)  # the unit's, since its prefill
    life: DepthCounts = field(init=False)  # every unit's, the prior a unit's rates start from
    costs: CostFit = field(default_factory=CostFit)
    catch_up: Measured = field(default_factory=Measured)  # the draft's catch-up on a unit, seconds a token read
    tried: Counter[int] = field(default_factory=Counter)  # rounds of each length in the policy's life
    fresh: bool = True  # no round since the last prefill
    chosen: int = 0  # rounds chosen by the objective
    # L = 0 chosen by the objective for a unit the draft has not read, where no exploring is left: it stays the
    # choice to the unit's end (no round drafts, so the unit's rates stand still, and the catch-up's share,
    # C / remaining a token, only grows), so the policy no longer weighs it (nor the engine reads the clock)
    resting: bool = False
    drafts_every_round: bool = field(default=False, init=False)  # L = 0 drafts nothing

    def __post_init__(self) -> None:
        self.depths, self.life = DepthCounts(self.longest), DepthCounts(self.longest)

    def measured(self, closed: Closed) -> None:
        """A round the phase clock closed: its seconds by length and rows, and a catch-up's seconds a token
        read apart (a unit's catch-up is no cost of the length that paid it, but one of its own)."""
        record = closed.record
        self.costs.observe(record.length, record.rows, closed.seconds)
        if record.catch_up_tokens:
            self.catch_up.add(closed.catch_up_s / record.catch_up_tokens)

    def rates(self) -> list[float]:
        """[L_max] acceptance at each depth: the unit's counts shrunk towards the loop's life rates, those
        towards the life's pooled rate (itself from the optimistic PRIOR_RATE): a fresh unit starts where
        the units before it left off, and moves off as its own rounds come in."""
        life = self.life.rates([self.life.pooled()] * self.longest)
        return self.depths.rates(life)

    def restart(self) -> None:
        """A prefill: acceptance is the new batch's to learn."""
        self.depths.restart()
        self.fresh, self.resting = True, False

    def choose(self, rows: int, floor: int = 0, unread: Unread | None = None) -> Choice:
        """The length of the next round with `rows` rows, at least `floor` (`pending_positions`): the
        longest for a carry's first round, else the first warm-up length tried fewer than WARM_UP_TRIES
        times that `floor` allows, else the best by the objective over the lengths the cost fit can predict
        (0 once measured), every EXPLORE_EVERY-th such round a length next to it, so that the costs keep
        being measured where the choice is made (every EXPLORE_YOUNG-th while the loop's life holds fewer
        than EXPLORE_TRIALS trials of depth 1, so that a warm-up's few rounds are soon outweighed). Where the
        draft has not read the unit (`unread`), a drafting length also pays the catch-up (`_rates`); and no
        exploring off a choice of 0 there (one round's measurement would cost the whole catch-up) once the
        life is past that."""
        expected = expected_tokens(self.rates())
        untried = [n for n in warm_up(self.longest) if self.tried[n] < WARM_UP_TRIES and n >= floor]
        if (self.fresh and self.longest_first) or not (untried or self.costs.ready):
            length = self.longest
        elif untried:
            length = untried[0]
        else:
            lengths = range(max(floor, 0 if 0 in self.costs.sizes else 1), self.longest + 1)
            rate = self._rates(lengths, rows, expected, unread)
            length = lengths[max(range(len(rate)), key=rate.__getitem__)]  # ties: the shorter
            self.chosen += 1
            # a neighbour, below and above by turns (the other at an end)
            young = self.life.trials[0] < EXPLORE_TRIALS
            self.resting = length == 0 and unread is not None and not young
            every = EXPLORE_YOUNG if young else EXPLORE_EVERY
            if self.chosen % every == 0 and (unread is None or length > 0 or young):
                side = 1 if self.chosen // every % 2 == 0 else -1
                length = length + side if length + side in lengths else length - side
        self.tried[length] += 1
        self.fresh = False
        return Choice(length, expected[length])

    def _rates(self, lengths: range, rows: int, expected: list[float], unread: Unread | None) -> list[float]:
        """Expected tokens a second at each of `lengths`, E[tau + 1] / seconds; where the draft has not read
        the unit, a drafting round's seconds also carry its share of the catch-up C: C / remaining for each
        token it is expected to emit, as C is paid once over the remaining / E[tau + 1] rounds of the unit's
        rest at that length (a row's eos can only shorten the rest, so this leans towards drafting)."""
        seconds = self.costs.seconds(lengths, rows)
        share = 0.0  # the catch-up's seconds a token emitted
        if unread is not None and self.catch_up.count:
            share = self.catch_up.mean * unread.tokens / max(unread.remaining, 1)
        totals = [s + share * expected[n] * (n > 0) for n, s in zip(lengths, seconds)]
        return [expected[n] / t if t > 0 else math.inf for n, t in zip(lengths, totals)]

    def observe(self, observed: Observed) -> None:
        """A round's verdict: L drafted, tau accepted in each row."""
        self.depths.observe(observed.length, observed.taus)
        self.life.observe(observed.length, observed.taus)


def pending_positions(carry: Any) -> int:
    """The leading positions of the next round a verifier's carry still modifies, in any row: the next
    round must draft at least as many, so that its extra token's row (position L, which a verifier never
    modifies) is one no carry touches. 0 for no carry."""
    if not isinstance(carry, ModifiedTarget) or carry.remaining.numel() == 0:
        return 0
    return int(carry.remaining.max())
