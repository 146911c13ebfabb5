"""Drafted n-tuples as columns of the relaxed OTLP (eq. 2), ordered or grouped by set.

Column c of the relaxed OTLP is a drafted n-tuple with capacity p_draft(c) = prod_j q(c_j);
its variables S_{i,c} live on the tokens i in set(c). Tuples with the same set have the same
neighbourhood in the max-flow network of Sec. 5.2, so they can be merged into one column whose
capacity is the grouped coefficient of App. K (eq. 119-120): an exact reduction from k^n to
sum_{j <= n} C(k, j) columns. The same grouped coefficients weight the terms of Phi_T and
Theta_T (eq. 117-118). This module only builds columns; it solves nothing.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from math import comb, factorial

import numpy as np

PAD = -1


# k, n
def subsets(k: int, n: int) -> np.ndarray:
    """[m, n] every nonempty subset of range(k) with at most n members, sorted, PAD-filled."""
    blocks = []
    for size in range(1, min(n, k) + 1):
        block = np.full((comb(k, size), n), PAD, dtype=np.int64)
        block[:, :size] = np.array(list(itertools.combinations(range(k), size)), dtype=np.int64)
        blocks.append(block)
    return np.concatenate(blocks) if blocks else np.zeros((0, n), dtype=np.int64)


# members [m, w] (PAD-filled), q [k]
def cover_masses(members: np.ndarray, q: np.ndarray, n: int) -> np.ndarray:
    """[m, n+1] mass of the ordered d-tuples over each set that use every member, d = 0..n.

    d! [x^d] prod_{i in set} (e^{q(i) x} - 1): the dynamic programme behind eq. 118 and 120. It
    adds only nonnegative terms, unlike the alternating inclusion-exclusion sum.
    """
    series = np.zeros((members.shape[0], n + 1))
    series[:, 0] = 1.0
    inv_fact = 1.0 / np.array([factorial(c) for c in range(n + 1)])
    for slot in members.T:
        qs = np.where(slot == PAD, 0.0, q[np.maximum(slot, 0)])
        grown = np.zeros_like(series)
        for c in range(1, n + 1):
            grown[:, c:] += series[:, : n + 1 - c] * (qs[:, None] ** c * inv_fact[c])
        series = np.where((slot == PAD)[:, None], series, grown)
    return series / inv_fact


# members [m, w] (PAD-filled), q [k]
def grouped_weights(members: np.ndarray, q: np.ndarray, n: int, base: float) -> np.ndarray:
    """[m] mass of the n-tuples over B u set whose members outside B are exactly the set.

    B is a block of tokens with total draft mass `base` disjoint from every set: H* for Phi_T
    (eq. 117-118), the empty set for Theta_T and the relaxed OTLP columns (eq. 119-120).
    """
    cover = cover_masses(members, q, n)
    spread = np.array([comb(n, d) * base ** (n - d) for d in range(n + 1)])
    return cover @ spread


@dataclass(frozen=True)
class DraftColumns:
    """The columns of the relaxed OTLP on a k-token vocabulary (eq. 2, App. N)."""

    # [m, n] each column's tokens: the tuple itself (ordered) or its sorted set, PAD-filled
    members: np.ndarray
    # [m] drafting probability of each column
    mass: np.ndarray
    # [E] token i of every variable S_{i,c} with i in set(c)
    token: np.ndarray
    # [E] column c of every variable S_{i,c}, nondecreasing
    column: np.ndarray
    # [m] sortable key of each members row, and [m] its argsort
    keys: np.ndarray
    key_order: np.ndarray
    # True: one column per set(omega); False: one per ordered tuple omega
    grouped: bool
    vocab_size: int

    # omega [n]
    def locate(self, omega: np.ndarray) -> int:
        """Index of the column holding the drafted tuple omega."""
        row = canonical_row(np.asarray(omega, dtype=np.int64), self.members.shape[1], self.grouped)
        key = row_keys(row[None, :], self.vocab_size + 1)
        return int(self.key_order[np.searchsorted(self.keys, key, sorter=self.key_order)][0])


# omega [n]
def canonical_row(omega: np.ndarray, n: int, grouped: bool) -> np.ndarray:
    """[n] the members row of omega's column: omega itself, or its sorted set PAD-filled."""
    if not grouped:
        return omega
    distinct = np.unique(omega)
    return np.concatenate((distinct, np.full(n - distinct.size, PAD, dtype=np.int64)))


# rows [m, n]
def row_keys(rows: np.ndarray, radix: int) -> np.ndarray:
    """[m] an injective integer key per row (base-`radix` digits of member + 1)."""
    weights = radix ** np.arange(rows.shape[1], dtype=np.int64)
    return (rows + 1) @ weights


# q [k]
def draft_columns(q: np.ndarray, n: int, grouped: bool = True) -> DraftColumns:
    """Columns for n i.i.d. drafts from q: sets with App. K masses, or the k^n tuples of eq. 2."""
    k = q.shape[0]
    if grouped:
        members = subsets(k, n)
        mass = grouped_weights(members, q, n, base=0.0)
    else:
        members = np.stack(np.unravel_index(np.arange(k**n), (k,) * n), axis=1).astype(np.int64)
        mass = np.prod(q[members], axis=1)
    # set(c) without repeats: a sorted row keeps a token only where it differs from its left
    distinct = np.sort(members, axis=1)
    first = np.ones_like(distinct, dtype=bool)
    first[:, 1:] = distinct[:, 1:] != distinct[:, :-1]
    column, slot = np.nonzero(first & (distinct != PAD))
    keys = row_keys(members, k + 1)
    return DraftColumns(members, mass, distinct[column, slot], column, keys, np.argsort(keys), grouped, k)
