"""Issue 77's certificate for the tree budget (`algorithm.budget=auto`): DDTree's walk stays lossless when each
round's budget is chosen from the past, by the adaptive policy itself (`core.adaptive_budget`) and by a
policy that reads the tokens decoded so far; every walk decision and every path of the policy enumerated on
toy models over a 3-token vocabulary (`verify.exact`), each round's tree built by the engine's own builder
from the draft's marginals along its greedy continuation (the `ar_marginals` drafter). And the machinery
catches a budget chosen from the round's own walk (a round walked again on a larger tree when it accepted
nothing): that one is not lossless."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

from speculab.core.adaptive import WARM_UP_TRIES, Observed
from speculab.core.adaptive_budget import AdaptiveBudget, budget_warm_up
from speculab.drafting.best_first import best_first_tree
from speculab.drafting.tree import DraftTree
from speculab.verify.ddtree_walk import ddtree_walk_reference
from speculab.verify.exact import Context, ToyModel, enumerate_outcomes, max_difference, target_distribution

LADDER = (1, 3, 9)  # the toy's budgets: its trees hold at most 3 + 9 + 27 nodes at depth 3
DEPTH = 3  # L: the depth of every round's tree
TOKENS = 4  # the decoded prefix whose law is certified
History = tuple[tuple[int, tuple[int, ...]], ...]  # (budget, accepted nodes) of each round so far
# the next round's budget from what a policy may see: the tokens so far and the rounds so far
BudgetPolicy = Callable[[Context, History], int]


@dataclass
class State:
    tokens: Context
    history: History
    prob: float


def round_tree(draft: ToyModel, context: Context, budget: int) -> DraftTree:
    """The engine's DDTree of `budget` nodes after `context`: the draft's marginals along its own greedy
    continuation (`drafting.ddtree.greedy_marginals`), rooted at the last token (any token: the walk reads
    the target at each node from the context and the node's path)."""
    qs, path = [], ()
    for _ in range(DEPTH):
        q = draft(context + path)
        qs.append(q.float())
        path += (int(q.argmax()),)
    root = torch.tensor([context[-1] if context else 0])
    return best_first_tree(torch.stack(qs)[None], root, budget)


def walk_outcomes(
    target: ToyModel, draft: ToyModel, context: Context, budget: int
) -> list[tuple[Context, Context, float]]:
    """One round's exact outcomes at `budget`: (emitted tokens, accepted nodes, probability) of every walk."""
    tree = round_tree(draft, context, budget)
    tokens, children = tree.tokens[0], tree.children(0)

    def below(node: int) -> Context:  # the tokens from the root's child down to `node`
        up = []
        while node > 0:
            up.append(int(tokens[node]))
            node = int(tree.parents[0, node])
        return tuple(reversed(up))

    p = torch.stack([target(context + below(n)) for n in range(tokens.shape[0])])  # [N, V]
    outcomes = []
    for (nodes, extra), prob in enumerate_outcomes(lambda d: ddtree_walk_reference(tokens, children, p, d)):
        outcomes.append((below(nodes[-1]) + (extra,), tuple(nodes[1:]), prob))
    return outcomes


def budget_distribution(
    target: ToyModel, draft: ToyModel, policy: BudgetPolicy, rewalk: bool = False
) -> dict[Context, float]:
    """The exact law of the first TOKENS tokens when `policy` picks each round's budget; with `rewalk`, a
    round that accepts nothing is walked again on the largest tree (a budget chosen from its own walk)."""
    law: dict[Context, float] = defaultdict(float)
    frontier: dict[tuple, State] = {((), ()): State((), (), 1.0)}
    while frontier:
        state = frontier.pop(min(frontier, key=lambda key: len(key[0])))
        if len(state.tokens) >= TOKENS:
            law[state.tokens[:TOKENS]] += state.prob
            continue
        budget = policy(state.tokens, state.history)
        outcomes = []
        for emitted, nodes, prob in walk_outcomes(target, draft, state.tokens, budget):
            if rewalk and not nodes:
                again = walk_outcomes(target, draft, state.tokens, LADDER[-1])
                outcomes += [(e, n, prob * p, LADDER[-1]) for e, n, p in again]
            else:
                outcomes.append((emitted, nodes, prob, budget))
        for emitted, nodes, prob, used in outcomes:
            tokens, history = state.tokens + emitted, (*state.history, (used, nodes))
            frontier.setdefault((tokens, history), State(tokens, history, 0.0)).prob += state.prob * prob
    return dict(law)


def adaptive_policy(tokens: Context, history: History) -> int:
    """The policy the engine runs, rebuilt from the history: costs measured in an earlier unit (a round
    1 + 0.1 B seconds, so that the best budget turns on the acceptance it has seen), its warm-up done there
    too (at the largest budget, accepting nothing), and this unit's rounds observed."""
    policy = AdaptiveBudget(DEPTH, LADDER)
    for budget in (*LADDER, *LADDER):  # a size's first round is left out
        policy.costs.observe(budget, 1, 1 + 0.1 * budget)
    policy.tried.update({budget: WARM_UP_TRIES for budget in budget_warm_up(LADDER)})
    policy.life.observe(LADDER[-1], [[], [1]])
    policy.chosen = len(history)
    for budget, nodes in history:
        policy.observe(Observed(DEPTH, [len(nodes)], budget, [list(nodes)]))
    return policy.choose(1).budget


def token_policy(tokens: Context, history: History) -> int:
    """A policy that reads the decoded tokens' values: the budget indexed by their sum plus the rounds so far."""
    return LADDER[(sum(tokens) + len(history)) % len(LADDER)]


def spied(policy: BudgetPolicy, seen: set[int]) -> BudgetPolicy:
    def choose(tokens: Context, history: History) -> int:
        seen.add(budget := policy(tokens, history))
        return budget

    return choose


@pytest.mark.parametrize("policy", [adaptive_policy, token_policy])
@pytest.mark.parametrize("context", ["bigram", "full"])
def test_a_budget_chosen_from_the_past_leaves_the_target_law(policy: BudgetPolicy, context: str) -> None:
    target, draft = ToyModel(3, 51, context), ToyModel(3, 52, context)
    seen: set[int] = set()
    law = budget_distribution(target, draft, spied(policy, seen))
    assert max_difference(law, target_distribution(target, TOKENS)) < 1e-9
    assert len(seen) >= 2  # the certificate is of a policy that moves, not of one budget


def test_a_budget_chosen_from_the_rounds_own_walk_is_caught() -> None:
    """Walking a round again on a larger tree when the first walk accepted nothing resamples the target's
    draw until it lands in the tree: the enumeration sees it, so the certificate above has teeth."""
    target, draft = ToyModel(3, 51, "bigram"), ToyModel(3, 52, "bigram")
    law = budget_distribution(target, draft, lambda tokens, history: LADDER[0], rewalk=True)
    assert max_difference(law, target_distribution(target, TOKENS)) > 1e-3
