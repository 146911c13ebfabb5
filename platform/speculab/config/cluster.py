"""`cluster.*`: where the models run. The cluster a point's models are placed on (`ClusterConfig`, and
the `Placement` of its model groups it gives the runtime), its fields' ranges, and each model's device
(`model.device`, `model.draft_device`) resolved and checked against the GPUs of that place (this
machine, an embedded Ray cluster on it, or a remote cluster's declared GPUs) and described for the run's
tags. Where the draft lives and what the point takes of the cluster are `config.cluster_plan`'s and
`config.footprint`'s; the cluster's address `config.attach`'s, the nodes' custom resources `config.nodes`'.

torch and `speculab.models` are imported by the functions that need them: the dataclasses load with
`speculab --help`, which needs neither."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Protocol

from speculab.config.errors import choice, within
from speculab.config.model import ModelView
from speculab.config.runtime import RuntimeView, loop_host

DEVICES = ("cpu", "cuda", "cuda:N", "auto")  # auto: cuda where the models run has a GPU, else cpu
CUDA_INDEX = re.compile(r"cuda:(\d+)")
OWN_DRAFT_GPU = "cuda:1"  # model.draft_device on Ray: rank 0's bundle asks for a second GPU, the draft's
CPUS_RANGE = (1, 1 << 16)  # cluster.num_cpus, and the most cluster.actor_cpus may reserve
GPUS_RANGE = (0, 1 << 16)  # cluster.num_gpus
PLAN_TOKENS_RANGE = (1, 1 << 20)  # cluster.plan_prompt_tokens
TP_RANGE = (1, 1024)  # cluster.tp_size


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
    draft_placement: str = "auto"  # where the draft lives (`config.cluster_plan.DRAFT_PLACEMENTS`)
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
    # the draft in an actor of its own (`cluster.draft_placement=own`); with the loop on the target's rank 0,
    # which drives it over a socket (`runtime.draft_channel`)
    draft_own: bool = False


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
        draft_own=c.draft_placement == "own",
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


def field_errors(c: ClusterConfig) -> list[str]:
    """Each of the cluster's counts and sizes within what it allows."""
    from speculab.models.tp import TP_BACKENDS

    errors: list[str] = []
    low, high = CPUS_RANGE
    if c.num_cpus is not None and not low <= c.num_cpus <= high:
        errors.append(f"cluster.num_cpus={c.num_cpus}: must be an integer >= {low} and <= {high}, or null (every core)")
    if not 0 < c.actor_cpus <= high:
        errors.append(f"cluster.actor_cpus={c.actor_cpus}: must be > 0 and <= {high} (CPUs each model actor reserves)")
    if c.gpu_memory_gib < 0:
        errors.append(f"cluster.gpu_memory_gib={c.gpu_memory_gib}: must be >= 0 (0 when cluster.num_gpus = 0)")
    within(errors, "cluster.num_gpus", c.num_gpus, GPUS_RANGE)
    choice(errors, "cluster.tp_backend", c.tp_backend, ("auto", *TP_BACKENDS))
    within(errors, "cluster.plan_prompt_tokens", c.plan_prompt_tokens, PLAN_TOKENS_RANGE)
    if not 0 < c.draft_gpu <= 1:
        errors.append(f"cluster.draft_gpu={c.draft_gpu}: must be in (0, 1] (1: own GPU; < 1: beside a target shard)")
    if c.num_gpus > 0 and c.gpu_memory_gib <= 0:
        errors.append(f"cluster.gpu_memory_gib={c.gpu_memory_gib}: must be > 0 when cluster.num_gpus > 0")
    return errors


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
