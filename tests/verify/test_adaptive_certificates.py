"""Issue 77's certificate: token, block and greedy block verification stay lossless when each round's draft
length is chosen from the past (`algorithm.L=auto`), by the adaptive policy itself (`core.adaptive`) and by
a policy that reads the tokens decoded so far; every draft, every decision and every path of the policy
enumerated on toy models over a 3-token vocabulary (`verify.exact`). A round of length 0 is the engine's
autoregressive step: a token drawn from the target, the carry kept (`core.engine.sample_target`). And the
same machinery catches a policy that reads the round's own draft: its output is not the target's, unless
it only ends the round: a confidence stop (`algorithm.confidence_stop`), after a token whose draft
probability is below a threshold, is a stopping time of the draft, lossless for token and block
verification (alone and under the adaptive policy) and biased for greedy block, which is refused it."""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from speculab.core.adaptive import WARM_UP_TRIES, AdaptiveLength, Observed, pending_positions, warm_up
from speculab.registry import ADAPTIVE_ALGORITHMS, STOP_ALGORITHMS, get_algorithm, get_reference
from speculab.verify.exact import (
    Context,
    Reference,
    RoundOutcome,
    ToyModel,
    carry_key,
    enumerate_outcomes,
    extended_distribution,
    max_difference,
    round_outcomes,
    sequence_probability,
    target_distribution,
    verifier_inputs,
)

LONGEST = 3  # L_max: the enumeration's cost grows as V^L
TOKENS = 4  # the decoded prefix whose law is certified
History = tuple[tuple[int, int], ...]  # (L, tau) of each round so far
# the next round's length from what a policy may see: the tokens so far, the rounds so far, the carry
Policy = Callable[[Context, History, Any], int]


@dataclass
class State:
    tokens: Context
    carry: Any
    history: History
    prob: float


def autoregressive_step(target: ToyModel, context: Context, carry: Any) -> list[RoundOutcome]:
    """A round that drafts nothing: one token from the target, the carry passed on as it was."""
    p = target(context)
    return [RoundOutcome((y,), carry, float(p[y])) for y in range(target.vocab) if p[y] > 0]


def stopped_paths(draft: ToyModel, context: Context, longest: int, stop: float) -> list[tuple[Context, float]]:
    """Every path the confidence stop lets a round draft after `context` (at most `longest` tokens, ended after
    the first token whose draft probability is below `stop`), with its probability under the draft."""
    ended: list[tuple[Context, float]] = []
    grown: list[tuple[Context, float]] = [((), 1.0)]
    while grown:
        path, prob = grown.pop()
        q = draft(context + path)
        for y in (y for y in range(draft.vocab) if q[y] > 0):
            longer = (path + (y,), prob * float(q[y]))
            (ended if len(path) + 1 == longest or float(q[y]) < stop else grown).append(longer)
    return ended


def stopped_round(
    reference: Reference, target: ToyModel, draft: ToyModel, length: int, stop: float, context: Context, carry: Any
) -> list[RoundOutcome]:
    """One round's exact outcomes under a confidence stop: every path it drafts, every decision."""
    outcomes = []
    for path, weight in stopped_paths(draft, context, length, stop):
        tensors = verifier_inputs(target, draft, context, (path,))
        for verdict, prob in enumerate_outcomes(lambda d: reference(*tensors, d, carry)):
            outcomes.append(RoundOutcome(tuple(verdict.rows()[0]), verdict.carry, weight * prob))
    return outcomes


def adaptive_distribution(
    reference: Reference, target: ToyModel, draft: ToyModel, policy: Policy, stop: float = 0.0
) -> dict:
    """The exact law of the first TOKENS tokens when `policy` picks each round's length (one path), each
    round's path ended by a confidence stop at `stop` (0: none)."""
    law: dict[Context, float] = defaultdict(float)
    frontier: dict[tuple, State] = {((), (), ()): State((), None, (), 1.0)}
    while frontier:
        state = frontier.pop(min(frontier, key=lambda key: len(key[0])))
        if len(state.tokens) >= TOKENS:
            law[state.tokens[:TOKENS]] += state.prob
            continue
        length = policy(state.tokens, state.history, state.carry)
        if not length:
            outcomes = autoregressive_step(target, state.tokens, state.carry)
        elif stop:
            outcomes = stopped_round(reference, target, draft, length, stop, state.tokens, state.carry)
        else:
            outcomes = round_outcomes(reference, target, draft, 1, length, state.tokens, state.carry)
        for outcome in outcomes:
            tokens, history = state.tokens + outcome.tokens, (*state.history, (length, len(outcome.tokens) - 1))
            key = (tokens, carry_key(outcome.carry), history)
            frontier.setdefault(key, State(tokens, outcome.carry, history, 0.0)).prob += state.prob * outcome.prob
    return dict(law)


def adaptive_policy(longest_first: bool) -> Policy:
    """The policy the engine runs, rebuilt from the history: costs measured in an earlier unit (a round
    1 + 0.5 L + 0.3 [L > 0] seconds, so that the best length turns on the acceptance it has seen), its
    warm-up done there too, and this unit's rounds observed; each call chooses as the engine's would."""

    def choose(tokens: Context, history: History, carry: Any) -> int:
        policy = AdaptiveLength(LONGEST, longest_first=longest_first)
        for length in (*range(LONGEST + 1), *range(LONGEST + 1)):  # a length's first round is left out
            policy.costs.observe(length, 1, 1 + 0.5 * length + 0.3 * (length > 0))
            policy.costs.observe(length, 2, 1.5 + 0.9 * length + 0.5 * (length > 0))
        policy.tried.update({length: WARM_UP_TRIES for length in warm_up(LONGEST)})
        policy.chosen = len(history)
        for length, tau in history:
            policy.fresh = False
            policy.observe(Observed(length, [tau]))
        return policy.choose(1, floor=pending_positions(carry)).length

    return choose


