"""Exact output distributions of verifiers, by enumeration: the machinery of the certificates.

A scalar reference verifier makes its random choices through ``Decisions``;
``enumerate_outcomes`` runs it once per branch of its decision tree and weights every leaf
by the exact probability of its choices. ``round_outcomes`` also enumerates every draft (K
i.i.d. paths of length L) from an analytic ``ToyModel``, and ``decode_distribution`` chains
rounds (passing the carry) to get the exact distribution of the first N decoded tokens. No
sampling happens anywhere, so a lossless verifier matches the target to rounding error.

Only for tiny instances (V <= 4, L <= 3, K <= 3): the cost is exponential in all of them.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from .decisions import Decisions
from .verdict import Verdict

T = TypeVar("T")
Context = tuple[int, ...]
# reference(paths [K, L], p [K, L+1, V], q [K, L, V], decisions, carry) -> batch-of-one Verdict
Reference = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, Decisions, Any], Verdict]


class ScriptedDecisions:
    """Decisions that follow a script of branch indices, then take the first branch.

    Records every decision's branches (value, probability) so that the enumerator can
    revisit the alternatives.
    """

    def __init__(self, script: list[int]) -> None:
        self.script = script
        self.taken: list[int] = []
        self.branches: list[list[tuple[Any, float]]] = []
        self.prob = 1.0

    def _choose(self, branches: list[tuple[Any, float]]) -> Any:
        depth = len(self.taken)
        index = self.script[depth] if depth < len(self.script) else 0
        self.branches.append(branches)
        self.taken.append(index)
        self.prob *= branches[index][1]
        return branches[index][0]

    def bernoulli(self, prob: float | torch.Tensor) -> bool:
        prob = min(max(float(prob), 0.0), 1.0)
        return self._choose([(value, w) for value, w in ((True, prob), (False, 1.0 - prob)) if w > 0])

    # weights [V]
    def categorical(self, weights: torch.Tensor) -> int:
        weights = weights.to(torch.float64)
        total = float(weights.sum())
        if not total > 0:
            raise ValueError("categorical draw from all-zero weights")
        return self._choose([(int(i), float(weights[i]) / total) for i in weights.nonzero()[:, 0]])


def enumerate_outcomes(run: Callable[[Decisions], T]) -> list[tuple[T, float]]:
    """Every leaf of ``run``'s decision tree with its exact probability (depth-first)."""
    leaves: list[tuple[T, float]] = []
    pending: list[list[int]] = [[]]
    while pending:
        script = pending.pop()
        decisions = ScriptedDecisions(script)
        leaves.append((run(decisions), decisions.prob))
        for depth in range(len(script), len(decisions.taken)):
            for alternative in range(1, len(decisions.branches[depth])):
                pending.append(decisions.taken[:depth] + [alternative])
    return leaves


# ---------------------------------------------------------------- analytic toy models


def _random_distribution(gen: torch.Generator, vocab: int, zeros: bool, one_hot: bool) -> torch.Tensor:
    """A random distribution over ``vocab`` tokens; optionally with zeros or one-hot (T = 0)."""
    weights = torch.rand(vocab, generator=gen, dtype=torch.float64) ** 2 + 1e-3
    if zeros:
        keep = torch.rand(vocab, generator=gen) < 0.6
        keep[torch.randint(vocab, (1,), generator=gen)] = True
        weights = weights * keep
    if one_hot:
        weights = torch.nn.functional.one_hot(weights.argmax(), vocab).to(torch.float64)
    return weights / weights.sum()


