"""DDTree in the decoding loop: greedy equivalence with autoregressive decoding, cache compaction."""

from __future__ import annotations

import pytest

from speculab.core.autoregressive import autoregressive
from speculab.core.engine import decode
from speculab.drafting.ddtree import TreeDrafter, tree_builder
from speculab.models import DraftModel, LMSpec, TreeTarget
from speculab.verify.ddtree_walk import ddtree_walk
from support.engine import PROMPTS, TOY_PROMPTS, greedy_reference, settings, toy_roles


@pytest.mark.parametrize("tree,budget", [("best_first", 16), ("best_first", 40), ("chain", 0)])
def test_greedy_ddtree_equals_autoregressive(random_llama_pair, tree: str, budget: int) -> None:
    target_path, draft_path = (str(p) for p in random_llama_pair)
    target = TreeTarget(LMSpec("hf", target_path))
    drafter = TreeDrafter(DraftModel(LMSpec("hf", draft_path)), tree_builder(tree, budget))
    s = settings(L=4, batch=3, max_new=14)
    spec = decode(target, drafter, ddtree_walk, PROMPTS, s)
    assert [p.tokens for p in spec.prompts] == [p.tokens for p in autoregressive(target, PROMPTS, s).prompts]
    assert spec.prompts[1].tokens == greedy_reference(target_path, PROMPTS[1], s.max_new_tokens)
    assert all(n <= 1 + max(budget, 4) for r in spec.rounds for n in r.tree_nodes)
    # Every round builds a tree, inside its draft phase, after the drafter's forward pass.
    assert all(0 < r.time_tree_build_s < r.time_draft_s for r in spec.rounds)


def test_chain_from_the_target_itself_is_accepted_whole_at_t0(random_llama_pair) -> None:
    """ar_marginals of the target = the target's greedy path: the walk accepts all L (and the
    KV compaction of one round leaves the next round's probabilities right)."""
    target_path = str(random_llama_pair[0])
    target = TreeTarget(LMSpec("hf", target_path))
    drafter = TreeDrafter(DraftModel(LMSpec("hf", target_path)), tree_builder("chain", 0))
    run = decode(target, drafter, ddtree_walk, PROMPTS[:2], settings(L=3, batch=2, max_new=12))
    assert all(tau == 3 for r in run.rounds for tau in r.accepted)


def test_ddtree_sampling_runs_and_is_seeded() -> None:
    target, inner = toy_roles(3)
    drafter = TreeDrafter(inner, tree_builder("best_first", 8))
    runs = [
        [
            p.tokens
            for p in decode(target, drafter, ddtree_walk, TOY_PROMPTS, settings(T=1.0, L=3, seed=s, max_new=20)).prompts
        ]
        for s in (1, 1, 2)
    ]
    assert runs[0] == runs[1] != runs[2]
