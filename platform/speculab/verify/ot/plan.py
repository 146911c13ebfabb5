"""Transport plans: the OT slice pi(.|omega) of a drafted n-tuple, and sampling from it.

Every solver returns a `TransportPlan`: the residual target mass p_res and, per drafted tuple,
the accepted part S_{., omega} / p_draft(omega). The slice adds the tuple's leftover draft mass
spread in proportion to p_res, which is eq. 3 for the relaxed OTLP and reduces to eq. 8 and
eq. 18 when p_res comes from complementary slackness (eq. 7, Thm 6.2). Index k of a slice is
"a token outside the truncated vocabulary", drawn from p's remaining mass (App. N).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from speculab.verify.ot.columns import DraftColumns
from speculab.verify.ot.subset import SubsetSelection

# omega [n] -> [k] accepted part of pi(.|omega), or None where a solver gave up on omega
AcceptedSlice = Callable[[np.ndarray], np.ndarray | None]


@dataclass(frozen=True)
class TransportPlan:
    """A (possibly lazily solved) optimal transport between p and n i.i.d. drafts from q."""

    # [k+1] residual target mass (eq. 3); entry k: p's mass outside the truncated vocabulary
    p_res: np.ndarray
    accepted: AcceptedSlice

    # omega [n]
    def transport_slice(self, omega: np.ndarray) -> np.ndarray | None:
        """[k+1] pi(.|omega) (eq. 3, 8, 18), or None when the solver failed on omega."""
        accepted = self.accepted(np.asarray(omega, dtype=np.int64))
        if accepted is None:
            return None
        leftover = max(1.0 - float(accepted.sum()), 0.0)
        residual_total = float(self.p_res.sum())
        if residual_total <= 0.0:
            # alpha* = 1: an exact plan leaves nothing over; renormalise rounding residue
            return np.append(accepted, 0.0) / max(float(accepted.sum()), np.finfo(float).tiny)
        return np.append(accepted, 0.0) + leftover / residual_total * self.p_res


# flow [E], p [k]
def feasible_flow(flow: np.ndarray, columns: DraftColumns, p: np.ndarray) -> np.ndarray:
    """[E] flow scaled into the relaxed OTLP constraints (eq. 2).

    LP and max-flow solvers meet the constraints only to a tolerance; shrinking over-full
    columns, then over-full rows, makes eq. 3 an exact coupling of p and p_draft.
    """
    flow = np.maximum(flow, 0.0)
    column_sum = np.bincount(columns.column, flow, minlength=columns.mass.shape[0])
    flow = flow * shrink_factor(column_sum, columns.mass)[columns.column]
    row_sum = np.bincount(columns.token, flow, minlength=p.shape[0])
    return flow * shrink_factor(row_sum, p)[columns.token]


# used [m], capacity [m]
def shrink_factor(used: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """[m] factor in (0, 1] that brings `used` under `capacity`."""
    return np.where(used > capacity, capacity / np.where(used > 0, used, 1.0), 1.0)


# p [k], flow [E]
def flow_plan(p: np.ndarray, columns: DraftColumns, flow: np.ndarray) -> TransportPlan:
    """The plan of a relaxed OTLP solution S (eq. 2) completed by its residuals (eq. 3)."""
    flow = feasible_flow(flow, columns, p)
    row_sum = np.bincount(columns.token, flow, minlength=p.shape[0])
    p_res = np.append(np.maximum(p - row_sum, 0.0), max(1.0 - float(p.sum()), 0.0))
    return TransportPlan(p_res, functools.partial(flow_slice, columns, flow))


# flow [E], omega [n]
def flow_slice(columns: DraftColumns, flow: np.ndarray, omega: np.ndarray) -> np.ndarray:
    """[k] S_{., c} / p_draft(c) for the column c holding omega."""
    c = columns.locate(omega)
    lo, hi = np.searchsorted(columns.column, [c, c + 1])
    accepted = np.zeros(columns.vocab_size)
    if columns.mass[c] > 0:
        accepted[columns.token[lo:hi]] = flow[lo:hi] / columns.mass[c]
    return accepted


# p_res [k+1]
def slackness_plan(
    selection: SubsetSelection,
    p_res: np.ndarray,
    solve_inner: Callable[[], AcceptedSlice],
    solve_outer: Callable[[], AcceptedSlice],
) -> TransportPlan:
    """A plan from the independent inner and outer systems of Thm 5.1 (eq. 7-8).

    p_res comes in closed form (eq. 7, Thm 6.2) and each system is solved on first use: a tuple in
    (H*)^n needs only the inner system, any other tuple only the outer one (Sec. 5.3).
    """
    inside = np.zeros(p_res.shape[0] - 1, dtype=bool)
    inside[selection.best_subset] = True
    inner, outer = functools.cache(solve_inner), functools.cache(solve_outer)

    def accepted(omega: np.ndarray) -> np.ndarray | None:
        return (inner if inside[omega].all() else outer)()(omega)

    return TransportPlan(p_res, accepted)
