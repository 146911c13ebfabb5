"""Single-step OT solvers as the per-node rule of the top-down tree walk (SpecTr, App. R).

A node rule maps (p [V], q [V], drafts [n], rng) to the verified token y: the walk moves to the
child whose token is y, else stops and emits y. The OT rules solve on the support of q, the
top-k truncated draft distribution that produced the children (App. N); a target token outside
that support is drawn from p's remaining mass. Global resolution can give up on a tuple; its
rule then defers to a fallback rule, itself possibly an `OTNodeRule` with its own fallback:
the paper's chain is K-SEQ (`kseq_rule`), or plain sampling from p (`nss_rule`, App. R).
Randomness goes through `verify.decisions` (a torch.Generator is wrapped), so the exact
enumerator of `verify.exact` can certify the walk.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from speculab.verify.decisions import Decisions, as_decisions
from speculab.verify.node_rules import NodeRule, kseq_rule
from speculab.verify.ot.solvers import SOLVERS, Solver

Randomness = torch.Generator | Decisions


# probs [V]
def as_distribution(probs: torch.Tensor) -> np.ndarray:
    """[V] float64 numpy copy renormalised to sum to one."""
    values = probs.detach().to("cpu", torch.float64).numpy()
    return values / values.sum()


@dataclass(frozen=True)
class OTNodeRule:
    """Node rule that samples y from the OT slice pi(. | drafts) of a single-step solver."""

    solver: Solver
    # used when the solver gives up on the drafted tuple; None: exact solvers never do
    fallback: NodeRule | None = None

    # p [V], q [V], drafts [n]
    def __call__(self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, rng: Randomness) -> int:
        decisions = as_decisions(rng)
        verified = self.verified_distribution(p, q, drafts)
        if verified is not None:
            return decisions.categorical(torch.from_numpy(verified))
        if self.fallback is None:
            raise RuntimeError("the OT solver gave up and no fallback rule is configured")
        return self.fallback(p, q, drafts, decisions)

    # p [V], q [V], drafts [n]
    def verified_distribution(self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> np.ndarray | None:
        """[V] law of y given the drafts: pi(. | drafts) on supp(q), its last entry spread as p
        outside it; None if the solver failed on the drafts."""
        p64, q64 = as_distribution(p), as_distribution(q)
        support = np.flatnonzero(q64 > 0)
        plan = self.solver(p64[support], q64[support] / q64[support].sum(), drafts.numel())
        transport = plan.transport_slice(np.searchsorted(support, drafts.cpu().numpy()))
        if transport is None:
            return None
        outside = p64.copy()
        outside[support] = 0.0
        verified = outside * (transport[-1] / outside.sum()) if outside.sum() > 0 else outside
        verified[support] = transport[:-1]
        return verified


OT_NODE_RULES: dict[str, NodeRule] = {
    "lp": OTNodeRule(SOLVERS["lp"]),
    "maxflow": OTNodeRule(SOLVERS["maxflow"]),
    "maxflow_opt": OTNodeRule(SOLVERS["maxflow_opt"]),
    "global_resolution": OTNodeRule(SOLVERS["global_resolution"], fallback=kseq_rule),
}
