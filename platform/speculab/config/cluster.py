"""`cluster.*`: where the models run. The cluster a point's models are placed on (`ClusterConfig`, and
the `Placement` of its model groups it gives the runtime), each model's device (`model.device`,
`model.draft_device`) resolved and checked against the GPUs of that place (this machine, an embedded
Ray cluster on it, or a remote cluster's declared GPUs) and described for the run's tags; where the draft
lives (`cluster.draft_placement`); the cluster's CPUs and GPUs against the model actors, the target's
tensor-parallel split and the memory footprint (`speculab.models.memory`, from config.json alone). The
cluster's address is `config.attach`'s, the nodes' custom resources `config.nodes`'.

torch and `speculab.models` are imported by the functions that need them: the dataclasses load with
`speculab --help`, which needs neither."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from speculab.config.algorithm import largest_tree
from speculab.config.checkpoints import Checkpoint
from speculab.config.errors import at_least, choice
from speculab.config.model import ModelView
from speculab.config.runtime import RuntimeView, loop_host

if TYPE_CHECKING:
    from speculab.models.memory import MemoryFootprint

DEVICES = ("cpu", "cuda", "cuda:N", "auto")  # auto: cuda where the models run has a GPU, else cpu
CUDA_INDEX = re.compile(r"cuda:(\d+)")
OWN_DRAFT_GPU = "cuda:1"  # model.draft_device on Ray: rank 0's bundle asks for a second GPU, the draft's
CGROUP_LIMIT = Path("/sys/fs/cgroup/memory.max")  # cgroup v2: a container's memory limit, or "max"
# cluster.draft_placement: own (an actor of its own: runtime.loop=driver), beside (whole, in rank 0's process),
# sharded (split over the target's ranks, each holding a shard of both), auto (own with runtime.loop=driver;
# else beside, or sharded where only sharded fits the GPUs: `fits_only_sharded`)
DRAFT_PLACEMENTS = ("auto", "own", "beside", "sharded")


@dataclass
class ClusterConfig:
    name: str = "local"
    address: str | None = None  # None: embedded local Ray; "auto" or ray://host:port: existing cluster
    num_cpus: int | None = None  # embedded cluster size; None = every core
    actor_cpus: float = 1.0  # CPUs each model actor reserves
    tp_size: int = 1  # target tensor-parallel ranks (one GPU each; CPU processes when num_gpus = 0)
    # how a rank loads its shard: deepspeed (AutoTP), transformers (the model's tp_plan), or auto (`tp_backend_for`)
    tp_backend: str = "auto"
    num_gpus: int = 0  # GPUs the cluster offers (0: CPU only)
    gpu_memory_gib: float = 0.0  # memory of one GPU (0 when num_gpus = 0)
    draft_gpu: float = 1.0  # GPU share of the draft actor (< 1: beside a target shard)
    draft_placement: str = "auto"  # where the draft lives (DRAFT_PLACEMENTS)
    plan_prompt_tokens: int = 2048  # prompt length the memory footprint reserves KV cache for (not enforced)
    # Ray custom resources each rank's bundle also asks for, so that a group runs only on the nodes started
    # with them (`ray start --resources`); the loop group (runtime.loop=target) takes target_resources.
    # Typed Any (a {name: amount} mapping or null, checked by validation): OmegaConf cannot merge
    # `cluster.target_resources={gpu_a: 1}` into a typed empty dict under Hydra's struct mode.
    target_resources: Any = None
    draft_resources: Any = None  # runtime.loop=driver only
    # copies of a point's model groups running a sweep's points side by side: an integer, or auto (`config.replicas`)
    replicas: Any = 1
    spread: bool = False  # true: each point's units are spread over the replicas instead


@dataclass(frozen=True)
class Placement:
    """Where and how a point's model groups are placed on Ray, as one value (from the `cluster.*` and
    `runtime.*` keys), so that starting a loop takes one argument, not a row of them."""

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
    replica: int = 0  # which copy of a sweep's model groups (`cluster.replicas`): each copy's groups are its own


class ClusterView(ModelView, RuntimeView, Protocol):
    """The parts of a config the cluster's and the devices' checks read (`Config` is one; a shape, not
    the class, because `Config` is built from these dataclasses)."""

    cluster: ClusterConfig


def placement(cfg: ClusterView) -> Placement:
    """The Ray placement of the point's model groups, from its `cluster.*` and `runtime.*` keys."""
    c, r = cfg.cluster, cfg.runtime
    return Placement(
        c.address,
        c.num_cpus,
        c.actor_cpus,
        c.draft_gpu,
        r.max_restarts,
        r.collective_timeout_s,
        r.placement_timeout_s,
        dict(c.target_resources or {}),
        dict(c.draft_resources or {}),
    )