@dataclass(frozen=True)
class ToyModel:
    """An analytic next-token model over ``vocab`` tokens.

    ``context``: "free" (one distribution for every prefix), "bigram" (depends on the last
    token) or "full" (a fresh random distribution for every prefix). ``table`` fixes the
    context-free distribution instead of drawing it.
    """

    vocab: int
    seed: int
    context: str = "full"
    zeros: bool = False
    one_hot: bool = False
    table: tuple[float, ...] | None = None

    def __call__(self, prefix: Context) -> torch.Tensor:
        """``[V]`` float64 next-token distribution after ``prefix``."""
        if self.table is not None:
            return torch.tensor(self.table, dtype=torch.float64)
        key = {"free": (), "bigram": prefix[-1:], "full": prefix}[self.context]
        gen = torch.Generator().manual_seed(hash((self.seed, len(key), key)) & 0x7FFFFFFF)
        return _random_distribution(gen, self.vocab, self.zeros, self.one_hot)


@dataclass(frozen=True)
class RoundDraft:
    """A round's draft law over its drafted prefixes, read as a model of whole prefixes (context first)."""

    vocab: int
    context: Context
    law: Callable[[Context, Context], torch.Tensor]  # (context, drafted prefix) -> [V]

    def __call__(self, prefix: Context) -> torch.Tensor:
        return self.law(self.context, prefix[len(self.context) :])


@dataclass(frozen=True)
class SelectorToy:
    """A DFlash2-shaped draft (`speculab.drafting.selector`): at depth d of a round after ``context``,
    ``k`` candidate tokens drawn from the context and d alone, and a distribution over them that
    depends on the token before (the context's last token at d = 0) and on the context; one-hot at
    the largest with ``one_hot`` (T = 0, the best path)."""

    vocab: int
    seed: int
    k: int
    one_hot: bool = False

    def at(self, context: Context) -> RoundDraft:
        return RoundDraft(self.vocab, context, self._law)

    def _law(self, context: Context, drafted: Context) -> torch.Tensor:
        depth = len(drafted)
        # Integer tags, not strings: a str's hash is salted per process (PYTHONHASHSEED), an int tuple's is not.
        gen = torch.Generator().manual_seed(hash((self.seed, 0, context, depth)) & 0x7FFFFFFF)
        candidates = torch.randperm(self.vocab, generator=gen)[: self.k]
        before = drafted[-1] if drafted else (context[-1] if context else -1)
        gen = torch.Generator().manual_seed(hash((self.seed, 1, context, depth, before)) & 0x7FFFFFFF)
        weights = _random_distribution(gen, self.k, False, self.one_hot)
        return torch.zeros(self.vocab, dtype=torch.float64).index_put_((candidates,), weights)


Draft = ToyModel | RoundDraft


def sequence_probability(model: Draft, context: Context, tokens: Context) -> float:
    """The model's probability of ``tokens`` after ``context``."""
    prob = 1.0
    for i, token in enumerate(tokens):
        prob *= float(model(context + tokens[:i])[token])
    return prob


def path_distribution(model: Draft, context: Context, length: int) -> Iterator[tuple[Context, float]]:
    """Every path of ``length`` tokens with positive probability after ``context``."""
    for tokens in itertools.product(range(model.vocab), repeat=length):
        prob = sequence_probability(model, context, tokens)
        if prob > 0:
            yield tokens, prob


def target_distribution(target: ToyModel, length: int, context: Context = ()) -> dict[Context, float]:
    """The target's exact distribution of the next ``length`` tokens."""
    return dict(path_distribution(target, context, length))


# ---------------------------------------------------------------- verifier rounds


