"""The relaxed OTLP as bipartite max-flow (Sec. 5.2) and its reduced systems (Sec. 5.3).

`maxflow` runs SciPy's `maximum_flow` (Dinic, compiled) on capacities scaled by 2^30 and
rounded DOWN to int32: the flow it returns, scaled back, is feasible for the real capacities,
and eq. 3 completes any feasible flow into an exact coupling of p and p_draft (`flow_plan`
recomputes the residuals from the flow), so the plan stays exactly lossless; only its
acceptance may fall short of alpha* by at most (k + m) 2^-30 (k source arcs, m sink arcs).
`maxflow_opt` keeps networkx's real-valued max-flow: its slices pair each system's flow with
the closed-form residuals of Thm 6.2, which a rounded-down flow would no longer meet exactly.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import networkx as nx
import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow

from speculab.verify.ot.columns import DraftColumns, draft_columns
from speculab.verify.ot.plan import AcceptedSlice, TransportPlan, flow_plan, flow_slice, slackness_plan
from speculab.verify.ot.subset import best_subset, outer_residuals

SOURCE, SINK = "s", "t"
SCALE = 2**30  # int32 capacities: a probability times SCALE fits, and so does the total flow


# supply [k], edges [E] bool
def max_flow(supply: np.ndarray, columns: DraftColumns, edges: np.ndarray) -> np.ndarray:
    """[E] a max-flow of s -> i (cap supply(i)) -> c (uncapacitated) -> t (cap p_draft(c)).

    Only the variables S_{i,c} selected by `edges` get an arc; the others carry no flow.
    """
    k = supply.shape[0]
    token, column = columns.token[edges], columns.column[edges] + k
    graph = nx.DiGraph()
    graph.add_edges_from((SOURCE, int(i), {"capacity": float(supply[i])}) for i in np.unique(token))
    graph.add_edges_from(zip(token.tolist(), column.tolist()))
    graph.add_edges_from((int(c), SINK, {"capacity": float(columns.mass[c - k])}) for c in np.unique(column))
    flow = np.zeros(columns.token.shape[0])
    if graph.number_of_edges() == 0:
        return flow
    # shortest augmenting paths: robust to float capacities (preflow-push can fail to relabel)
    residual = nx.flow.shortest_augmenting_path(graph, SOURCE, SINK)
    succ = residual.succ
    flow[edges] = [succ[i][c]["flow"] for i, c in zip(token.tolist(), column.tolist())]
    return flow


# supply [k]
def integer_max_flow(supply: np.ndarray, columns: DraftColumns) -> np.ndarray:
    """[E] the max-flow of ``max_flow``'s network on capacities floor(SCALE * c), over SCALE.

    Nodes: 0 source, 1..k tokens, k+1..k+m columns, k+m+1 sink. Token-column arcs get SCALE,
    more than any flow can use (the total is at most SCALE * sum(supply) <= SCALE).
    """
    k, m = supply.shape[0], columns.mass.shape[0]
    sink = k + m + 1
    tails = np.concatenate([np.zeros(k, np.int64), columns.token + 1, k + 1 + np.arange(m)])
    heads = np.concatenate([1 + np.arange(k), columns.column + k + 1, np.full(m, sink)])
    capacity = np.concatenate(
        [np.floor(supply * SCALE), np.full(columns.token.shape[0], SCALE), np.floor(columns.mass * SCALE)]
    ).astype(np.int32)
    graph = csr_matrix((capacity, (tails, heads)), shape=(sink + 1, sink + 1))
    flow = maximum_flow(graph, 0, sink, method="dinic").flow.tocsr()
    return np.asarray(flow[columns.token + 1, columns.column + k + 1]).ravel() / SCALE


# p [k], q [k]
def solve_maxflow(p: np.ndarray, q: np.ndarray, n: int, grouped: bool = True) -> TransportPlan:
    """OT plan from max-flow on the network Omega of Sec. 5.2, completed by eq. 3."""
    columns = draft_columns(q, n, grouped)
    return flow_plan(p, columns, integer_max_flow(p, columns))


# supply [k], inside [k] bool
def system_slice(
    supply: np.ndarray, columns: DraftColumns, inside: np.ndarray, inner: bool
) -> Callable[[np.ndarray], np.ndarray]:
    """Accepted slices from the inner (H* x (H*)^n) or outer system of Thm 5.1 as a max-flow."""
    column_inside = np.ones(columns.mass.shape[0], dtype=bool)
    np.logical_and.at(column_inside, columns.column, inside[columns.token])
    edges = (inside[columns.token] == inner) & (column_inside[columns.column] == inner)
    return functools.partial(flow_slice, columns, max_flow(supply, columns, edges))


# p [k], q [k]
def solve_maxflow_opt(p: np.ndarray, q: np.ndarray, n: int, grouped: bool = True) -> TransportPlan:
    """OT plan from the reduced outer and inner max-flow systems (Thm 5.1, eq. 7-8).

    The outer system's source capacities are the equalities p_i of Thm 6.2 so that its
    residuals match the closed form used by the inner slices; the inner system only needs the
    columns inside (H*)^n, which are built on H* alone.
    """
    selection = best_subset(p, q, n)
    best = selection.best_subset
    inside = np.zeros(p.shape[0], dtype=bool)
    inside[best] = True
    p_res = outer_residuals(selection, p)

    def solve_inner() -> AcceptedSlice:
        local = system_slice(p[best], draft_columns(q[best], n, grouped), np.ones(best.size, bool), True)
        position = np.full(p.shape[0], -1)
        position[best] = np.arange(best.size)
        return lambda omega: embed(local(position[omega]), best, p.shape[0])

    def solve_outer() -> AcceptedSlice:
        return system_slice(p - p_res[:-1], draft_columns(q, n, grouped), inside, False)

    return slackness_plan(selection, p_res, solve_inner, solve_outer)


# values [w], at [w]
def embed(values: np.ndarray, at: np.ndarray, size: int) -> np.ndarray:
    """[size] zeros with `values` placed at indices `at`."""
    full = np.zeros(size)
    full[at] = values
    return full
