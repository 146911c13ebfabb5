"""The custom resources that pin groups to nodes (`cluster.target_resources`, `cluster.draft_resources`):
resources a cluster can offer, checked before anything starts (the address is `config.attach`'s)."""

from __future__ import annotations

from typing import Any

from speculab.config.cluster import ClusterView
from speculab.config.runtime import loop_host


def resource_errors(cfg: ClusterView) -> list[str]:
    """Custom resources a group is pinned with: positive amounts, a cluster that can have them (an embedded
    one offers none), and draft_resources only where the draft has an actor of its own. Whether a node
    offers them is checked once attached, before any actor starts (`runtime.refuse_unoffered`)."""
    c, errors = cfg.cluster, []
    pins = {"cluster.target_resources": c.target_resources, "cluster.draft_resources": c.draft_resources}
    for key, resources in pins.items():
        if not resources:
            continue
        if not isinstance(resources, dict) or not all(_amount(v) > 0 for v in resources.values()):
            errors.append(
                f"{key}={resources!r}: must be a mapping of Ray resource names to amounts > 0, e.g. {{gpu_a: 1}}"
            )
        elif cfg.runtime.kind != "ray" or c.address is None:
            errors.append(
                f"{key}={resources}: custom resources need runtime=ray attached to a cluster whose nodes "
                "offer them (cluster.address=auto or host:port; an embedded local Ray offers none)"
            )
    if c.draft_resources and cfg.runtime.kind == "ray" and loop_host(cfg) == "target":
        errors.append(
            f"cluster.draft_resources={c.draft_resources}: with runtime.loop=target the draft runs in rank "
            "0's process, placed by cluster.target_resources; set runtime.loop=driver for a draft actor of its own"
        )
    return errors


def _amount(value: Any) -> float:
    """A resource amount as a number, or -1 for anything that is not one."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else -1.0