def device_fields(cfg: ClusterView) -> dict[str, str]:
    """The config keys that place a model, and their values (the draft's only where it is set)."""
    fields = {"model.device": cfg.model.device}
    if cfg.model.draft_device is not None:
        fields["model.draft_device"] = cfg.model.draft_device
    return fields


def remote_cluster(cfg: ClusterView) -> bool:
    """The models run on a Ray cluster elsewhere, whose GPUs this machine cannot see."""
    return cfg.runtime.kind == "ray" and cfg.cluster.address is not None


def local_gpus() -> list[str]:
    """This machine's CUDA devices as `cuda:i (name)`."""
    import torch

    if not torch.cuda.is_available():
        return []
    return [f"cuda:{i} ({torch.cuda.get_device_name(i)})" for i in range(torch.cuda.device_count())]


def resolve_device(cfg: ClusterView, device: str) -> str:
    """A configured device as torch names it where the models run: `auto` becomes cuda when that
    place has a GPU (this machine's CUDA, or cluster.num_gpus > 0 on a remote cluster), else cpu."""
    if device != "auto":
        return device
    has_gpu = cfg.cluster.num_gpus > 0 if remote_cluster(cfg) else bool(local_gpus())
    return "cuda" if has_gpu else "cpu"


def describe_device(cfg: ClusterView, device: str) -> str:
    """What a configured device is where the models run: `cpu`, `cuda:0 (NVIDIA H100 80GB HBM3)`, or
    for a remote cluster `cuda (cluster)` (this machine cannot see its GPUs)."""
    device = resolve_device(cfg, device)
    if not device.startswith("cuda"):
        return device
    if remote_cluster(cfg):
        return f"{device} (cluster)"
    gpus = local_gpus()
    index = int(match.group(1)) if (match := CUDA_INDEX.fullmatch(device)) else 0
    return gpus[index] if index < len(gpus) else device


