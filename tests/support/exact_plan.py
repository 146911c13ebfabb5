"""Exact output law and acceptance of a transport plan, by enumerating every drafted tuple."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from speculab.verify.ot.plan import TransportPlan


@dataclass(frozen=True)
class PlanOutcome:
    # [k+1] law of the verified token (entry k: outside the truncated vocabulary)
    output: np.ndarray
    # probability that the verified token is one of the drafts
    acceptance: float


# q [k]
def plan_outcome(plan: TransportPlan, q: np.ndarray, n: int) -> PlanOutcome | None:
    """Sum over all omega in V^n of q^n(omega) pi(.|omega); None if any slice failed."""
    output = np.zeros(q.shape[0] + 1)
    acceptance = 0.0
    for omega in itertools.product(range(q.shape[0]), repeat=n):
        mass = float(np.prod(q[list(omega)]))
        if mass == 0.0:
            continue
        transport = plan.transport_slice(np.array(omega))
        if transport is None:
            return None
        output += mass * transport
        acceptance += mass * transport[sorted(set(omega))].sum()
    return PlanOutcome(output, acceptance)


# rng, k
def random_instance(rng: np.random.Generator, k: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(p [k], q [k]): dense Dirichlet, sparse (zeros in p and q), truncated p, or one-hot."""
    p, q = rng.dirichlet(np.full(k, 0.5)), rng.dirichlet(np.full(k, 0.5))
    if kind == "sparse":
        p[rng.random(k) < 0.3] = 0.0
        q[rng.random(k) < 0.3] = 0.0
        p[0], q[-1] = p[0] + 0.1, q[-1] + 0.1
    if kind == "onehot":
        p, q = np.eye(k)[rng.integers(k)], np.eye(k)[rng.integers(k)]
    # truncated: p keeps 20% of its mass outside the k-token vocabulary (App. N)
    return p / p.sum() * (0.8 if kind == "truncated" else 1.0), q / q.sum()
