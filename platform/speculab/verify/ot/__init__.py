"""Optimal single-step multi-draft verification (Global Resolution paper, Thomas & Pal 2025).

Given the target p and n i.i.d. drafts from q on a top-k truncated vocabulary (App. N), a
solver builds a `TransportPlan`; its slice pi(.|omega) for the drafted tuple omega is sampled
to give the verified token. Solvers (`SOLVERS`): `lp` (relaxed OTLP, eq. 2-3, HiGHS),
`maxflow` (Sec. 5.2), `maxflow_opt` (Sec. 5.3) and `global_resolution` (Alg. 1).
`optimal_acceptance` gives alpha* (Thm 3.1) in O(k log k). `OT_NODE_RULES` wraps each solver
as the per-node rule of the top-down tree walk. This package does not walk trees.
"""

from speculab.verify.ot.node_rule import OT_NODE_RULES, OTNodeRule
from speculab.verify.ot.plan import TransportPlan
from speculab.verify.ot.solvers import SOLVERS, Solver
from speculab.verify.ot.subset import best_subset, optimal_acceptance

__all__ = [
    "OT_NODE_RULES",
    "SOLVERS",
    "OTNodeRule",
    "Solver",
    "TransportPlan",
    "best_subset",
    "optimal_acceptance",
]
