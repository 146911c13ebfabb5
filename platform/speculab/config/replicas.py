"""`cluster.replicas`: how many copies of a point's model groups run a sweep's points side by side.

Each copy (a replica) is a disjoint placement of the point's Ray groups that keeps its loaded models
across the points it runs, as the one copy of a serial sweep does; speculab's Hydra launcher
(`speculab.launch.launcher`) hands each point to a free replica. `auto` takes as many copies as the cluster's
alive nodes hold (`speculab.runtime.nodes.copies`), never more than the sweep has points. With
`cluster.spread` the copies share each point instead: its units are dealt to them (`speculab.point.decoders`),
one point after another, and a single run may use them too.
"""

from __future__ import annotations

import os
from typing import Any

from speculab.config.cluster import ClusterView, own_draft_gpu
from speculab.config.runtime import loop_host

AUTO = "auto"
REPLICAS_RANGE = (1, 1024)  # cluster.replicas, as an integer


def asked(value: Any) -> int | None:
    """The replica count asked for: an integer in REPLICAS_RANGE, None for auto; ValueError for anything else."""
    if value == AUTO:
        return None
    low, high = REPLICAS_RANGE
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(value)
    return value


def replica_errors(cfg: ClusterView) -> list[str]:
    """`cluster.replicas` against what can run copies side by side: Ray groups, each copy's decode loop
    on its own rank 0 (a loop in the driver would share the driver's cores), and, on the embedded
    cluster, enough CPUs for every copy's actors."""
    c = cfg.cluster
    try:
        count = asked(c.replicas)
    except ValueError:
        return [
            f"cluster.replicas={c.replicas}: must be an integer >= {REPLICAS_RANGE[0]} and <= {REPLICAS_RANGE[1]}, "
            "or auto (as many copies of a point's model groups as the cluster holds)"
        ]
    if count == 1:
        spread = "cluster.spread=true: spreads a point's units over replicas; set cluster.replicas > 1 or auto"
        return [spread] if c.spread else []
    if cfg.runtime.kind != "ray":
        return [f"cluster.replicas={c.replicas}: replicas are copies of a point's Ray groups; set runtime=ray"]
    if loop_host(cfg) == "driver":
        return [
            f"cluster.replicas={c.replicas}: with the decode loop in the driver (runtime.loop=driver) the replicas "
            "would share the driver's cores; set runtime.loop=target (or auto)"
        ]
    # the draft in an actor of its own beside the loop group (drafting ahead): its GPU, where it takes a whole one
    actor = c.draft_placement == "own"
    # one copy's GPUs: a GPU a target rank, and the draft's own if asked
    gpus = c.tp_size + own_draft_gpu(cfg) + (actor and c.draft_gpu >= 1)
    if count is not None and c.num_gpus and count * gpus > c.num_gpus:
        return [
            f"cluster.replicas={count}: cluster.num_gpus={c.num_gpus} and each copy of the point's groups takes "
            f"{gpus} GPU(s) (cluster.tp_size={c.tp_size}); set cluster.replicas to at most {max(1, c.num_gpus // gpus)}"
            ", or auto"
        ]
    cores = c.num_cpus or os.cpu_count() or 1
    each = (c.tp_size + actor) * c.actor_cpus  # one copy's CPUs: its loop group's ranks, and a draft actor
    if count is not None and c.address is None and count * each > cores:
        return [
            f"cluster.replicas={count}: the local Ray cluster has {cores} CPUs and {count} copies of the point's "
            f"{c.tp_size + actor} model actor(s) need {count * each:g} (cluster.actor_cpus={c.actor_cpus:g} each); set "
            f"cluster.replicas to at most {max(1, int(cores // each))}, or auto"
        ]
    return []


# What every point of a sweep shares, so that no point may vary it: one parent run in one store and
# experiment, one Ray cluster, one set of replicas and how a point uses them.
SWEEP_WIDE = (
    "cluster.replicas",
    "cluster.spread",
    "cluster.address",
    "tracking.enabled",
    "tracking.uri",
    "tracking.experiment",
    "tracking.spool_dir",
)


def sweep_wide_errors(configs: list[Any]) -> list[str]:
    """A line per SWEEP_WIDE key that takes several values over a sweep's resolved points (`Config`s)."""
    errors = []
    for key in SWEEP_WIDE:
        group, name = key.split(".")
        taken = sorted({str(getattr(getattr(cfg, group), name)) for cfg in configs})
        if len(taken) > 1:
            errors.append(
                f"{key}={','.join(taken)}: one value for the whole sweep (its points share one parent run, store, "
                "Ray cluster and set of replicas)"
            )
    return errors
