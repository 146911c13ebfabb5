"""Subset selection: H* by prefixes (Lemma 6.3), alpha* = LP optimum (Thm 3.1), Thm 6.1-6.2."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from speculab.verify.ot import best_subset, optimal_acceptance
from speculab.verify.ot.columns import draft_columns
from speculab.verify.ot.lp import relaxed_otlp
from speculab.verify.ot.subset import outer_residuals
from support.exact_plan import random_instance

KINDS = ["dense", "sparse", "truncated", "onehot"]


# p [k], q [k]
def psi(p: np.ndarray, q: np.ndarray, n: int, subset: tuple[int, ...]) -> float:
    return float(p[list(subset)].sum() - q[list(subset)].sum() ** n)


def all_subsets(items: list[int]) -> list[tuple[int, ...]]:
    return [s for size in range(len(items) + 1) for s in itertools.combinations(items, size)]


def test_by_hand_two_tokens() -> None:
    # p = (1/2, 1/2), q = (1, 0), n = 2: drafts are always token 0, accepted w.p. 1/2
    assert optimal_acceptance(np.array([0.5, 0.5]), np.array([1.0, 0.0]), 2) == pytest.approx(0.5)
    # identical p and q: always accept
    assert optimal_acceptance(np.array([0.3, 0.7]), np.array([0.3, 0.7]), 3) == pytest.approx(1.0)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_best_prefix_is_best_subset(kind: str, n: int) -> None:
    rng = np.random.default_rng(10 * n + KINDS.index(kind))
    for _ in range(5):
        p, q = random_instance(rng, 7, kind)
        brute = min(psi(p, q, n, s) for s in all_subsets(list(range(7))))
        selection = best_subset(p, q, n)
        assert selection.psi_min == pytest.approx(brute, abs=1e-12)
        assert psi(p, q, n, tuple(selection.best_subset)) == pytest.approx(brute, abs=1e-12)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_optimal_acceptance_is_lp_optimum(kind: str, n: int) -> None:
    rng = np.random.default_rng(100 + 10 * n + KINDS.index(kind))
    for k in [2, 5, 10]:
        p, q = random_instance(rng, k, kind)
        columns = draft_columns(q, n, grouped=k > 5)
        assert relaxed_otlp(p, columns).sum() == pytest.approx(optimal_acceptance(p, q, n), abs=1e-8)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [2, 3])
def test_outer_residuals_solve_outer_residual_lp(kind: str, n: int) -> None:
    """Thm 6.1: sum_S p_i <= sum_S p(i) + psi(V \\ S) for all S in V \\ H*, equality at V \\ H*."""
    rng = np.random.default_rng(200 + 10 * n + KINDS.index(kind))
    for _ in range(5):
        p, q = random_instance(rng, 7, kind)
        selection = best_subset(p, q, n)
        p_res = outer_residuals(selection, p)
        kept = p - p_res[:-1]
        assert np.all(p_res >= 0) and np.all(kept >= -1e-15)
        assert np.all(p_res[selection.best_subset] == 0)  # eq. 7
        # p's mass outside the truncated vocabulary never gets accepted
        assert p_res[-1] == pytest.approx(1 - p.sum())
        # the tokens outside the truncated vocabulary (q = 0, kept = 0) join V \\ S in psi
        outside = 1.0 - p.sum()
        outer = [int(i) for i in selection.order[selection.size :]]
        for s in all_subsets(outer):
            rest = tuple(i for i in range(7) if i not in s)
            bound = p[list(s)].sum() + psi(p, q, n, rest) + outside
            assert kept[list(s)].sum() <= bound + 1e-12
        equality = p[outer].sum() + outside + selection.psi_min
        assert kept[outer].sum() == pytest.approx(equality, abs=1e-12)
