"""OT node rules: exact losslessness by enumerating drafts and the rule's randomness."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest
import torch

from speculab.verify.exact import enumerate_outcomes
from speculab.verify.node_rules import NodeRule, kseq_rule, nss_rule
from speculab.verify.ot import OT_NODE_RULES, OTNodeRule, optimal_acceptance
from speculab.verify.ot.global_resolution import solve_global_resolution

V = 6


def node_distributions(seed: int, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(p [V], q [V]) with q truncated to its top_k tokens as a drafter would (App. N)."""
    gen = torch.Generator().manual_seed(seed)
    p = torch.rand(V, generator=gen, dtype=torch.float64) ** 3
    q = torch.rand(V, generator=gen, dtype=torch.float64) ** 3
    q[q.argsort(descending=True)[top_k:]] = 0.0
    return p / p.sum(), q / q.sum()


def verified_law(rule: NodeRule, p: torch.Tensor, q: torch.Tensor, n: int) -> np.ndarray:
    """[V] exact law of the rule's output over all drafts from q^n and all its random choices."""
    law = np.zeros(V)
    support = torch.nonzero(q).flatten().tolist()
    for drafts in itertools.product(support, repeat=n):
        mass = float(np.prod([q[x].item() for x in drafts]))
        for token, prob in enumerate_outcomes(lambda d: rule(p, q, torch.tensor(drafts), d)):
            law[token] += mass * prob
    return law


RULES = {
    **OT_NODE_RULES,
    # a tolerance no truncated solve meets in one iteration: exercises the K-SEQ fallback
    "global_resolution_to_kseq": OTNodeRule(
        functools.partial(solve_global_resolution, tau=1e-14, max_iter=1), kseq_rule
    ),
    # a chain: a failing exact-tolerance solve, then sampling from p (App. R)
    "global_resolution_to_target": OTNodeRule(
        functools.partial(solve_global_resolution, tau=1e-14, max_iter=1), nss_rule
    ),
}


@pytest.mark.parametrize("name", list(RULES))
@pytest.mark.parametrize(("top_k", "n"), [(3, 2), (4, 3), (6, 2)])
def test_rules_are_lossless(name: str, top_k: int, n: int) -> None:
    p, q = node_distributions(top_k * 10 + n, top_k)
    # default global resolution (tau = 1e-3) is lossless only within 15 tau (Lemma 6.6)
    tolerance = 15e-3 if name == "global_resolution" else 1e-9
    assert np.abs(verified_law(RULES[name], p, q, n) - p.numpy()).sum() <= tolerance


def test_exact_rules_reach_optimal_acceptance() -> None:
    p, q = node_distributions(5, 4)
    support = torch.nonzero(q).flatten()
    alpha = optimal_acceptance(p[support].numpy(), q[support].numpy(), 3)
    for name in ["lp", "maxflow", "maxflow_opt"]:
        accepted = 0.0
        for drafts in itertools.product(support.tolist(), repeat=3):
            mass = float(np.prod([q[x].item() for x in drafts]))
            law = RULES[name].verified_distribution(p, q, torch.tensor(drafts))
            accepted += mass * law[sorted(set(drafts))].sum()
        # maxflow rounds capacities down to multiples of 2^-30 (ot/maxflow.py): optimal to (k + m) 2^-30
        assert accepted == pytest.approx(alpha, abs=1e-7 if name == "maxflow" else 1e-9)


@pytest.mark.parametrize("name", list(RULES))
def test_rules_are_seeded(name: str) -> None:
    p, q = node_distributions(7, 4)

    def tokens(seed: int) -> list[int]:
        rng = torch.Generator().manual_seed(seed)
        draws = (torch.multinomial(q, 3, replacement=True, generator=rng) for _ in range(20))
        return [RULES[name](p, q, drafts, rng) for drafts in draws]

    assert tokens(3) == tokens(3)
    assert len(set(tokens(3))) > 1
