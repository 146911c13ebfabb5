"""Where the draft lives (`cluster.draft_placement`, and where its bytes sit among the GPUs), worked out
once into a `ClusterPlan` that the checks and the run's plan share, and the checks that need it: the
cluster's GPUs against the model actors, the target's tensor-parallel split and the memory footprint
(`config.footprint`)."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from speculab.config.checkpoints import Checkpoint
from speculab.config.cluster import OWN_DRAFT_GPU, TP_RANGE, ClusterView, field_errors, own_draft_gpu, resolve_device
from speculab.config.errors import choice, within
from speculab.config.footprint import host_memory_bytes, planned_footprint, tp_backend_for
from speculab.config.runtime import loop_host

if TYPE_CHECKING:
    from speculab.models.memory import MemoryFootprint

# cluster.draft_placement: own (an actor of its own: runtime.loop=driver), beside (whole, in rank 0's process),
# sharded (split over the target's ranks, each holding a shard of both), auto (own with runtime.loop=driver;
# else beside, or sharded where only sharded fits the GPUs: `fits_only_sharded`)
DRAFT_PLACEMENTS = ("auto", "own", "beside", "sharded")


def draft_place(cfg: ClusterView, found: dict[str, Checkpoint]) -> str:
    """Where the draft lives (`cluster.draft_placement` resolved): own (its own actor, the loop in the
    driver), beside (whole, in the loop's process: inline, or rank 0 of the loop group) or sharded (a shard
    on each rank of the loop group; at tp_size 1 that is beside). `auto` is own with the loop in the driver;
    on rank 0 it is beside, or sharded where only sharded fits (`fits_only_sharded`)."""
    host, chosen = loop_host(cfg), cfg.cluster.draft_placement
    if host == "inline" or (chosen == "sharded" and cfg.cluster.tp_size == 1):
        return "beside"
    if chosen != "auto":
        return chosen
    if host == "driver":
        return "own"
    return "sharded" if fits_only_sharded(cfg, found) else "beside"


def fits_only_sharded(cfg: ClusterView, found: dict[str, Checkpoint]) -> bool:
    """On GPUs at tp_size > 1, by the planner's figures: the whole draft beside a target shard overflows
    the busiest GPU and a draft shard on each does not (a drafter that can be sharded, without a GPU of its
    own). Sharding costs collectives every draft pass (benchmarks/RESULTS.md), so `auto` shards only then."""
    from speculab.models.memory import GIB
    from speculab.registry import DRAFTERS

    c, drafter = cfg.cluster, DRAFTERS.get(cfg.drafter.name)
    if c.tp_size == 1 or c.num_gpus == 0 or own_draft_gpu(cfg) or drafter is None or drafter.backend:
        return False
    if not resolve_device(cfg, cfg.model.device).startswith("cuda"):
        return False
    beside, sharded = planned_footprint(cfg, found, "beside"), planned_footprint(cfg, found, "sharded")
    if beside is None or sharded is None:
        return False
    return beside.busiest_gpu > c.gpu_memory_gib * GIB >= sharded.busiest_gpu


def placement_errors(cfg: ClusterView) -> list[str]:
    """`cluster.draft_placement` against the loop's place and the drafter: a draft actor of its own is
    called by a loop in the driver, or driven over a socket by a loop on rank 0 (an i.i.d. path drafter;
    the place drafting ahead runs at the same time as the target), one in the loop's group by a loop on
    rank 0, and a draft asked to be
    sharded needs a drafter whose checkpoint loads as tensor-parallel shards (the pair's draft model) and
    no GPU of its own (`auto` shards only such a draft: `fits_only_sharded`)."""
    from speculab.registry import DRAFTERS

    c, errors = cfg.cluster, list[str]()
    choice(errors, "cluster.draft_placement", c.draft_placement, DRAFT_PLACEMENTS)
    host = loop_host(cfg)
    samplers = [name for name, d in DRAFTERS.items() if d.proposes == "paths"]  # the pair's draft samples paths
    if c.draft_placement == "own" and host == "target" and cfg.drafter.name not in samplers:
        errors.append(
            f"cluster.draft_placement=own with runtime.loop=target: rank 0 drives a draft actor of its own over a "
            f"socket for drafter={'/'.join(samplers)} only (got {cfg.drafter.name}); set runtime.loop=driver, or "
            "cluster.draft_placement=beside"
        )
    if cfg.drafter.ahead != "off" and host == "driver":
        errors.append(
            f"drafter.ahead={cfg.drafter.ahead}: with the loop in the driver every draft call is a Ray call in "
            "turn, so nothing is drafted while the target verifies; set runtime.loop=target (or auto) with "
            "cluster.draft_placement=own"
        )
    if c.draft_placement in ("beside", "sharded") and host == "driver":
        errors.append(
            f"cluster.draft_placement={c.draft_placement}: the draft in the loop's group needs the loop on rank 0; "
            "set runtime.loop=target (or auto), or cluster.draft_placement=own"
        )
    if c.draft_placement != "sharded" or host == "inline" or c.tp_size == 1:  # sharded as draft_place resolves it
        return errors
    drafter = DRAFTERS.get(cfg.drafter.name)
    if drafter is not None and drafter.backend:
        errors.append(
            f"cluster.draft_placement=sharded: drafter={cfg.drafter.name} loads its own checkpoint "
            f"(backend {drafter.backend}), which has no tensor-parallel loader; use cluster.draft_placement=beside"
        )
    if cfg.model.draft_device == OWN_DRAFT_GPU:
        errors.append(
            f"cluster.draft_placement=sharded: model.draft_device={OWN_DRAFT_GPU} asks for a GPU of the draft's "
            "own, but a sharded draft lives on the target's GPUs; drop model.draft_device or use "
            "cluster.draft_placement=beside"
        )
    return errors


def gpu_place(cfg: ClusterView, placed: str) -> str:
    """Where the draft's bytes sit among the GPUs (`models.memory.DRAFT_WHERE`), the draft `placed` as
    `draft_place` has it: on a GPU of its own, beside one target shard, or sharded over every target GPU. A
    draft outside the loop group (its own actor, or inline) takes the share cluster.draft_gpu gives it; one
    in rank 0's process has a GPU of its own only with model.draft_device=cuda:1."""
    if loop_host(cfg) != "target" or placed == "own":
        return "own" if cfg.cluster.draft_gpu >= 1 else "beside"
    return "own" if own_draft_gpu(cfg) else placed


class ClusterPlan:
    """What the checks work out of the cluster once, for the run's plan to keep (`config.resolve`): where
    the draft lives and where its bytes sit among the GPUs; the TP backend and the memory plan when first
    asked for (by then the checkpoints and the fields they read are valid)."""

    def __init__(self, cfg: ClusterView, found: dict[str, Checkpoint]) -> None:
        self.cfg, self.found = cfg, found
        self.draft_placement = draft_place(cfg, found)
        self.gpu_place = gpu_place(cfg, self.draft_placement)

    @cached_property
    def tp_backend(self) -> str:
        """`cluster.tp_backend` resolved by the target (`tp_backend_for`)."""
        return tp_backend_for(self.cfg.cluster.tp_backend, self.found["target"].config)

    @cached_property
    def footprint(self) -> MemoryFootprint | None:
        """The point's bytes per GPU (or host process) with the draft where it sits (`planned_footprint`)."""
        return planned_footprint(self.cfg, self.found, self.gpu_place)


def cluster_errors(cfg: ClusterView, found: dict[str, Checkpoint], plan: ClusterPlan) -> list[str]:
    """The cluster's fields, its GPUs against the model actors, TP divisibility and the memory footprint
    (speculab.models.memory, from config.json), with the draft where `plan` puts it."""
    from speculab.models.memory import DTYPE_BYTES
    from speculab.registry import ALGORITHMS

    c = cfg.cluster
    split: list[str] = []
    within(split, "cluster.tp_size", c.tp_size, TP_RANGE)
    if cfg.runtime.kind == "inline" and c.tp_size > 1:
        split.append(f"cluster.tp_size={c.tp_size}: tensor parallelism needs runtime=ray (inline is one process)")
    errors = field_errors(c) + placement_errors(cfg)
    own_gpu = 1 if plan.gpu_place == "own" else 0
    if c.num_gpus > 0 and c.tp_size + own_gpu > c.num_gpus:
        errors.append(
            f"cluster.tp_size={c.tp_size} target GPUs + {own_gpu} draft GPU > cluster.num_gpus="
            f"{c.num_gpus}; lower cluster.tp_size, shard the draft with the target (cluster.draft_placement="
            "sharded) or set cluster.draft_gpu < 1 (draft beside a target shard), or use a cluster with more GPUs"
        )
    if len(found) < 2 or c.tp_size < 1 or cfg.model.dtype not in DTYPE_BYTES or cfg.algorithm.name not in ALGORITHMS:
        return split + errors  # each refused in its own line; nothing to plan the memory by
    return split + errors + _memory_errors(cfg, found, plan, memory=not errors)


def _memory_errors(cfg: ClusterView, found: dict[str, Checkpoint], plan: ClusterPlan, memory: bool) -> list[str]:
    """The target's split over cluster.tp_size ranks, and on GPUs (with `memory`: the cluster's other
    fields are valid) the memory footprint of the point."""
    from speculab.models.memory import architecture, fit_errors, host_fit_errors, tp_errors

    c = cfg.cluster
    try:
        target, draft = architecture(found["target"].config), architecture(found["draft"].config)
    except (ValueError, KeyError) as err:
        if c.tp_size == 1 and c.num_gpus == 0:
            return []  # one CPU process: no split and no GPU memory to plan
        return [f"model.name={cfg.model.name!r}: cannot plan tensor parallelism or memory from config.json ({err!r})"]
    backend = plan.tp_backend
    errors = tp_errors(target, c.tp_size, f"model {cfg.model.name} (target)", backend)
    if plan.gpu_place == "sharded":  # the draft's shards load with the target's backend, over the same ranks
        errors += tp_errors(
            draft, c.tp_size, f"model {cfg.model.name} (draft, cluster.draft_placement=sharded)", backend
        )
    if errors or not memory:
        return errors
    footprint = plan.footprint
    assert footprint is not None  # both architectures are known (above)
    if resolve_device(cfg, cfg.model.device).startswith("cuda"):
        return fit_errors(footprint, c.gpu_memory_gib) if c.num_gpus > 0 else []
    local = cfg.runtime.kind == "inline" or c.address is None  # every model process on this machine
    return host_fit_errors(footprint, host_memory_bytes()) if local else []
