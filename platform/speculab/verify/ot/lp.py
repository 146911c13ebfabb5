"""The relaxed OTLP (eq. 2) solved as a linear program with SciPy's HiGHS; residuals by eq. 3.

This is the general-LP baseline of Table 1: exact, but its size grows as k^n (or
sum_{j <= n} C(k, j) with grouped columns), so it is for small truncated vocabularies.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import csr_array, vstack

from speculab.verify.ot.columns import DraftColumns, draft_columns
from speculab.verify.ot.plan import TransportPlan, flow_plan


# p [k]
def relaxed_otlp(p: np.ndarray, columns: DraftColumns) -> np.ndarray:
    """[E] S* maximising sum S subject to row sums <= p and column sums <= p_draft (eq. 2)."""
    edges = np.arange(columns.token.shape[0])
    ones = np.ones(edges.shape[0])
    rows = csr_array((ones, (columns.token, edges)), shape=(p.shape[0], edges.shape[0]))
    cols = csr_array((ones, (columns.column, edges)), shape=(columns.mass.shape[0], edges.shape[0]))
    result = linprog(
        -ones,
        A_ub=vstack([rows, cols], format="csr"),
        b_ub=np.concatenate((p, columns.mass)),
        bounds=(0, None),
        method="highs",
    )
    if result.x is None:
        raise RuntimeError(f"HiGHS failed on the relaxed OTLP: {result.message}")
    return result.x


# p [k], q [k]
def solve_lp(p: np.ndarray, q: np.ndarray, n: int, grouped: bool = True) -> TransportPlan:
    """OT plan from the relaxed OTLP (eq. 2-3); `grouped` merges tuples by set (App. K)."""
    columns = draft_columns(q, n, grouped)
    return flow_plan(p, columns, relaxed_otlp(p, columns))
