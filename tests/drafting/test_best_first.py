"""DDTree trees: Alg. 1 against brute-force top-B prefixes, Prop. 1, batched == reference."""

from __future__ import annotations

import itertools

import pytest
import torch

from speculab.drafting.best_first import (
    _chunk_maxima,
    best_first,
    best_first_tree,
    best_first_tree_levels,
    best_first_tree_reference,
    chain_tree,
    node_paths,
    reachability_threshold,
    reachable_tokens,
    refined_threshold,
    surrogate_value,
)
from speculab.drafting.tree import DraftTree


def tied_marginals(
    gen: torch.Generator, batch: int, length: int, vocab: int, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """[B, L, V] marginals from small integer weights, so equal probabilities (ties) are common."""
    weights = torch.randint(1, 4, (batch, length, vocab), generator=gen).to(dtype)
    return weights / weights.sum(-1, keepdim=True)


def brute_force_top(q: torch.Tensor, budget: int) -> list[tuple[int, ...]]:
    """Every prefix of one prompt (q [L, V]) in the total order, first `budget` as token tuples."""
    L, V = q.shape
    rank_of = [
        {int(t): r for r, t in enumerate(torch.sort(q[d], descending=True, stable=True).indices)} for d in range(L)
    ]
    logq = q.double().log()
    keyed = []
    for depth in range(1, L + 1):
        for prefix in itertools.product(range(V), repeat=depth):
            score = 0.0
            for d, token in enumerate(prefix):
                score = score + float(logq[d, token])
            keyed.append(((-score, depth, tuple(rank_of[d][t] for d, t in enumerate(prefix))), prefix))
    keyed.sort()
    return [prefix for _, prefix in keyed[:budget]]


def prefixes(tree: DraftTree, row: int) -> list[tuple[int, ...]]:
    """Token prefix of every non-root node (root excluded), node order."""
    out: list[tuple[int, ...]] = [()]
    for node in range(1, int(tree.num_nodes[row])):
        out.append(out[int(tree.parents[row, node])] + (int(tree.tokens[row, node]),))
    return out[1:]


@pytest.mark.parametrize("seed", range(12))
def test_alg1_equals_brute_force_top_b_and_is_prefix_closed(seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    L = int(torch.randint(1, 5, (1,), generator=gen))
    V = int(torch.randint(2, 7, (1,), generator=gen))
    q = tied_marginals(gen, 1, L, V)
    for budget in (1, 2, 5, 13, 30):
        tree = best_first_tree_reference(q, torch.tensor([0]), budget)
        got = prefixes(tree, 0)
        assert got == brute_force_top(q[0], budget)  # same set, and pops in the total order
        assert all(p[:-1] in set(got) for p in got if len(p) > 1)  # prefix-closed
        assert len(set(got)) == len(got) == min(budget, sum(V**d for d in range(1, L + 1)))


@pytest.mark.parametrize("seed", range(6))
def test_surrogate_value_is_expected_acceptance_under_q(seed: int) -> None:
    """Prop. 1: sum of prefix masses = E_{Y~Q}[longest tree prefix of Y], by enumerating Y."""
    gen = torch.Generator().manual_seed(100 + seed)
    L, V = 3, 4
    q = tied_marginals(gen, 1, L, V, torch.float64)  # rows sum to 1 within 1e-16
    tree = best_first_tree_reference(q, torch.tensor([0]), 9)
    in_tree = set(prefixes(tree, 0))
    expected = 0.0
    for y in itertools.product(range(V), repeat=L):
        prob = float(torch.prod(torch.stack([q[0, d, t].double() for d, t in enumerate(y)])))
        accepted = next((d for d in range(L, 0, -1) if y[:d] in in_tree), 0)
        expected += prob * accepted
    assert float(surrogate_value(tree, q)[0]) == pytest.approx(expected, abs=1e-12)


def assert_same_tree(a: DraftTree, b: DraftTree) -> None:
    for field in ("tokens", "parents", "depth", "valid", "path_nodes"):
        assert torch.equal(getattr(a, field), getattr(b, field)), field


@pytest.mark.parametrize("vocab", [5, 300, 3000, 20000])
def test_batched_builder_equals_reference(vocab: int) -> None:
    gen = torch.Generator().manual_seed(vocab)
    for length, budget in ((1, 16), (4, 7), (6, 64), (8, 200)):
        peaked = torch.softmax(torch.randn(3, length, vocab, generator=gen) * 4, dim=-1)
        for q in (peaked, tied_marginals(gen, 3, length, vocab)):
            root = torch.randint(0, vocab, (3,), generator=gen)
            assert_same_tree(best_first_tree(q, root, budget), best_first_tree_reference(q, root, budget))


@pytest.mark.parametrize(("vocab", "length", "budget"), [(32_000, 16, 1024), (150_000, 8, 512)])
def test_batched_builder_equals_reference_at_benchmark_sizes(vocab: int, length: int, budget: int) -> None:
    gen = torch.Generator().manual_seed(budget)
    q = torch.softmax(torch.randn(2, length, vocab, generator=gen) * 4, dim=-1)
    root = torch.tensor([5, 6])
    assert_same_tree(best_first_tree(q, root, budget), best_first_tree_reference(q, root, budget))


@pytest.mark.parametrize(("vocab", "chunk"), [(1000, 64), (1024, 64), (40, 64), (7, 3)])
def test_reachable_tokens_equal_a_full_threshold_scan(vocab: int, chunk: int) -> None:
    gen = torch.Generator().manual_seed(vocab)
    rows = torch.softmax(torch.randn(5, vocab, generator=gen) * 3, dim=-1)
    threshold = torch.stack([torch.tensor(0.0), *rows[1:].max(1).values * torch.tensor([1.0, 0.5, 0.01, 1e-9])])
    row, token, q = reachable_tokens(rows, _chunk_maxima(rows, chunk), chunk, threshold)
    want_row, want_token = (rows >= threshold[:, None]).nonzero(as_tuple=True)  # (row, token) order
    for r in range(5):  # within a row in token order (the builder's tie-break relies on it)
        assert token[row == r].tolist() == want_token[want_row == r].tolist()
    assert torch.equal(q, rows[row, token])


@pytest.mark.parametrize("seed", range(4))
def test_refined_threshold_is_tighter_and_below_every_tree_token(seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    B, L, V, budget, chunk, group = 3, 6, 4000, 128, 8, 4
    peaked = torch.softmax(torch.randn(B, L, V, generator=gen) * (2 + seed), dim=-1)
    for q in (peaked, tied_marginals(gen, B, L, V)):
        fine = _chunk_maxima(q.reshape(B * L, V), chunk)
        coarse = _chunk_maxima(fine, group)
        best = coarse.amax(1).double().log().reshape(B, L)
        above = torch.cumsum(best, 1) - best
        refined = refined_threshold(fine, coarse, above, group, budget).reshape(B, L)
        comb = (above[..., None] + coarse.double().log().reshape(B, L, -1)).reshape(B, -1)
        assert (refined >= reachability_threshold(comb, above, budget).float()).all()
        tree = best_first_tree_reference(q, torch.zeros(B, dtype=torch.long), budget)
        node_q = q[torch.arange(B)[:, None], (tree.depth - 1).clamp(min=0), tree.tokens]  # [B, N]
        node_threshold = refined.gather(1, (tree.depth - 1).clamp(min=0))
        assert (node_q >= node_threshold)[tree.valid & (tree.depth > 0)].all()


def test_node_paths_match_a_parent_walk_including_padding() -> None:
    parents = torch.tensor([[-1, 0, 0, 1, 3, -1], [-1, 0, 1, -1, -1, -1]])
    depth = torch.tensor([[0, 1, 1, 2, 3, 0], [0, 1, 2, 0, 0, 0]])
    valid = torch.tensor([[True] * 5 + [False], [True] * 3 + [False] * 3])
    want = torch.full((2, 6, 5), -1)
    for b in range(2):
        for node in range(6):
            walk, at = [], node
            while valid[b, node] and at >= 0:
                walk.append(at)
                at = int(parents[b, at])
            walk = walk[::-1] or [node]  # a padding node's path is itself at column 0
            want[b, node, : len(walk)] = torch.tensor(walk)
    assert torch.equal(node_paths(parents, depth, 4), want)


def test_node_paths_follow_parents() -> None:
    gen = torch.Generator().manual_seed(3)
    q = torch.softmax(torch.randn(2, 4, 10, generator=gen), dim=-1)
    tree = best_first_tree(q, torch.tensor([7, 8]), 20)
    assert tree.path_nodes.shape == (2, tree.tokens.shape[1], 5)
    for b in range(2):
        for node in range(int(tree.num_nodes[b])):
            path = [int(n) for n in tree.path_nodes[b, node] if n >= 0]
            assert path[0] == 0 and path[-1] == node and len(path) == int(tree.depth[b, node]) + 1
            assert all(int(tree.parents[b, child]) == parent for parent, child in itertools.pairwise(path))


def test_chain_tree_is_the_argmax_path() -> None:
    q = torch.tensor([[[0.1, 0.6, 0.3], [0.5, 0.5, 0.0]]])
    tree = chain_tree(q, torch.tensor([2]))
    assert tree.tokens.tolist() == [[2, 1, 0]] and tree.parents.tolist() == [[-1, 0, 1]]


@pytest.mark.parametrize("vocab", [3, 5, 300, 3000])
def test_level_builder_equals_reference_ties_and_zeros_included(vocab: int) -> None:
    gen = torch.Generator().manual_seed(vocab)
    for length, budget in ((1, 16), (4, 7), (6, 64), (8, 200)):
        peaked = torch.softmax(torch.randn(3, length, vocab, generator=gen) * 4, dim=-1)
        sparse = peaked * (torch.rand(3, length, vocab, generator=gen) < 0.5)  # zero-probability tokens
        for q in (peaked, tied_marginals(gen, 3, length, vocab), sparse):
            root = torch.randint(0, vocab, (3,), generator=gen)
            assert_same_tree(best_first_tree_levels(q, root, budget), best_first_tree_reference(q, root, budget))


def test_level_builder_equals_reference_at_benchmark_size() -> None:
    gen = torch.Generator().manual_seed(1)
    q = torch.softmax(torch.randn(2, 16, 32_000, generator=gen) * 4, dim=-1)
    root = torch.tensor([5, 6])
    assert_same_tree(best_first_tree_levels(q, root, 512), best_first_tree_reference(q, root, 512))


def test_level_builder_captures_whole_and_gives_the_eager_tree() -> None:
    """No graph break and no host read: the build compiles with fullgraph=True (what a CUDA graph needs)."""
    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(2)
    q = torch.softmax(torch.randn(2, 4, 50, generator=gen) * 3, dim=-1)
    root = torch.tensor([1, 2])
    compiled = torch.compile(best_first_tree_levels, fullgraph=True, backend="eager", dynamic=False)
    assert_same_tree(compiled(q, root, 16), best_first_tree_levels(q, root, 16))


def test_the_engine_builds_with_the_heap_on_the_cpu() -> None:
    q = torch.softmax(torch.randn(1, 3, 40, generator=torch.Generator().manual_seed(3)), dim=-1)
    root = torch.tensor([0])
    assert_same_tree(best_first(q, root, 16), best_first_tree(q, root, 16))
