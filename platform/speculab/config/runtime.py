"""`runtime.*`: how the models run (in this process, or in Ray actors) and where the decode loop runs,
with the checks of those keys and `loop_host`, the loop's place a run takes from them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from speculab.config.errors import choice, within

RUNTIMES = ("inline", "ray")
# runtime.loop: where the decode loop runs on Ray. target: in rank 0 of the target's group, the draft in the
# same process (or sharded over the group's ranks), the other ranks following its calls (no Ray call inside a
# round, at any TP size), or with cluster.draft_placement=own the draft in an actor of its own that rank 0 drives
# over a socket; driver: in this process, the draft in its own actor (Ray calls every round); auto: driver where
# cluster.draft_placement=own asks for a draft actor (target with drafter.ahead), else target.
LOOPS = ("auto", "target", "driver")


@dataclass
class RuntimeConfig:
    kind: str = "ray"  # inline: one process; ray: the models in Ray actors
    loop: str = "auto"  # ray: where the decode loop runs (LOOPS)
    # torch's intra-op threads in each model process; 0: the CPUs one model actor reserves
    # (cluster.actor_cpus, at least 1), inline as on Ray, so that both measure under the same threads
    torch_threads: int = 0
    max_restarts: int = 3  # ray: times a model group is recreated after losing an actor
    collective_timeout_s: float = 300.0  # ray, tp_size > 1: how long a rank waits in a collective for a peer
    placement_timeout_s: float = 30.0  # ray: how long a model group waits to be placed, also after a lost node


MIN_TIMEOUT_S = 1.0  # below, a Ray group could never be placed (nor a collective step answered) in time
MAX_TIMEOUT_S = 86400.0  # a day: past it a wait is a typo (and torch's timedelta overflows at 10**12 s)
RESTARTS_RANGE = (0, 100)  # runtime.max_restarts
THREADS_RANGE = (0, 1024)  # runtime.torch_threads (0: the CPUs one model actor reserves)


class DraftPlaced(Protocol):
    draft_placement: str  # `cluster.draft_placement` (config.cluster_plan.DRAFT_PLACEMENTS)


class DraftsAhead(Protocol):
    ahead: str  # `drafter.ahead` (config.algorithm.AHEAD_MODES)
    ahead_budget: int


class RuntimeView(Protocol):
    """The parts of a config `loop_host` reads (`Config` is one): typed by their shape, because the root
    `Config` is built from this module's dataclass and so cannot be imported here."""

    runtime: RuntimeConfig

    @property
    def cluster(self) -> DraftPlaced: ...

    @property
    def drafter(self) -> DraftsAhead: ...


def loop_host(cfg: RuntimeView) -> str:
    """Where the decode loop runs: "inline" (runtime=inline), "target" (in rank 0 of the target's Ray
    group, with the draft in the same process or sharded over the ranks; what `auto` picks) or "driver"
    (this process; the draft in its own actor: what `auto` picks for cluster.draft_placement=own, except
    with drafter.ahead, where rank 0 drives the draft's actor over a socket so that it drafts while the
    target verifies)."""
    if cfg.runtime.kind == "inline":
        return "inline"
    if cfg.runtime.loop == "auto":
        return "driver" if cfg.cluster.draft_placement == "own" and cfg.drafter.ahead == "off" else "target"
    return cfg.runtime.loop


def runtime_errors(r: RuntimeConfig) -> list[str]:
    """A known runtime and loop place, counts within their ranges and timeouts between a second and a day."""
    errors: list[str] = []
    choice(errors, "runtime.kind", r.kind, RUNTIMES)
    choice(errors, "runtime.loop", r.loop, LOOPS)
    within(errors, "runtime.max_restarts", r.max_restarts, RESTARTS_RANGE)
    within(errors, "runtime.torch_threads", r.torch_threads, THREADS_RANGE)
    for key in ("collective_timeout_s", "placement_timeout_s"):
        if not MIN_TIMEOUT_S <= getattr(r, key) <= MAX_TIMEOUT_S:
            errors.append(
                f"runtime.{key}={getattr(r, key)}: must be >= {MIN_TIMEOUT_S:g} and <= {MAX_TIMEOUT_S:g} (seconds: "
                "placing a group or a collective step takes longer than the least; the most is a day)"
            )
    return errors