def verifier_inputs(
    target: ToyModel, draft: Draft, context: Context, paths: tuple[Context, ...]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The contract's per-prompt tensors: paths ``[K, L]``, p ``[K, L+1, V]``, q ``[K, L, V]``."""
    p = torch.stack([torch.stack([target(context + path[:t]) for t in range(len(path) + 1)]) for path in paths])
    q = torch.stack([torch.stack([draft(context + path[:t]) for t in range(len(path))]) for path in paths])
    return torch.tensor(paths, dtype=torch.int64), p, q


def carry_key(carry: Any) -> tuple:
    """A hashable snapshot of a carry's tensors (None for no carry)."""
    if carry is None:
        return ()
    return tuple(tuple(torch.as_tensor(getattr(carry, f.name)).flatten().tolist()) for f in dataclasses.fields(carry))


@dataclass
class RoundOutcome:
    """One distinct result of a verification round, with its exact probability."""

    tokens: Context
    carry: Any
    prob: float


def round_outcomes(
    reference: Reference,
    target: ToyModel,
    draft: Any,
    paths: int,
    length: int,
    context: Context = (),
    carry: Any = None,
) -> list[RoundOutcome]:
    """Exact distribution of one round: every draft of ``paths`` i.i.d. paths, every decision."""
    merged: dict[tuple, RoundOutcome] = {}
    # a selector-shaped draft's law depends on where the round starts; any other model reads whole prefixes
    drafts = draft.at(context) if isinstance(draft, SelectorToy) else draft
    singles = list(path_distribution(drafts, context, length))
    for draft_set in itertools.product(singles, repeat=paths):
        draft_prob = 1.0
        for _, prob in draft_set:
            draft_prob *= prob
        tensors = verifier_inputs(target, drafts, context, tuple(path for path, _ in draft_set))
        for verdict, prob in enumerate_outcomes(lambda d: reference(*tensors, d, carry)):
            tokens = tuple(verdict.rows()[0])
            key = (tokens, carry_key(verdict.carry))
            outcome = merged.setdefault(key, RoundOutcome(tokens, verdict.carry, 0.0))
            outcome.prob += draft_prob * prob
    return list(merged.values())


def extended_distribution(
    outcomes: list[RoundOutcome], target: ToyModel, length: int, context: Context = ()
) -> dict[Context, float]:
    """Extend every outcome to ``length`` tokens by sampling the target (target matching)."""
    dist: dict[Context, float] = defaultdict(float)
    for outcome in outcomes:
        head = outcome.tokens[:length]
        for tail, prob in path_distribution(target, context + head, length - len(head)):
            dist[head + tail] += outcome.prob * prob
    return dict(dist)


def expected_accepted(outcomes: list[RoundOutcome]) -> float:
    """E[tau] of one round."""
    return sum(o.prob * (len(o.tokens) - 1) for o in outcomes)


def decode_distribution(
    reference: Reference, target: ToyModel, draft: ToyModel | SelectorToy, paths: int, length: int, tokens: int
) -> dict[Context, float]:
    """Exact distribution of the first ``tokens`` tokens of speculative decoding, carry included."""
    dist: dict[Context, float] = defaultdict(float)
    frontier: dict[tuple, RoundOutcome] = {((), ()): RoundOutcome((), None, 1.0)}
    while frontier:
        state = frontier.pop(min(frontier, key=lambda key: len(key[0])))
        if len(state.tokens) >= tokens:
            dist[state.tokens[:tokens]] += state.prob
            continue
        for outcome in round_outcomes(reference, target, draft, paths, length, state.tokens, state.carry):
            context = state.tokens + outcome.tokens
            key = (context, carry_key(outcome.carry))
            nxt = frontier.setdefault(key, RoundOutcome(context, outcome.carry, 0.0))
            nxt.prob += state.prob * outcome.prob
    return dict(dist)


def max_difference(a: dict[Context, float], b: dict[Context, float]) -> float:
    """The largest absolute difference between two distributions over token tuples."""
    return max(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


def acceptance_bound(target: ToyModel, draft: ToyModel, length: int, paths: int = 1) -> float:
    """SpecTr-GBV Lemma 5.1: sum over prefixes x^l (l <= L) of p(x^l) [1 - (1 - min(q/p, 1))^K].

    In BV names (p target, q draft). For K = 1 it is sum min(p(x^l), q(x^l)), the one-round
    expected accepted length of greedy block verification (BV Lemma 9, App. C.3).
    """
    total = 0.0
    for level in range(1, length + 1):
        for prefix, p_mass in path_distribution(target, (), level):
            ratio = min(sequence_probability(draft, (), prefix) / p_mass, 1.0)
            total += p_mass * (1.0 - (1.0 - ratio) ** paths)
    return total