def token_policy(longest_first: bool) -> Policy:
    """A policy that reads the decoded tokens' values: the length is their sum plus the rounds so far,
    modulo L_max + 1, at least what the carry needs (the longest first where a carry is to be sized)."""

    def choose(tokens: Context, history: History, carry: Any) -> int:
        if longest_first and not history:
            return LONGEST
        return max((sum(tokens) + len(history)) % (LONGEST + 1), pending_positions(carry))

    return choose


def spied(policy: Policy, seen: set[int]) -> Policy:
    """`policy`, adding every length it picks to `seen` (so that a certificate is not of one length)."""

    def choose(tokens: Context, history: History, carry: Any) -> int:
        seen.add(length := policy(tokens, history, carry))
        assert length >= pending_positions(carry)  # what the engine asks of a policy where a carry is pending
        return length

    return choose


@pytest.mark.parametrize("name", ADAPTIVE_ALGORITHMS)
@pytest.mark.parametrize("policy", [adaptive_policy, token_policy])
@pytest.mark.parametrize("context", ["free", "bigram"])
def test_a_length_chosen_from_the_past_leaves_the_target_law(name: str, policy: Any, context: str) -> None:
    target, draft = ToyModel(3, 31, context), ToyModel(3, 32, context)
    seen: set[int] = set()
    law = adaptive_distribution(get_reference(name), target, draft, spied(policy(get_algorithm(name).carry), seen))
    assert max_difference(law, target_distribution(target, TOKENS)) < 1e-9
    assert len(seen) >= 2


def test_greedy_block_needs_the_round_after_to_cover_its_carry() -> None:
    """Why the policy drafts at least `pending_positions`: a round shorter than the positions the carry
    still modifies draws its extra token (or, at L = 0, its one token) from a row no carry touched."""

    def short(tokens: Context, history: History, carry: Any) -> int:
        return LONGEST if not history else (sum(tokens) + len(history)) % (LONGEST + 1)

    target, draft = ToyModel(3, 31, "free"), ToyModel(3, 32, "free")
    law = adaptive_distribution(get_reference("greedy_block"), target, draft, short)
    assert max_difference(law, target_distribution(target, TOKENS)) > 1e-6


def test_the_certificates_cover_every_algorithm_auto_serves() -> None:
    assert ADAPTIVE_ALGORITHMS == ("token", "block", "greedy_block")


def test_a_length_chosen_from_the_rounds_own_draft_is_caught() -> None:
    """A policy that peeks at the round's own draft (two tokens drafted, the second dropped unless it is
    token 0) leaves the target's law, under token and block verification alike: the kept token is then
    drawn from q given what followed it, which the verifier takes for q. The enumeration sees it, so the
    certificates above have teeth."""
    target, draft = ToyModel(3, 41, "free"), ToyModel(3, 42, "free")
    for name in ("token", "block"):
        reference, outcomes = get_reference(name), []
        for drafted in itertools.product(range(3), repeat=2):
            path = drafted if drafted[1] == 0 else drafted[:1]
            tensors = verifier_inputs(target, draft, (), (path,))
            weight = sequence_probability(draft, (), drafted)
            for verdict, prob in enumerate_outcomes(lambda d: reference(*tensors, d, None)):
                outcomes.append(RoundOutcome(tuple(verdict.rows()[0]), None, weight * prob))
        law = extended_distribution(outcomes, target, 3)
        assert max_difference(law, target_distribution(target, 3)) > 1e-3


def fixed(length: int) -> Policy:
    def choose(tokens: Context, history: History, carry: Any) -> int:
        return length

    return choose


@pytest.mark.parametrize("name", STOP_ALGORITHMS)
@pytest.mark.parametrize("policy", ["fixed", "adaptive"])
@pytest.mark.parametrize("context", ["bigram", "full"])
def test_a_confidence_stop_leaves_the_target_law(name: str, policy: str, context: str) -> None:
    """Every path the stop ends short of L_max is in the enumeration (a check below), with a fixed L_max and
    under the adaptive policy's choice of it."""
    stop, target, draft = 0.4, ToyModel(3, 31, context), ToyModel(3, 32, context)
    chooser = fixed(LONGEST) if policy == "fixed" else adaptive_policy(get_algorithm(name).carry)
    law = adaptive_distribution(get_reference(name), target, draft, chooser, stop)
    assert max_difference(law, target_distribution(target, TOKENS)) < 1e-9
    assert {len(path) for path, _ in stopped_paths(draft, (), LONGEST, stop)} == set(range(1, LONGEST + 1))


def test_the_confidence_stop_is_biased_under_greedy_block_which_is_refused_it() -> None:
    """Greedy block's carry modifies the next round's first positions by a law the stop changes: biased,
    whether or not a round drafts at least the positions its carry modifies."""
    assert STOP_ALGORITHMS == ("token", "block")
    target, draft = ToyModel(3, 31, "bigram"), ToyModel(3, 32, "bigram")
    law = adaptive_distribution(get_reference("greedy_block"), target, draft, fixed(LONGEST), 0.5)
    assert max_difference(law, target_distribution(target, TOKENS)) > 1e-3
