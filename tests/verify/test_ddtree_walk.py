"""The DDTree walk: exact losslessness by enumeration, batched == reference, greedy = argmax."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from speculab.drafting.best_first import best_first_tree, chain_tree
from speculab.drafting.tree import DraftTree
from speculab.verify.ddtree_walk import ddtree_walk, ddtree_walk_reference
from speculab.verify.decisions import draw_uniforms, replay_decisions
from speculab.verify.exact import enumerate_outcomes

V = 3


def bigram_p(tree: DraftTree, table: torch.Tensor) -> torch.Tensor:
    """Target probs [B, N, V] of a bigram target: p(. | node) = table[token of node]."""
    return table[tree.tokens]


def random_tree(seed: int, batch: int = 1, length: int = 3, budget: int = 7) -> DraftTree:
    gen = torch.Generator().manual_seed(seed)
    q = torch.softmax(torch.randn(batch, length, V, generator=gen) * 2, dim=-1)
    return best_first_tree(q, torch.randint(0, V, (batch,), generator=gen), budget)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("budget", [1, 4, 9])
def test_walk_is_lossless_by_enumeration(seed: int, budget: int) -> None:
    """Every emitted sequence has exactly its target probability, and so does every n-token
    continuation: P(first n tokens = x) = prod_i p(x_i | x_<i) at T > 0."""
    gen = torch.Generator().manual_seed(50 + seed)
    table = torch.softmax(torch.randn(V, V, generator=gen, dtype=torch.float64), dim=-1)
    tree = random_tree(seed, budget=budget)
    p = bigram_p(tree, table)[0]
    root = int(tree.tokens[0, 0])
    outcomes = enumerate_outcomes(lambda d: ddtree_walk_reference(tree.tokens[0], tree.children(0), p, d))

    def target_prob(seq: tuple[int, ...], last: int) -> float:
        return math.prod(float(table[prev, tok]) for prev, tok in zip((last, *seq), seq))

    n = int(tree.depth[0].max()) + 1
    joint = {x: 0.0 for x in itertools.product(range(V), repeat=n)}
    for (nodes, extra), prob in outcomes:
        emitted = tuple(int(tree.tokens[0, k]) for k in nodes[1:]) + (extra,)
        assert prob == pytest.approx(target_prob(emitted, root), abs=1e-14)
        for x in joint:
            if x[: len(emitted)] == emitted:
                joint[x] += prob * target_prob(x[len(emitted) :], emitted[-1])
    assert sum(prob for _, prob in outcomes) == pytest.approx(1.0, abs=1e-14)
    for x, prob in joint.items():
        assert prob == pytest.approx(target_prob(x, root), abs=1e-14)


def test_batched_walk_equals_reference() -> None:
    gen = torch.Generator().manual_seed(7)
    table = torch.softmax(torch.randn(V, V, generator=gen) * 2, dim=-1)
    tree = random_tree(1, batch=5, length=4, budget=12)
    p = bigram_p(tree, table)
    for seed in range(20):
        verdict = ddtree_walk(tree, p, rng=torch.Generator().manual_seed(seed))
        uniforms = draw_uniforms(torch.Generator().manual_seed(seed), 5, 5, p.device)
        for b in range(5):
            nodes, extra = ddtree_walk_reference(tree.tokens[b], tree.children(b), p[b], replay_decisions(uniforms[b]))
            tokens = [int(tree.tokens[b, k]) for k in nodes[1:]] + [extra]
            assert verdict.rows()[b] == tokens
            path = tree.path_nodes[b, verdict.path[b], : len(nodes)].tolist()
            assert path == nodes


def test_greedy_walk_follows_argmax_on_a_chain() -> None:
    q = torch.tensor([[[0.1, 0.9, 0.0], [0.2, 0.0, 0.8], [0.7, 0.2, 0.1]]])
    tree = chain_tree(q, torch.tensor([0]))  # tokens 0 -> 1 -> 2 -> 0
    one_hot = torch.eye(V)
    # target argmax after 0 is 1, after 1 is 2, after 2 is 1 (draft said 0): accept two, extra 1
    p = one_hot[torch.tensor([[1, 2, 1, 0]])]
    verdict = ddtree_walk(tree, p, rng=torch.Generator())
    assert verdict.rows() == [[1, 2, 1]] and verdict.path.tolist() == [0]
