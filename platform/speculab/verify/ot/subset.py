"""Subset selection for n i.i.d. drafts from q: H*, alpha* and the outer residuals.

psi(H) = sum_{i in H} p(i) - (sum_{i in H} q(i))^n (Thm 3.1, eq. 4) is minimised over the
prefixes of the vocabulary sorted by decreasing q/p (Sec. 5.1, Lemma 6.3). Everything here is
O(k log k) and works on a top-k truncated vocabulary (App. N), where p may sum to less than
one. Nothing here solves a transport problem; see `plan.py` and the solvers for that.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SubsetSelection:
    """The sorted prefixes of Lemma 6.3 and the best one, H* (Sec. 5.1)."""

    # [k] token indices by decreasing q/p (p = 0 sorts first)
    order: np.ndarray
    # [k+1] psi of each prefix of `order`, psi[0] = psi(empty set) = 0
    psi: np.ndarray
    # |H*|: the first prefix length minimising psi
    size: int

    @property
    def best_subset(self) -> np.ndarray:
        """[|H*|] token indices of H*."""
        return self.order[: self.size]

    @property
    def psi_min(self) -> float:
        """psi(H*) = alpha* - 1 <= 0."""
        return float(self.psi[self.size])


# p [k], q [k]
def ratio_order(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Token indices by decreasing q/p; p = 0 counts as an infinite ratio (Hu et al. 2025)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(p > 0, q / np.where(p > 0, p, 1.0), np.inf)
    return np.argsort(-ratio, kind="stable")


# p [k], q [k], order [k]
def prefix_psi(p: np.ndarray, q: np.ndarray, n: int, order: np.ndarray) -> np.ndarray:
    """[k+1] psi(L_j) for every prefix L_j of `order` (eq. 4 with p_draft = q^n)."""
    p_prefix = np.concatenate(([0.0], np.cumsum(p[order])))
    q_prefix = np.concatenate(([0.0], np.cumsum(q[order])))
    return p_prefix - q_prefix**n


# p [k], q [k]
def best_subset(p: np.ndarray, q: np.ndarray, n: int) -> SubsetSelection:
    """H* = argmin_H psi(H) via the best prefix of the q/p ordering (Lemma 6.3)."""
    order = ratio_order(p, q)
    psi = prefix_psi(p, q, n, order)
    return SubsetSelection(order=order, psi=psi, size=int(np.argmin(psi)))


# p [k], q [k]
def optimal_acceptance(p: np.ndarray, q: np.ndarray, n: int) -> float:
    """alpha* = 1 + min_H psi(H) (Thm 3.1), in O(k log k)."""
    return 1.0 + best_subset(np.asarray(p, float), np.asarray(q, float), n).psi_min


# p [k]
def outer_residuals(selection: SubsetSelection, p: np.ndarray) -> np.ndarray:
    """[k+1] residual target mass p_res = p - p_i (Thm 6.2); last entry: mass outside V0.

    Ordering V \\ H* by increasing q/p makes each min_{T >= H_i} psi(T) a suffix minimum of the
    prefix psi values (Lemma 6.3), so p_res of the j-th sorted token is M_j - M_{j-1} with
    M_j = min_{j' >= j} psi_j'. This is zero on H* (eq. 7). Tokens outside the truncated
    vocabulary have q = 0, hence p_i = 0: they keep all of their target mass.
    """
    suffix_min = np.minimum.accumulate(selection.psi[::-1])[::-1]
    p_res = np.zeros(p.shape[0] + 1)
    p_res[selection.order] = np.diff(suffix_min)
    p_res[-1] = max(1.0 - float(p.sum()), 0.0)
    return p_res
