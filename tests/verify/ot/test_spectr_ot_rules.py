"""`algorithm=spectr` with an optimal-transport node rule: lossless tree walk, engine contract."""

from __future__ import annotations

import pytest
import torch

from speculab.registry import SPECTR_NODE_RULES, get_verifier
from speculab.verify.exact import ToyModel, extended_distribution, max_difference, round_outcomes, target_distribution
from speculab.verify.multidraft_walk import multidraft_walk_reference
from speculab.verify.ot import OT_NODE_RULES

# Exact solvers are lossless; global resolution is within 15 tau of p in L1 per node (Lemma 6.6,
# tau = 1e-3), so within 15 tau per emitted token over the whole walk.
TOLERANCE = {"lp": 1e-9, "maxflow": 1e-9, "maxflow_opt": 1e-9, "global_resolution": 15e-3}


@pytest.mark.parametrize("rule", sorted(OT_NODE_RULES))
@pytest.mark.parametrize(("vocab", "paths", "length"), [(3, 2, 2), (2, 3, 2)])
def test_multidraft_walk_with_ot_rule_matches_the_target(rule: str, vocab: int, paths: int, length: int) -> None:
    target, draft = ToyModel(vocab, 31, "bigram"), ToyModel(vocab, 32, "bigram")
    outcomes = round_outcomes(multidraft_walk_reference(OT_NODE_RULES[rule]), target, draft, paths, length)
    exact = extended_distribution(outcomes, target, length + 1)
    assert max_difference(exact, target_distribution(target, length + 1)) < TOLERANCE[rule] * (length + 1)


@pytest.mark.parametrize("rule", SPECTR_NODE_RULES)
def test_every_node_rule_follows_the_verifier_contract(rule: str) -> None:
    gen = torch.Generator().manual_seed(0)
    B, K, L, V = 3, 3, 2, 5
    p = torch.softmax(torch.randn(B, K, L + 1, V, generator=gen), -1)
    q = torch.softmax(torch.randn(B, K, L, V, generator=gen), -1)
    paths = torch.multinomial(q.reshape(-1, V), 1, generator=gen).reshape(B, K, L)
    verdict = get_verifier("spectr", rule)(paths, p, q, rng=gen)
    assert verdict.tokens.shape == (B, L + 1) and verdict.num_tokens.shape == (B,)
    for b, row in enumerate(verdict.rows()):
        assert row[:-1] == paths[b, verdict.path[b], : len(row) - 1].tolist()


def test_node_rule_is_refused_for_other_algorithms() -> None:
    with pytest.raises(ValueError, match="only algorithm=spectr"):
        get_verifier("block", "lp")
    with pytest.raises(ValueError, match="algorithm.node_rule='nope'"):
        get_verifier("spectr", "nope")
