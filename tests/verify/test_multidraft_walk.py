"""Top-down tree walks (SpecTr K-SEQ, SpecInfer, NSS): certificates and agreement."""

from __future__ import annotations

import pytest
import torch

from speculab.registry import get_verifier
from speculab.verify.decisions import draw_uniforms
from speculab.verify.exact import enumerate_outcomes
from speculab.verify.multidraft_walk import multidraft_walk, multidraft_walk_reference
from speculab.verify.node_rules import NODE_RULES, kseq_rho
from support.toy_instances import MULTI_PATH_INSTANCES, one_round_error, replay_reference, sample_batch, toy_pair


@pytest.mark.parametrize("name", sorted(NODE_RULES))
@pytest.mark.parametrize("instance", MULTI_PATH_INSTANCES)
def test_certificate_one_round_matches_target(name: str, instance: tuple) -> None:
    assert one_round_error(multidraft_walk_reference(NODE_RULES[name]), instance, seed=51) < 1e-9


@pytest.mark.parametrize("name", sorted(NODE_RULES))
@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_node_rule_output_is_the_target(name: str, count: int) -> None:
    """One node, every multiset of drafted children: y ~ p exactly (zeros included)."""
    gen = torch.Generator().manual_seed(count)
    p = torch.rand(4, generator=gen, dtype=torch.float64) * torch.tensor([1.0, 0.0, 1.0, 1.0])
    q = torch.rand(4, generator=gen, dtype=torch.float64) * torch.tensor([1.0, 1.0, 0.0, 1.0])
    p, q = p / p.sum(), q / q.sum()
    total = torch.zeros(4, dtype=torch.float64)
    draws = torch.cartesian_prod(*[torch.arange(4)] * count).reshape(-1, count)
    for drafts in draws:
        weight = float(q[drafts].prod())
        if weight == 0:
            continue
        for y, prob in enumerate_outcomes(lambda d: NODE_RULES[name](p, q, drafts, d)):
            total[y] += weight * prob
    torch.testing.assert_close(total, p, rtol=0, atol=1e-12)


def test_kseq_rho_solves_its_equation() -> None:
    """beta(rho) = sum_x min(q(x), p(x) / rho) over the whole vocabulary, as SpecTr defines it."""
    gen = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(64, 50, generator=gen, dtype=torch.float64) * 2, -1)
    q = torch.softmax(torch.randn(64, 50, generator=gen, dtype=torch.float64) * 2, -1)
    k = torch.randint(1, 9, (64,), generator=gen).double()
    rho = kseq_rho(p, q, k)
    beta = torch.minimum(q, p / rho.unsqueeze(-1)).sum(-1)
    assert ((rho >= 1) & (rho <= k)).all()
    torch.testing.assert_close(1 - (1 - beta) ** k, rho * beta, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", sorted(NODE_RULES))
@pytest.mark.parametrize("zeros,one_hot", [(False, False), (True, False), (False, True)])
def test_batched_equals_reference_for_identical_draws(name: str, zeros: bool, one_hot: bool) -> None:
    target, draft = toy_pair(4, "full", zeros, one_hot, seed=3)
    paths, p, q = sample_batch(target, draft, batch=64, paths=3, length=3, seed=6)
    verdict = get_verifier("spectr", name)(paths, p, q, rng=torch.Generator().manual_seed(2))
    uniforms = draw_uniforms(torch.Generator().manual_seed(2), 64, 3 * 4 + 5, p.device)
    expected = replay_reference(multidraft_walk_reference(NODE_RULES[name]), paths, p, q, uniforms)
    assert verdict.rows() == [v.rows()[0] for v in expected]
    assert verdict.path.tolist() == [int(v.path[0]) for v in expected]


def test_tree_walk_accepts_a_generator() -> None:
    target, draft = toy_pair(4, "full", False, False, seed=1)
    paths, p, q = sample_batch(target, draft, batch=1, paths=2, length=3, seed=0)
    verdict = multidraft_walk(paths[0], p[0], q[0], NODE_RULES["kseq"], torch.Generator().manual_seed(0))
    assert 1 <= int(verdict.num_tokens[0]) <= 4
