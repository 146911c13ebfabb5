"""Solvers: exact plans are lossless and optimal; global resolution meets Lemma 6.6 bounds."""

from __future__ import annotations

import numpy as np
import pytest

from speculab.verify.ot import SOLVERS, optimal_acceptance
from speculab.verify.ot.global_resolution import solve_global_resolution
from speculab.verify.ot.plan import AcceptedSlice, slackness_plan
from speculab.verify.ot.subset import best_subset, outer_residuals
from support.exact_plan import plan_outcome, random_instance

EXACT = ["lp", "maxflow", "maxflow_opt"]
KINDS = ["dense", "sparse", "truncated", "onehot"]


def test_by_hand_slice() -> None:
    # p = (1/2, 1/2), q = (1, 0), n = 2: the only draft (0, 0) keeps 0 w.p. 1/2, else emits 1
    plan = SOLVERS["lp"](np.array([0.5, 0.5]), np.array([1.0, 0.0]), 2)
    np.testing.assert_allclose(plan.transport_slice(np.array([0, 0])), [0.5, 0.5, 0.0], atol=1e-12)


@pytest.mark.parametrize("grouped", [True, False])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", EXACT)
@pytest.mark.parametrize(("k", "n"), [(4, 2), (5, 3), (4, 4)])
def test_exact_solvers_are_lossless_and_optimal(name: str, kind: str, grouped: bool, k: int, n: int) -> None:
    rng = np.random.default_rng([EXACT.index(name), KINDS.index(kind), k, n])
    for _ in range(2):
        p, q = random_instance(rng, k, kind)
        outcome = plan_outcome(SOLVERS[name](p, q, n, grouped=grouped), q, n)
        np.testing.assert_allclose(outcome.output, np.append(p, 1 - p.sum()), atol=1e-9)
        # maxflow rounds capacities down to multiples of 2^-30: feasible, so still exactly lossless,
        # and optimal up to (k + m) 2^-30 with m <= k^n columns
        shortfall = (k + k**n) * 2.0**-30 if name == "maxflow" else 1e-9
        assert outcome.acceptance == pytest.approx(optimal_acceptance(p, q, n), abs=shortfall)


@pytest.mark.parametrize("tau", [1e-3, 1e-4])
@pytest.mark.parametrize(("k", "n"), [(5, 2), (6, 3), (5, 4)])
def test_global_resolution_within_lemma_6_6(tau: float, k: int, n: int) -> None:
    """Where it succeeds: |acceptance - alpha*| <= 10 tau and ||output - p||_1 <= 15 tau."""
    rng = np.random.default_rng(int(k * n / tau))
    successes = 0
    for kind in KINDS * 2:
        p, q = random_instance(rng, k, kind)
        outcome = plan_outcome(solve_global_resolution(p, q, n, tau=tau), q, n)
        if outcome is None:
            continue
        successes += 1
        assert abs(outcome.acceptance - optimal_acceptance(p, q, n)) <= 10 * tau
        assert np.abs(outcome.output - np.append(p, 1 - p.sum())).sum() <= 15 * tau
    assert successes >= 4


def test_global_resolution_fails_past_truncation_limit() -> None:
    # 100 equally likely drafts, n = 5: T must hold nearly all tokens, far over the limit of 10
    k = 100
    p = np.random.default_rng(0).dirichlet(np.ones(k))
    plan = solve_global_resolution(p, np.full(k, 1 / k), 5, tau=1e-4)
    assert plan.transport_slice(np.arange(5)) is None


def test_slackness_plan_solves_each_system_once_and_only_when_needed() -> None:
    p, q = random_instance(np.random.default_rng(1), 6, "dense")
    selection = best_subset(p, q, 3)
    solved: list[str] = []

    def solver(name: str) -> AcceptedSlice:
        solved.append(name)
        return lambda omega: np.zeros(6)

    plan = slackness_plan(selection, outer_residuals(selection, p), lambda: solver("inner"), lambda: solver("outer"))
    outer_token = int(selection.order[-1])
    for _ in range(3):
        plan.transport_slice(np.array([outer_token] * 3))
    assert solved == ["outer"]
    for _ in range(3):
        plan.transport_slice(np.array(list(selection.best_subset[:1]) * 3))
    assert solved == ["outer", "inner"]
