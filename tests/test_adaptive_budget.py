"""`algorithm.budget=auto` (`core.adaptive_budget`): the nested trees its estimator stands on, the counts, the
choice, the engine's rounds at the budgets it chose, the config's lines, the names and the figures. The law
of the tokens under the policy is certified in tests/verify/test_adaptive_budget_certificates.py."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from speculab.config import ConfigError, validate
from speculab.config.algorithm import BUDGETS
from speculab.core.adaptive import EXPLORE_EVERY, EXPLORE_TRIALS, WARM_UP_TRIES, Observed
from speculab.core.adaptive_budget import AdaptiveBudget, BudgetCounts, budget_warm_up
from speculab.core.engine import decode
from speculab.drafting.best_first import best_first_tree, best_first_tree_levels, best_first_tree_reference
from speculab.drafting.ddtree import TreeDrafter, tree_builder
from speculab.drafting.selector import SelectorLaw, selector_tree
from speculab.registry import get_verifier
from speculab.results.figures import adaptive_figures
from speculab.results.point import PointShape
from speculab.verify.ddtree_walk import ddtree_walk
from support.configs import load
from support.engine import TOY_PROMPTS, settings, toy_roles

BUILDERS = (best_first_tree, best_first_tree_levels, best_first_tree_reference)


@pytest.mark.parametrize("build", BUILDERS, ids=lambda b: b.__name__)
@pytest.mark.parametrize("vocab", [5, 300])
def test_the_tree_of_b_nodes_is_the_first_b_of_any_larger_one(build, vocab: int) -> None:
    """What lets a round at B tell every b <= B: its nodes numbered in pop order, the smaller tree a prefix."""
    gen = torch.Generator().manual_seed(vocab)
    q = torch.softmax(torch.randn(3, 5, vocab, generator=gen) * 3, dim=-1)
    root = torch.tensor([0, 1, 2])
    big = build(q, root, 256)
    for budget in (16, 32, 64, 128):
        small = build(q, root, budget)
        n = small.tokens.shape[1]
        assert torch.equal(small.tokens, big.tokens[:, :n]) and torch.equal(small.parents, big.parents[:, :n])


def test_a_selector_tree_nests_too() -> None:
    gen = torch.Generator().manual_seed(5)
    candidates = torch.stack([torch.randperm(40, generator=gen)[:6] for _ in range(4)])[None]  # [1, L=4, K=6]
    conditionals = torch.softmax(torch.randn(1, 4, 6, 6, generator=gen) * 2, dim=-1)
    law, root = SelectorLaw(candidates, conditionals, 40), torch.tensor([3])
    big = selector_tree(law, root, 200)
    for budget in (16, 64):
        small = selector_tree(law, root, budget)
        n = small.tokens.shape[1]
        assert torch.equal(small.tokens, big.tokens[:, :n]) and torch.equal(small.parents, big.parents[:, :n])


def test_the_walk_on_a_smaller_tree_accepts_the_larger_walks_nodes_numbered_within_it() -> None:
    """With the same uniforms, the walk on the tree of b nodes accepts exactly the nodes <= b of the walk on
    the tree of B (each token is drawn from p at the node, whatever the node's children): tau(b) is exact."""
    gen = torch.Generator().manual_seed(11)
    V = 4
    table = torch.softmax(torch.randn(V, V, generator=gen) * 2, dim=-1)
    q = torch.softmax(torch.randn(6, 4, V, generator=gen) * 2, dim=-1)
    root = torch.randint(0, V, (6,), generator=gen)
    big = best_first_tree(q, root, 64)
    for seed in range(10):
        walked = ddtree_walk(big, table[big.tokens], rng=torch.Generator().manual_seed(seed))
        nodes = big.path_nodes[torch.arange(6), walked.path]  # [6, L+1]
        for budget in (2, 5, 16):
            small = best_first_tree(q, root, budget)
            on_small = ddtree_walk(small, table[small.tokens], rng=torch.Generator().manual_seed(seed))
            for row in range(6):
                accepted = nodes[row, 1 : int(walked.num_tokens[row])].tolist()
                assert int(on_small.num_tokens[row]) - 1 == sum(node <= budget for node in accepted)


def test_counts_tell_each_rung_its_rows_and_tokens() -> None:
    counts = BudgetCounts((16, 32, 64))
    counts.observe(32, [[3, 20], [17], []])  # rows that accepted nodes 3 and 20, node 17, nothing
    assert counts.rows == [3, 3, 0] and counts.tokens == [2 + 1 + 1, 3 + 2 + 1, 0]  # rung 64: not told by B = 32
    assert counts.base == [4, 4, 0]  # tau(16) + 1 of the rows each rung counted
    assert counts.level(1.0, 1.0) == pytest.approx(5 / 4)
    assert counts.gains([1.0, 1.0, 1.5], 2.0) == pytest.approx([1.0, 8 / 6, 1.5])


def test_warm_up_builds_the_largest_then_the_smallest_and_a_middle_one() -> None:
    policy = AdaptiveBudget(7, BUDGETS)
    chosen = [policy.choose(1).budget for _ in range(3 * WARM_UP_TRIES)]
    assert budget_warm_up(BUDGETS) == (1024, 16, 128)
    assert chosen == [b for b in (1024, 16, 128) for _ in range(WARM_UP_TRIES)]


def warmed(seconds_per_node: float, accepted: list[list[int]]) -> AdaptiveBudget:
    """A policy past its warm-up: every budget measured at 1 + `seconds_per_node` B seconds, and the life's
    rounds at the largest tree accepting `accepted` (each row's nodes)."""
    policy = AdaptiveBudget(7, BUDGETS)
    policy.tried.update({b: WARM_UP_TRIES for b in budget_warm_up(BUDGETS)})
    for budget in (*BUDGETS, *BUDGETS):
        policy.costs.observe(budget, 1, 1 + seconds_per_node * budget)
    for _ in range(EXPLORE_TRIALS):
        policy.observe(Observed(7, [len(row) for row in accepted], BUDGETS[-1], accepted))
    return policy


def test_the_choice_follows_what_a_larger_tree_gains_against_what_it_costs() -> None:
    deep = [[5, 100, 700]]  # a row accepts 1 token at 16 nodes, 2 at 128, 3 at 1024
    assert warmed(1e-5, deep).choose(1).budget == 1024  # nodes nearly free: the largest
    assert warmed(1e-2, deep).choose(1).budget == 16  # a node costs: the 2.5x of 128 is not worth it
    choice = warmed(1e-5, deep).choose(1)
    assert choice.predicted == pytest.approx(4.0, abs=0.1) and choice.length == 7


def test_it_explores_the_rungs_beside_its_choice_by_turns() -> None:
    policy = warmed(1e-2, [[5, 100, 700]])
    chosen = [policy.choose(1).budget for _ in range(4 * EXPLORE_EVERY)]
    explored = [b for i, b in enumerate(chosen) if (i + 1) % EXPLORE_EVERY == 0]
    assert set(chosen) - set(explored) == {16} and explored == [32, 32, 32, 32]  # at the ladder's end: above


def test_a_prefill_restarts_the_units_counts_not_the_life() -> None:
    policy = warmed(1e-2, [[5, 100, 700]])
    policy.observe(Observed(7, [0], 1024, [[]]))
    policy.restart()
    assert policy.units.rows == [0.0] * len(BUDGETS) and policy.life.rows[0] == EXPLORE_TRIALS + 1


def test_the_engine_builds_the_budget_chosen_and_decodes_the_greedy_target_at_t0() -> None:
    target, draft_model = toy_roles(3)
    policy = AdaptiveBudget(3, (1, 2, 4))
    drafter = TreeDrafter(draft_model, tree_builder("best_first", lambda: policy.current))
    s = replace(settings(K=1, L=3, T=0.0, batch=2, max_new=16), tree_nodes=5)
    run = decode(target, drafter, get_verifier("ddtree"), TOY_PROMPTS, s, policy=policy)
    fixed = decode(
        *toy_roles(3)[:1], TreeDrafter(toy_roles(3)[1], tree_builder("best_first", 4)), get_verifier("ddtree"),
        TOY_PROMPTS, s,
    )  # fmt: skip
    assert [p.tokens for p in run.prompts] == [p.tokens for p in fixed.prompts]  # T = 0: the target's argmax
    assert {r.budget for r in run.rounds} == {1, 2, 4}
    assert all(max(r.tree_nodes) <= r.budget + 1 for r in run.rounds)
    figures = adaptive_figures(run)
    assert figures["adaptive_budget_mean"] == pytest.approx(sum(r.budget for r in run.rounds) / len(run.rounds))
    assert "adaptive_length_mean" not in figures and "adaptive_calibration" in figures


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        (["algorithm=ddtree", "drafter=ar_marginals", "algorithm.tree=chain", "algorithm.budget=auto"],
         "algorithm.budget=auto: chooses a best-first tree's budget; algorithm.tree=chain has none"),
        (["algorithm=ddtree", "drafter=ar_marginals", "algorithm.budget=many"],
         "algorithm.budget=many: must be an integer in 16..1024, or auto"),
        (["algorithm=block", "algorithm.budget=auto"], "algorithm.budget='auto': only algorithm=ddtree builds a tree"),
    ],
)  # fmt: skip
def test_auto_budget_is_refused_in_one_line_where_it_cannot_serve(weightless_pair_overrides, overrides, line) -> None:
    with pytest.raises(ConfigError) as err:
        validate(load([*weightless_pair_overrides, *overrides]))
    assert line in str(err.value)
    assert sum("algorithm.budget" in text for text in str(err.value).splitlines()) == 1


def test_auto_budget_validates_and_names_its_point(weightless_pair_overrides) -> None:
    cfg = load([*weightless_pair_overrides, "algorithm=ddtree", "drafter=ar_marginals", "algorithm.budget=auto"])
    validate(cfg)
    shape = PointShape.of(replace(cfg, algorithm=replace(cfg.algorithm, L=4)))
    assert shape.draft == "best_first B=auto" and shape.columns()["budget"] == "auto"
    params = {
        "algorithm.name": "ddtree",
        "algorithm.tree": "best_first",
        "algorithm.budget": "auto",
        "algorithm.L": "4",
    }
    assert PointShape.from_params(params).budgeted == "auto"
    assert "a budget chosen a round (16..1024 nodes)" in shape.drafted