def own_draft_gpu(cfg: ClusterView) -> bool:
    """The draft has a GPU of its own in rank 0's bundle (`runtime.loop=target` on Ray, OWN_DRAFT_GPU)."""
    return cfg.runtime.kind == "ray" and loop_host(cfg) == "target" and cfg.model.draft_device == OWN_DRAFT_GPU


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
    from speculab.algorithms import DRAFTERS
    from speculab.models.memory import GIB

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
    called by a loop in the driver, one in the loop's group by a loop on rank 0, and a draft asked to be
    sharded needs a drafter whose checkpoint loads as tensor-parallel shards (the pair's draft model) and
    no GPU of its own (`auto` shards only such a draft: `fits_only_sharded`)."""
    from speculab.algorithms import DRAFTERS

    c, errors = cfg.cluster, list[str]()
    choice(errors, "cluster.draft_placement", c.draft_placement, DRAFT_PLACEMENTS)
    host = loop_host(cfg)
    if c.draft_placement == "own" and host == "target":
        errors.append(
            "cluster.draft_placement=own: a draft actor of its own is called by the loop in the driver; set "
            "runtime.loop=driver (or auto), or cluster.draft_placement=beside or sharded"
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


def device_errors(cfg: ClusterView) -> list[str]:
    """Each model device is one of DEVICES and exists where the models run: this machine's CUDA
    (runtime=inline, or an embedded local Ray cluster: cluster.address null), or the GPUs a remote
    cluster declares. On Ray an actor sees only the GPU Ray gives it, so cuda:N is inline only."""
    errors: list[str] = []
    for key, device in device_fields(cfg).items():
        if device not in ("cpu", "cuda", "auto") and not CUDA_INDEX.fullmatch(device):
            errors.append(f"{key}={device!r}: must be one of {', '.join(DEVICES)}")
        elif device.startswith("cuda"):
            errors += _cuda_errors(cfg, key, device)
    return errors


def _cuda_errors(cfg: ClusterView, key: str, device: str) -> list[str]:
    if cfg.runtime.kind == "ray" and device != "cuda" and not (key == "model.draft_device" and own_draft_gpu(cfg)):
        return [
            f"{key}={device!r}: on runtime=ray each model actor sees only the GPUs Ray assigns it; use cuda "
            f"(model.draft_device={OWN_DRAFT_GPU} with runtime.loop=target: a GPU of the draft's own beside rank 0)"
        ]
    if remote_cluster(cfg):
        if cfg.cluster.num_gpus > 0:
            return []
        return [
            f"{key}={device!r}: cluster.num_gpus={cfg.cluster.num_gpus} on the cluster at "
            f"cluster.address={cfg.cluster.address!r}; set cluster.num_gpus (and cluster.gpu_memory_gib) to the "
            f"GPUs it offers, or {key}=cpu"
        ]
    gpus = local_gpus()
    where = "runtime=inline" if cfg.runtime.kind == "inline" else "cluster.address=null (an embedded local Ray)"
    if not gpus:
        return [
            f"{key}={device!r}: torch finds no CUDA GPU on this machine, where {where} runs the models; "
            f"set {key}=cpu (or auto), or runtime=ray with cluster.address=auto or ray://host:10001 (a GPU cluster)"
        ]
    if (index := CUDA_INDEX.fullmatch(device)) and int(index.group(1)) >= len(gpus):
        return [f"{key}={device!r}: this machine has {len(gpus)} CUDA device(s): {', '.join(gpus)}"]
    return []


def host_memory_bytes() -> int:
    """The memory this machine lets this process's models use: its physical memory, or its cgroup's
    limit when lower (a container's, which is what the kernel enforces with the OOM killer)."""
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        limit = CGROUP_LIMIT.read_text().strip()
    except OSError:
        return physical
    return min(physical, int(limit)) if limit.isdigit() else physical


def cluster_errors(cfg: ClusterView, found: dict[str, Checkpoint]) -> list[str]:
    """The cluster's fields, its GPUs against the model actors, TP divisibility and the memory footprint
    (speculab.models.memory, from config.json)."""
    from speculab.models.memory import DTYPE_BYTES

    c = cfg.cluster
    split: list[str] = []
    at_least(split, "cluster.tp_size", c.tp_size, 1)
    if cfg.runtime.kind == "inline" and c.tp_size > 1:
        split.append(f"cluster.tp_size={c.tp_size}: tensor parallelism needs runtime=ray (inline is one process)")
    errors = _field_errors(c) + placement_errors(cfg)
    where = gpu_place(cfg, found)
    own_gpu = 1 if where == "own" else 0
    if c.num_gpus > 0 and c.tp_size + own_gpu > c.num_gpus:
        errors.append(
            f"cluster.tp_size={c.tp_size} target GPUs + {own_gpu} draft GPU > cluster.num_gpus="
            f"{c.num_gpus}; lower cluster.tp_size, shard the draft with the target (cluster.draft_placement="
            "sharded) or set cluster.draft_gpu < 1 (draft beside a target shard), or use a cluster with more GPUs"
        )
    if len(found) < 2 or c.tp_size < 1 or cfg.model.dtype not in DTYPE_BYTES:
        return split + errors
    return split + errors + _memory_errors(cfg, found, where, memory=not errors)


def gpu_place(cfg: ClusterView, found: dict[str, Checkpoint]) -> str:
    """Where the draft's bytes sit among the GPUs (`models.memory.DRAFT_WHERE`): on a GPU of its own,
    beside one target shard, or sharded over every target GPU. A draft outside the loop group (its own
    actor, or inline) takes the share cluster.draft_gpu gives it; one in rank 0's process has a GPU of its
    own only with model.draft_device=cuda:1."""
    if loop_host(cfg) != "target":
        return "own" if cfg.cluster.draft_gpu >= 1 else "beside"
    return "own" if own_draft_gpu(cfg) else draft_place(cfg, found)


def tp_backend_for(choice: str, target_config: dict[str, Any]) -> str:
    """`cluster.tp_backend` resolved for a target: auto is transformers' tp_plan for a mixture-of-experts
    target (DeepSpeed AutoTP cannot shard its experts) and DeepSpeed AutoTP for a dense one."""
    from speculab.models.memory import expert_count

    if choice != "auto":
        return choice
    return "transformers" if expert_count(target_config) else "deepspeed"


def _field_errors(c: ClusterConfig) -> list[str]:
    """Each of the cluster's counts and sizes within what it allows."""
    from speculab.models.tp import TP_BACKENDS

    errors: list[str] = []
    if c.num_cpus is not None and c.num_cpus < 1:
        errors.append(f"cluster.num_cpus={c.num_cpus}: must be an integer >= 1, or null (every core)")
    if c.actor_cpus <= 0:
        errors.append(f"cluster.actor_cpus={c.actor_cpus}: must be > 0 (CPUs each model actor reserves)")
    if c.gpu_memory_gib < 0:
        errors.append(f"cluster.gpu_memory_gib={c.gpu_memory_gib}: must be >= 0 (0 when cluster.num_gpus = 0)")
    at_least(errors, "cluster.num_gpus", c.num_gpus, 0)
    choice(errors, "cluster.tp_backend", c.tp_backend, ("auto", *TP_BACKENDS))
    at_least(errors, "cluster.plan_prompt_tokens", c.plan_prompt_tokens, 1)
    if not 0 < c.draft_gpu <= 1:
        errors.append(f"cluster.draft_gpu={c.draft_gpu}: must be in (0, 1] (1: own GPU; < 1: beside a target shard)")
    if c.num_gpus > 0 and c.gpu_memory_gib <= 0:
        errors.append(f"cluster.gpu_memory_gib={c.gpu_memory_gib}: must be > 0 when cluster.num_gpus > 0")
    return errors


def _memory_errors(cfg: ClusterView, found: dict[str, Checkpoint], where: str, memory: bool) -> list[str]:
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
    backend = tp_backend_for(c.tp_backend, found["target"].config)
    errors = tp_errors(target, c.tp_size, f"model {cfg.model.name} (target)", backend)
    if where == "sharded":  # the draft's shards load with the target's backend, over the same ranks
        errors += tp_errors(
            draft, c.tp_size, f"model {cfg.model.name} (draft, cluster.draft_placement=sharded)", backend
        )
    if errors or not memory:
        return errors
    footprint = planned_footprint(cfg, found, where)
    assert footprint is not None  # both architectures are known (above)
    if resolve_device(cfg, cfg.model.device).startswith("cuda"):
        return fit_errors(footprint, c.gpu_memory_gib) if c.num_gpus > 0 else []
    local = cfg.runtime.kind == "inline" or c.address is None  # every model process on this machine
    return host_fit_errors(footprint, host_memory_bytes()) if local else []


def planned_footprint(cfg: ClusterView, found: dict[str, Checkpoint], where: str) -> MemoryFootprint | None:
    """The bytes of the point on each GPU (or host process), planned from both checkpoints' config.json
    with the draft `where` (`gpu_place`); None where the planner does not know an architecture."""
    from speculab.models.memory import DTYPE_BYTES, Workload, architecture, memory_footprint

    c, s = cfg.cluster, cfg.sampling
    try:
        target, draft = architecture(found["target"].config), architecture(found["draft"].config)
    except (ValueError, KeyError):
        return None
    work = Workload(
        s.batch_size, c.plan_prompt_tokens, s.max_new_tokens, largest_tree(cfg.algorithm), DTYPE_BYTES[cfg.model.dtype]
    )
    return memory_footprint(target, draft, work, c.tp_size, where)


def local_cluster_errors(cfg: ClusterView) -> list[str]:
    """The embedded Ray cluster (no cluster.address) must hold every model actor at once: the
    target's tp_size ranks and, with runtime.loop=driver, the draft's own actor, cluster.actor_cpus
    each (Ray would wait for them forever)."""
    c = cfg.cluster
    if cfg.runtime.kind != "ray" or c.address is not None:
        return []
    cores = c.num_cpus or os.cpu_count() or 1
    actors, draft = (c.tp_size, "") if loop_host(cfg) == "target" else (c.tp_size + 1, " and the draft")
    needed = actors * c.actor_cpus
    if needed > cores:
        return [
            f"cluster.actor_cpus={c.actor_cpus}: the local Ray cluster has {cores} CPUs "
            f"({'cluster.num_cpus' if c.num_cpus else 'this machine'}) and its {actors} model actor(s) "
            f"(cluster.tp_size={c.tp_size} target rank(s){draft}) need {needed:g}; "
            f"set cluster.actor_cpus to a positive value <= {cores / actors:g}"
        ]
    return []
