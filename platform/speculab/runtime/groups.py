"""Model groups on Ray: the ranks of one model in a STRICT_PACK placement group, named for reuse.

A target group is `tp_size` `ModelHost` actors, one bundle each ({"CPU": c} on CPU, {"GPU": 1,
"CPU": c} on GPU); rank 0 publishes an address and a free port and every rank joins the TP world
and loads its shard. A draft group is one actor outside that world: on its own GPU, or
(`draft_gpu` < 1) on the share of rank 0's GPU that the target's first bundle leaves free. A
loop group (`runtime.loop=target`) is one actor holding the target, the draft and the decode
loop, on one bundle (one GPU where either model is on CUDA). Groups are named by a hash of
everything that determines what they load and where, in the job's namespace, so every point of a
sweep attaches to the same loaded actors (`get_if_exists` ignores constructor arguments, hence
the hash). Ray collects a named actor once no handle to it is left, so `POOL` keeps this
driver's open groups between sweep points until `close_all`. A group is
used whole or not at all: if any rank is missing it is torn down and created again.
This module does not keep ranks in lock step or replay calls (`speculab.runtime.transport.proxy`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from typing import Any

import ray
from ray.exceptions import RayTaskError
from ray.util.placement_group import get_placement_group, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from speculab.config.cluster import Placement
from speculab.models import LMSpec
from speculab.models.weights import WeightsError
from speculab.runtime.loop_host import LoopSpec
from speculab.runtime.nodes import (
    Bundle,
    Node,
    alive_nodes_text,
    bundle_nodes,
    cluster_nodes,
    demand,
    fits,
    free_text,
    lost,
    readable,
    unplaceable,
    without,
)
from speculab.runtime.placement import EMBEDDED, ClusterError
from speculab.runtime.ray_actors import ModelHost

REPLICA_MARK = "-replica"  # a group's name ends with its replica (`group_name`)

log = logging.getLogger(__name__)
WAIT_REPORT_S = 5.0  # how often a group waiting for its bundles says so


def target_bundles(tp_size: int, device: str, cpus: float, draft_gpu: float) -> list[Bundle]:
    """One bundle per TP rank; with draft_gpu < 1 rank 0 leaves that share of its GPU to the draft."""
    if device != "cuda":
        return [{"CPU": cpus}] * tp_size
    first = 1.0 - draft_gpu if draft_gpu < 1 else 1.0
    return [{"GPU": first, "CPU": cpus}] + [{"GPU": 1.0, "CPU": cpus}] * (tp_size - 1)


def draft_bundles(device: str, cpus: float, draft_gpu: float) -> list[Bundle]:
    return [{"GPU": min(draft_gpu, 1.0), "CPU": cpus}] if device == "cuda" else [{"CPU": cpus}]


def loop_bundles(device: str, cpus: float, ranks: int, own_draft_gpu: bool = False) -> list[Bundle]:
    """The loop group's bundles, one per target rank: the draft shares rank 0's GPU (as in vLLM's and
    SGLang's workers), or with `own_draft_gpu` rank 0 asks for a second one, the draft's."""
    if device != "cuda":
        return [{"CPU": cpus}] * ranks
    return [{"GPU": 2.0 if own_draft_gpu else 1.0, "CPU": cpus}] + [{"GPU": 1.0, "CPU": cpus}] * (ranks - 1)


def pinned(bundles: list[Bundle], resources: dict[str, float]) -> list[Bundle]:
    """`bundles` each also asking for the Ray custom `resources` (`cluster.target_resources`,
    `cluster.draft_resources`), which only the nodes a user started with them offer."""
    return [bundle | resources for bundle in bundles]


def spec_key(spec: LMSpec | LoopSpec) -> tuple[Any, ...]:
    """What of a spec decides what a group loads and how it runs: path, TP size, dtype, device kind,
    threads, passes (a sweep over `model.capture` must not reuse an actor built the other way), TP backend."""
    if isinstance(spec, LoopSpec):  # a loop group whose draft is an actor of its own loads no draft
        return spec_key(spec.target) + (("draft_own",) if spec.draft_own else spec_key(spec.draft))
    return (
        spec.backend,
        os.path.abspath(spec.path),
        spec.target_path and os.path.abspath(spec.target_path),
        spec.feature_layers,
        spec.tp_size,
        spec.tp_backend,
        spec.dtype,
        spec.device,
        spec.threads,
        spec.passes,
    )


def group_name(role: str, spec: LMSpec | LoopSpec, bundles: list[Bundle], replica: int = 0) -> str:
    """Stable name from the role, what it loads (`spec_key`), its placement and its replica (a sweep's
    copies of one group, `cluster.replicas`, are separate groups, their replica at the end of the name)."""
    key = "|".join(map(str, (role, *spec_key(spec), bundles, *([replica] if replica else []))))
    return f"speculab-{role}-{hashlib.sha1(key.encode()).hexdigest()[:12]}{REPLICA_MARK}{replica}"


def replica_of(name: str) -> int:
    """The replica a group's name (`group_name`) or its placement group's name belongs to."""
    return int(name.rpartition(REPLICA_MARK)[2])


def held_beside(replica: int) -> dict[str, Bundle]:
    """What the placed groups of the sweep's other replicas hold, by node id: the placement groups of this
    driver's namespace, whichever replica's process placed them (`speculab.launch.replica_process`); empty with one
    replica."""
    prefix = f"{ray.get_runtime_context().namespace}:speculab-"
    held: dict[str, Bundle] = {}
    for pg in ray.util.placement_group_table().values():
        if pg["state"] != "CREATED" or not pg["name"].startswith(prefix) or replica_of(pg["name"]) == replica:
            continue
        for index, node in pg["bundles_to_node_id"].items():
            held[node] = demand([held.get(node, {}), pg["bundles"][index]])
    return held


class ActorGroup:
    """The ranks of one model (`role` "target" or "draft"), or the loop actor, created or attached by name."""

    def __init__(
        self,
        role: str,
        spec: LMSpec | LoopSpec,
        bundles: list[Bundle],
        placement: Placement = EMBEDDED,
    ) -> None:
        self.role, self.spec, self.bundles, self.placement = role, spec, bundles, placement
        self.name = group_name(role, spec, bundles, placement.replica)
        self.members: list[Any] = []
        self.nodes: list[str] = []  # the node id of each rank's bundle, once placed
        self.loads = 0  # times this driver loaded the group's models (`model_loads`)
        # The proxy whose calls made the actors' state (a point, a batch): another proxy on the same
        # group replays its own state first (`GroupProxy`).
        self.holder: object | None = None
        self.open()

    @property
    def size(self) -> int:
        return len(self.bundles)

    def open(self) -> None:
        """Attach to the named group if every rank is loaded; otherwise create and load it."""
        self.pg = self._placement_group()
        self.members = [self._member(rank) for rank in range(self.size)]
        loaded = ray.get([m.is_loaded.remote() for m in self.members])
        if all(loaded):
            return
        if any(loaded):  # a rank was lost: never use a partial group
            self.close()
            return self.open()
        address, port = ray.get(self.members[0].endpoint.remote())
        # Every rank's load is submitted before waiting on any: the rendezvous needs all of them.
        timeout = self.placement.collective_timeout_s
        try:
            ray.get([m.load.remote(self.role, self.spec, address, port, timeout) for m in self.members])
        except RayTaskError as err:  # no rank of a group that failed to load is kept
            self.close()
            if isinstance(err.cause, WeightsError):  # its one line, without the actor's traceback
                raise err.cause from None
            raise
        self.loads += 1

    def submit(self, method: str, args: tuple, kwargs: dict, split: bool = False) -> tuple[list[Any], Any]:
        """The same call on every rank, in order: (one Reply reference per rank, rank 0 first; with
        `split`, the reference to rank 0's value, which the Replies then lack, else None).
        ObjectRef keyword arguments go as top-level arguments, so each rank gets their values."""
        payload = ray.put(args) if self.size > 1 else args  # serialised once for all ranks
        refs = {key: value for key, value in kwargs.items() if isinstance(value, ray.ObjectRef)}
        plain = {key: value for key, value in kwargs.items() if key not in refs}
        if not split:
            return [m.call.remote(method, payload, plain, tuple(refs), *refs.values()) for m in self.members], None
        pairs = [m.call_split.remote(method, payload, plain, tuple(refs), *refs.values()) for m in self.members]
        return [reply for reply, _ in pairs], pairs[0][1]

    def close(self) -> None:
        """Kill every rank and free the placement group; returns once the names are free."""
        for member in self.members:
            ray.kill(member, no_restart=True)
        remove_placement_group(self.pg)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(self._exists(f"{self.name}-r{r}") for r in range(self.size)):
            time.sleep(0.05)
        self.members = []

    def _placement_group(self) -> Any:
        """The group's placement group, placed: refused at once when no alive node could ever hold it,
        else waited for up to `runtime.placement_timeout_s`, saying so every few seconds."""
        # Ray's placement group table does not record namespaces: the name carries it, for cleanup.
        name = f"{ray.get_runtime_context().namespace}:{self.name}"
        if unplaceable(self.bundles, nodes := self._nodes()):
            raise ClusterError(self._unplaced("no alive node can hold", lost(self.nodes, nodes), nodes))
        try:
            pg = get_placement_group(name)
        except ValueError:
            pg = placement_group(self.bundles, strategy="STRICT_PACK", name=name)
        if (why := self._wait_placed(pg)) is not None:
            remove_placement_group(pg)
            raise ClusterError(why)
        self.nodes = bundle_nodes(pg)
        return pg

    def _wait_placed(self, pg: Any) -> str | None:
        """None once `pg` is placed; else why not: no alive node can hold it any more (checked every
        second, so a lost node is named as soon as Ray marks it dead), or the timeout passed."""
        start = reported = time.monotonic()
        deadline = start + self.placement.placement_timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                ray.get(pg.ready(), timeout=min(1.0, left))
                return None
            except ray.exceptions.GetTimeoutError:
                if unplaceable(self.bundles, nodes := self._nodes()):
                    return self._unplaced("no alive node can hold", lost(self.nodes, nodes), nodes)
                if time.monotonic() - reported >= WAIT_REPORT_S:
                    reported = time.monotonic()
                    log.warning(
                        "%s group: waiting for %s (one node) to be placed: %.0f s of %g s; free now: %s",
                        self.role,
                        readable(demand(self.bundles)),
                        reported - start,
                        self.placement.placement_timeout_s,
                        free_text(ray.available_resources(), [n for n in nodes if n.node_id in self.nodes]),
                    )
        waited = f"not placed within runtime.placement_timeout_s={self.placement.placement_timeout_s:g} s:"
        return self._unplaced(waited, lost(self.nodes, nodes := self._nodes()), nodes)

    def _nodes(self) -> list[Node]:
        """The cluster's nodes less what the sweep's other replicas hold there (`cluster.replicas`): a group
        of a lost replica that only their nodes could hold has nowhere to go while they run."""
        return without(cluster_nodes(), held_beside(self.placement.replica))

    def _unplaced(self, why: str, lost_nodes: list[Any], nodes: list[Any]) -> str:
        were = f"node {', '.join(n.name for n in lost_nodes)} was lost; " if lost_nodes else ""
        beside = " beside the sweep's other replicas" if held_beside(self.placement.replica) else ""
        return (
            f"{self.role} group: {were}{why} its {len(self.bundles)} bundle(s), {readable(demand(self.bundles))} "
            f"on one node (STRICT_PACK); alive nodes offer{beside}: {alive_nodes_text(nodes)}"
        )

    def _member(self, rank: int) -> Any:
        bundle = self.bundles[rank]
        return (
            ray.remote(ModelHost)
            .options(
                name=f"{self.name}-r{rank}",
                get_if_exists=True,
                num_cpus=bundle["CPU"],
                num_gpus=bundle.get("GPU", 0.0),
                scheduling_strategy=PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=rank),
                runtime_env={"env_vars": {"OMP_WAIT_POLICY": os.environ["OMP_WAIT_POLICY"]}},  # see speculab/__init__
            )
            .remote(rank, self.size)
        )

    @staticmethod
    def _exists(name: str) -> bool:
        try:
            ray.get_actor(name)
            return True
        except ValueError:
            return False


class GroupPool:
    """This driver's open groups by name: holding the handles keeps them alive. The groups count their
    own loads here, in the driver, so that no helper actor on some node is needed to count them.

    One per process (`POOL`), because Ray's named actors are the process's: a single run's, one replica's
    of a sweep (`speculab.launch.replica_process`), or a point's spread over replicas (`cluster.spread`), whose
    lanes run in threads; every walk over the groups takes a snapshot, so a lane's thread adding a group
    while the run's end closes all never breaks a walk."""

    def __init__(self) -> None:
        self.groups: dict[str, ActorGroup] = {}

    def get(
        self,
        role: str,
        spec: LMSpec | LoopSpec,
        bundles: list[Bundle],
        placement: Placement = EMBEDDED,
        keep: frozenset[str] = frozenset(),
    ) -> ActorGroup:
        """The open group for (role, spec, bundles), created and loaded on first use; `keep`: the names of
        its point's other groups (`make_room` closes none of them)."""
        name = group_name(role, spec, bundles, placement.replica)
        if name not in self.groups:
            self.make_room(bundles, placement.replica, keep)
            self.groups[name] = ActorGroup(role, spec, bundles, placement)
        return self.groups[name]

    def make_room(self, bundles: list[Bundle], replica: int, keep: frozenset[str]) -> None:
        """Close `replica`'s open groups not in `keep`, oldest first, until the cluster's free resources and
        theirs hold `bundles`: a sweep's point in another layout than the point before (`runtime.loop=auto`
        puts `drafter.ahead=off` and `ssd` apart) gets what its groups need instead of waiting for what the
        idle groups hold. Groups that leave room stay loaded for a later point."""
        idle = [g for name, g in list(self.groups.items()) if g.placement.replica == replica and name not in keep]
        if not idle:
            return
        free, closing = dict(ray.available_resources()), []
        for group in idle:
            if fits(bundles, free):
                break
            closing.append(group)
            for key, amount in demand(group.bundles).items():  # what closing it frees
                free[key] = free.get(key, 0.0) + amount
        if not closing:
            return
        log.warning(
            "closing %d group(s) of this process's earlier points to make room for %s: %s",
            len(closing),
            readable(demand(bundles)),
            ", ".join(g.name for g in closing),
        )
        for group in closing:
            self.groups.pop(group.name, None)
            group.close()

    def model_loads(self, replica: int = 0) -> int:
        """Group loads of one replica by this driver since its pool was last emptied (a sweep reusing its
        groups: one each)."""
        return sum(group.loads for group in list(self.groups.values()) if group.placement.replica == replica)

    def close_all(self) -> None:
        groups, self.groups = list(self.groups.values()), {}
        for group in groups:
            group.close()


POOL = GroupPool()
