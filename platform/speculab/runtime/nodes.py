"""The cluster's nodes as a placement sees them: which are alive, what each offers, whether a group's
bundles can ever fit on one of them (STRICT_PACK), and how to name a node in a message.

Ray waits for ever for a placement group that no node can hold; these checks let a group refuse at
once instead (a request no node offers, a lost node whose group has nowhere to go) and wait, bounded,
only for resources that some node has but others are using."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import ray

Bundle = dict[str, float]
GIB = 2**30
FIRST = ("CPU", "GPU")  # listed before a node's custom resources; its memory last


def readable(resources: dict[str, float]) -> str:
    """Resources as a person reads them: CPU, GPU and custom resources with their amounts, then memory in
    GiB; Ray's own entries (each node's `node:<ip>`, placement groups' `..._group_...`, the object
    store) left out."""
    shown = {k: v for k, v in resources.items() if not (k.startswith("node:") or "_group_" in k)}
    shown.pop("object_store_memory", None)
    memory = shown.pop("memory", None)
    keys = [k for k in FIRST if k in shown] + sorted(k for k in shown if k not in FIRST)
    parts = [f"{key} {round(shown[key], 3):g}" for key in keys]
    parts += [f"memory {memory / GIB:.1f} GiB"] if memory is not None else []
    return ", ".join(parts) or "nothing"


@dataclass(frozen=True)
class Node:
    node_id: str
    address: str  # the node's IP
    alive: bool
    resources: dict[str, float]  # totals, as the node was started with

    @property
    def name(self) -> str:
        """The node's address and id (two nodes of one host share the address)."""
        return f"{self.address} (node {self.node_id[:8]})"

    def describe(self) -> str:
        return f"{self.name}: {readable(self.resources)}"


def cluster_nodes() -> list[Node]:
    """Every node the cluster has known, alive or not."""
    return [Node(n["NodeID"], n["NodeManagerAddress"], bool(n["Alive"]), dict(n["Resources"])) for n in ray.nodes()]


def demand(bundles: list[Bundle]) -> Bundle:
    """What a STRICT_PACK group asks of one node: its bundles summed."""
    total: Bundle = {}
    for bundle in bundles:
        for key, amount in bundle.items():
            total[key] = total.get(key, 0.0) + amount
    return total


def fits(bundles: list[Bundle], resources: dict[str, float]) -> bool:
    """Whether a node with these total `resources` could hold all `bundles` at once (nothing else running)."""
    return all(resources.get(key, 0.0) >= amount - 1e-9 for key, amount in demand(bundles).items())


def unplaceable(bundles: list[Bundle], nodes: list[Node]) -> bool:
    """No alive node could ever hold the group, however long it waited."""
    return not any(n.alive and fits(bundles, n.resources) for n in nodes)


def copies(groups: list[list[Bundle]], nodes: list[Node], most: int) -> int:
    """How many copies of a point's `groups` (each group on one node, STRICT_PACK) the alive nodes hold at
    once, placed first-fit in node order, up to `most`."""
    left = [dict(n.resources) for n in nodes if n.alive]
    for count in range(most):
        for need in map(demand, groups):
            node = next((free for free in left if fits([need], free)), None)
            if node is None:
                return count
            for key, amount in need.items():
                node[key] -= amount
    return most


def without(nodes: list[Node], held: dict[str, Bundle]) -> list[Node]:
    """`nodes` with the resources `held` on each (by node id) taken off: what is left for another group."""
    return [
        replace(n, resources={k: v - held.get(n.node_id, {}).get(k, 0.0) for k, v in n.resources.items()})
        for n in nodes
    ]


def free_text(available: dict[str, float], former: list[Node]) -> str:
    """What is free for a group being placed again, `readable`: Ray's `available` less the alive nodes among
    `former`, the nodes it held before it lost its actors, which Ray counts alive and free until its health
    checks declare them dead (about 15 s), whether they died or not."""
    doubtful = [n for n in former if n.alive]
    less = {k: max(0.0, v - sum(n.resources.get(k, 0.0) for n in doubtful)) for k, v in available.items()}
    if not doubtful:
        return readable(available)
    named = ", ".join(n.name for n in doubtful)
    return f"{readable(less)} (not counting {named}, where its lost actors ran, until Ray says whether it is alive)"


def alive_nodes_text(nodes: list[Node]) -> str:
    alive = [n.describe() for n in nodes if n.alive]
    return "; ".join(alive) if alive else "none"


def bundle_nodes(pg: Any) -> list[str]:
    """The node id of each bundle of a placed group, in bundle order."""
    placed = ray.util.placement_group_table(pg).get("bundles_to_node_id", {})
    return [placed[i] for i in sorted(placed)]


def lost(node_ids: list[str], nodes: list[Node]) -> list[Node]:
    """Those of `node_ids` that the cluster now reports dead."""
    dead = {n.node_id: n for n in nodes if not n.alive}
    return [dead[i] for i in dict.fromkeys(node_ids) if i in dead]


def unoffered(field: str, resources: dict[str, float], nodes: list[Node]) -> str | None:
    """Why no alive node offers what `field` (`cluster.target_resources`, ...) asks every bundle for, or None."""
    if not resources or any(n.alive and fits([resources], n.resources) for n in nodes):
        return None
    return (
        f"{field}={resources}: no alive node of the cluster offers it (start a node with "
        f"`ray start ... --resources '{{\"name\": amount}}'`); alive nodes offer: {alive_nodes_text(nodes)}"
    )
