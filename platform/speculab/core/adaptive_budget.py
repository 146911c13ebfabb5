"""Adaptive tree budget (`algorithm.budget=auto`): before each round, the node budget B of a DDTree, from a
fixed ladder, that maximises the expected tokens per second of the round (docs/algorithms.md, "Adaptive
tree budget").

- Acceptance by budget, `BudgetCounts`. A best-first tree numbers its nodes in pop order, and the tree of b
  nodes is the first b nodes of the tree of any budget above b: the heap pops the same prefixes whatever
  its budget stops it at, a parent before its children (`drafting.best_first`, `drafting.selector`). The
  walk draws each token from the target at the node it stands on (`verify.ddtree_walk`), so on the tree of
  b nodes it would have walked the round's accepted path for as long as the path's nodes are among the
  first b: a round at budget B gives, for every b <= B, tau(b) = the accepted nodes numbered b or less, of
  the law a round at b has. The estimate at b is a level times a gain: the level, the mean of tau(b_1) + 1
  at the smallest rung over every row; the gain at b, tau(b) + 1 over tau(b_1) + 1 summed over the rows of
  the rounds whose budget held b (a ratio on the same rows: the rounds that reach a large rung are the
  policy's choice, made on the unit's past, and their mean alone would read that choice's selection). Each
  the unit's (since its prefill) shrunk towards the loop's life's, as for the draft length.
- Costs, `core.adaptive.CostFit` on the budget (the nodes the target scores beside the root; the tree's
  build grows with it too) and the rows, from the rounds the phase clock closed.

Warm-up: the policy's first rounds build the largest tree (acceptance at every rung), then the smallest
and a middle one (the cost fit's slope in B), WARM_UP_TRIES rounds each. After that the rung above or below
the choice every EXPLORE_EVERY-th round (EXPLORE_YOUNG while the life holds few rows at the rung above):
the rounds at the choice tell every rung below it, only exploring tells the one above.

The policy sees only the past (earlier rounds' budgets, accepted nodes and times), never the round's own
draws, and the walk is lossless for any tree: the decode's output follows the target (certified by
enumeration: tests/verify/test_adaptive_certificates.py).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from speculab.core.adaptive import (
    DEPTH_WEIGHT,
    EXPLORE_EVERY,
    EXPLORE_TRIALS,
    EXPLORE_YOUNG,
    PRIOR_RATE,
    PRIOR_WEIGHT,
    WARM_UP_TRIES,
    Choice,
    CostFit,
    Observed,
    Unread,
    expected_tokens,
)
from speculab.core.clock import Closed


def budget_warm_up(ladder: tuple[int, ...]) -> tuple[int, ...]:
    """The budgets of the policy's first rounds, in its life: the largest (tau at every rung), the smallest
    and a middle one (the cost fit's slope)."""
    return tuple(dict.fromkeys((ladder[-1], ladder[0], ladder[len(ladder) // 2])))


@dataclass
class BudgetCounts:
    """Tokens a row by budget over some rounds (a unit's since its prefill, or the loop's life)."""

    ladder: tuple[int, ...]
    rows: list[float] = field(default_factory=list)  # [rungs] rows of the rounds whose budget held the rung
    tokens: list[float] = field(default_factory=list)  # [rungs] of those, the sum of tau(rung) + 1
    base: list[float] = field(default_factory=list)  # [rungs] of those, the sum of tau(smallest rung) + 1

    def __post_init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        self.rows, self.tokens, self.base = ([0.0] * len(self.ladder) for _ in range(3))

    def observe(self, budget: int, nodes: list[list[int]]) -> None:
        """A round at `budget`: each row's accepted nodes (pop-order numbers, increasing along a path)."""
        for path in nodes:
            base = 1 + sum(node <= self.ladder[0] for node in path)
            for i, rung in enumerate(self.ladder):
                if rung <= budget:
                    self.rows[i] += 1
                    self.tokens[i] += 1 + sum(node <= rung for node in path)
                    self.base[i] += base

    def level(self, prior: float, weight: float) -> float:
        """E[tau + 1] at the smallest rung, shrunk towards `prior` with `weight` pseudo-rows."""
        return (self.tokens[0] + prior * weight) / (self.rows[0] + weight)

    def gains(self, prior: list[float] | None, weight: float) -> list[float]:
        """[rungs] E[tau + 1] at each rung over that at the smallest, on the same rows, shrunk towards
        `prior` (one a rung; None: each towards the rung below's shrunk gain, 1 below the first) with
        `weight` pseudo-tokens at the smallest rung."""
        gains: list[float] = []
        for i, (tokens, base) in enumerate(zip(self.tokens, self.base, strict=True)):
            towards = prior[i] if prior is not None else gains[-1] if gains else 1.0
            gains.append((tokens + towards * weight) / (base + weight))
        return gains


@dataclass
class AdaptiveBudget:
    """The policy: one per decode loop, its costs kept across units, its acceptance restarted at each
    prefill. `current` is the budget of the round it last chose (what the tree drafter builds)."""

    length: int  # L: a tree's depth, fixed
    ladder: tuple[int, ...]  # the budgets it chooses from, ascending
    units: BudgetCounts = field(init=False)  # the unit's, since its prefill
    life: BudgetCounts = field(init=False)  # every unit's, the prior a unit's estimates start from
    costs: CostFit = field(default_factory=CostFit)
    tried: Counter[int] = field(default_factory=Counter)  # rounds at each budget in the policy's life
    chosen: int = 0  # rounds chosen by the objective
    current: int = 0
    resting: bool = field(default=False, init=False)  # every round drafts its tree
    drafts_every_round: bool = field(default=True, init=False)

    def __post_init__(self) -> None:
        self.units, self.life = BudgetCounts(self.ladder), BudgetCounts(self.ladder)
        self.current = self.ladder[-1]

    def estimates(self) -> list[float]:
        """[rungs] E[tau + 1] at each rung, the unit's level times its gains. The unit's level is shrunk
        towards the life's (DEPTH_WEIGHT pseudo-rows), that towards what the draft length's optimistic prior
        expects of L tokens (PRIOR_RATE at every depth; PRIOR_WEIGHT), so that a young life's few rows do
        not read as a tree that accepts nothing; the unit's gains towards the life's, those towards the rung
        below's (a larger tree accepts at least as much), each with as many pseudo-rows at its level."""
        life_level = self.life.level(expected_tokens([PRIOR_RATE] * self.length)[-1], PRIOR_WEIGHT)
        life_gains = self.life.gains(None, PRIOR_WEIGHT * life_level)
        level = self.units.level(life_level, DEPTH_WEIGHT)
        return [level * gain for gain in self.units.gains(life_gains, DEPTH_WEIGHT * level)]

    def restart(self) -> None:
        """A prefill: acceptance is the new batch's to learn."""
        self.units.restart()

    def measured(self, closed: Closed) -> None:
        """A round the phase clock closed: its seconds by budget and rows."""
        self.costs.observe(closed.record.budget, closed.record.rows, closed.seconds)

    def choose(self, rows: int, floor: int = 0, unread: Unread | None = None) -> Choice:
        """The budget of the next round with `rows` rows: the first warm-up budget tried fewer than
        WARM_UP_TRIES times, else the best by E[tau + 1] / seconds over the ladder, every EXPLORE_EVERY-th
        such round (EXPLORE_YOUNG-th while the life holds fewer than EXPLORE_TRIALS rows at the rung above
        the choice) a rung next to it, above and below by turns. ``floor`` and ``unread`` are the draft
        length's (a walk leaves no carry; every round drafts, so the draft reads each unit at its prefill)."""
        assert floor == 0 and unread is None
        expected = self.estimates()
        untried = [b for b in budget_warm_up(self.ladder) if self.tried[b] < WARM_UP_TRIES]
        if untried or not self.costs.ready:
            rung = self.ladder.index(untried[0] if untried else self.ladder[-1])
        else:
            seconds = self.costs.seconds(self.ladder, rows)
            rate = [e / s if s > 0 else float("inf") for e, s in zip(expected, seconds)]
            rung = max(range(len(rate)), key=rate.__getitem__)  # ties: the smaller
            self.chosen += 1
            above = min(rung + 1, len(self.ladder) - 1)
            every = EXPLORE_YOUNG if self.life.rows[above] < EXPLORE_TRIALS else EXPLORE_EVERY
            if self.chosen % every == 0:
                side = 1 if self.chosen // every % 2 == 0 else -1
                rung = rung + side if 0 <= rung + side < len(self.ladder) else rung - side
        self.current = self.ladder[rung]
        self.tried[self.current] += 1
        return Choice(self.length, expected[rung], self.current)

    def observe(self, observed: Observed) -> None:
        """A round's verdict: each row's accepted nodes, at the budget it was chosen at."""
        self.units.observe(observed.budget, observed.nodes)
        self.life.observe(observed.budget, observed.nodes)
