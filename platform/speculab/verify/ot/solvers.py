"""The registry of single-step OT solvers: name -> (p [k], q [k], n) -> TransportPlan."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from speculab.verify.ot.global_resolution import solve_global_resolution
from speculab.verify.ot.lp import solve_lp
from speculab.verify.ot.maxflow import solve_maxflow, solve_maxflow_opt
from speculab.verify.ot.plan import TransportPlan

Solver = Callable[[np.ndarray, np.ndarray, int], TransportPlan]

SOLVERS: dict[str, Solver] = {
    "lp": solve_lp,
    "maxflow": solve_maxflow,
    "maxflow_opt": solve_maxflow_opt,
    "global_resolution": solve_global_resolution,
}
