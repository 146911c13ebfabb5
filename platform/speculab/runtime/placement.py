"""`Placement`: where and how a point's model groups are placed on Ray, as one frozen value (from the
`cluster.*` and `runtime.*` keys), so that starting a loop takes one argument, not a row of them."""

from __future__ import annotations

from dataclasses import dataclass, field


class ClusterError(RuntimeError):
    """The cluster cannot hold or keep what a point needs (a group that cannot be placed, a node lost
    with nowhere to go, restarts used up): the point ends FAILED with this one-line message, keeping
    what it finished, instead of a traceback."""


@dataclass(frozen=True)
class Placement:
    address: str | None = None  # None: an embedded local Ray; "auto" or ray://host:port: a running cluster
    num_cpus: int | None = None  # the embedded cluster's CPUs (None: every core)
    actor_cpus: float = 1.0  # CPUs each model actor reserves
    draft_gpu: float = 1.0  # GPU share of the draft actor (< 1: beside a target shard)
    max_restarts: int = 3  # times a model group is recreated after losing an actor
    collective_timeout_s: float = 300.0  # how long a rank waits in a collective (a TP group's world) for its peers
    placement_timeout_s: float = 30.0  # how long a group waits for its bundles, also after a lost node
    # Ray custom resources every bundle of a group asks for, to pin it to the nodes that offer them;
    # the loop group (runtime.loop=target) takes the target's
    target_resources: dict[str, float] = field(default_factory=dict)
    draft_resources: dict[str, float] = field(default_factory=dict)


OWN_DRAFT_GPU = "cuda:1"  # model.draft_device on Ray: rank 0's bundle asks for a second GPU, the draft's
EMBEDDED = Placement()  # an embedded local Ray sized to this machine, one CPU an actor
