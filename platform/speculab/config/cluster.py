"""Checks of where the models run on Ray: the cluster's CPUs and GPUs against the model actors, the
target's tensor-parallel split, the memory plan (`speculab.models.memory`, from config.json alone),
and a cluster address that answers; and `loop_host`, where the decode loop runs."""

from __future__ import annotations

import os
import socket
from typing import Any
from urllib.parse import urlparse

from speculab.config.algorithm import largest_tree
from speculab.config.checkpoints import Checkpoint
from speculab.config.device import host_memory_bytes, own_draft_gpu, resolve_device
from speculab.config.errors import at_least, choice
from speculab.config.schema import Config, loop_host
from speculab.models.memory import (
    DTYPE_BYTES,
    Workload,
    architecture,
    fit_errors,
    host_fit_errors,
    plan_memory,
    tp_errors,
)
from speculab.models.tp import TP_BACKENDS

ADDRESS_TIMEOUT_S = 5.0  # how long a `ray://` address gets to accept a connection during validation


def cluster_errors(cfg: Config, found: dict[str, Checkpoint]) -> list[str]:
    """CPU and GPU counts, TP divisibility and the memory plan (speculab.models.memory), from config.json."""
    c = cfg.cluster
    errors: list[str] = []
    if c.num_cpus is not None and c.num_cpus < 1:
        errors.append(f"cluster.num_cpus={c.num_cpus}: must be an integer >= 1, or null (every core)")
    if c.actor_cpus <= 0:
        errors.append(f"cluster.actor_cpus={c.actor_cpus}: must be > 0 (CPUs each model actor reserves)")
    if c.gpu_memory_gib < 0:
        errors.append(f"cluster.gpu_memory_gib={c.gpu_memory_gib}: must be >= 0 (0 when cluster.num_gpus = 0)")
    at_least(errors, "cluster.num_gpus", c.num_gpus, 0)
    choice(errors, "cluster.tp_backend", c.tp_backend, tuple(TP_BACKENDS))
    at_least(errors, "cluster.plan_prompt_tokens", c.plan_prompt_tokens, 1)
    if not 0 < c.draft_gpu <= 1:
        errors.append(f"cluster.draft_gpu={c.draft_gpu}: must be in (0, 1] (1: own GPU; < 1: beside a target shard)")
    if c.num_gpus > 0 and c.gpu_memory_gib <= 0:
        errors.append(f"cluster.gpu_memory_gib={c.gpu_memory_gib}: must be > 0 when cluster.num_gpus > 0")
    # the draft shares a target GPU: in the loop's actor (unless it has a GPU of its own there), or a share
    beside = not own_draft_gpu(cfg) if loop_host(cfg) == "target" else c.draft_gpu < 1
    if c.num_gpus > 0 and c.tp_size + (0 if beside else 1) > c.num_gpus:
        errors.append(
            f"cluster.tp_size={c.tp_size} target GPUs + {0 if beside else 1} draft GPU > cluster.num_gpus="
            f"{c.num_gpus}; lower cluster.tp_size, set cluster.draft_gpu < 1 (draft beside a target shard), "
            "or use a cluster with more GPUs"
        )
    if len(found) < 2 or c.tp_size < 1 or cfg.model.dtype not in DTYPE_BYTES:
        return errors
    return errors + _plan_errors(cfg, found, beside, memory=not errors)


def _plan_errors(cfg: Config, found: dict[str, Checkpoint], beside: bool, memory: bool) -> list[str]:
    """The target's split over cluster.tp_size ranks, and on GPUs (with `memory`: the cluster's other
    fields are valid) the memory plan of the point."""
    c = cfg.cluster
    try:
        target, draft = architecture(found["target"].config), architecture(found["draft"].config)
    except (ValueError, KeyError) as err:
        if c.tp_size == 1 and c.num_gpus == 0:
            return []  # one CPU process: no split and no GPU memory to plan
        return [f"model.name={cfg.model.name!r}: cannot plan tensor parallelism or memory from config.json ({err!r})"]
    errors = tp_errors(target, c.tp_size, f"model {cfg.model.name} (target)")
    if errors or not memory:
        return errors
    s = cfg.sampling
    work = Workload(
        s.batch_size, c.plan_prompt_tokens, s.max_new_tokens, largest_tree(cfg), DTYPE_BYTES[cfg.model.dtype]
    )
    plan = plan_memory(target, draft, work, c.tp_size, beside)
    if resolve_device(cfg, cfg.model.device).startswith("cuda"):
        return fit_errors(plan, c.gpu_memory_gib) if c.num_gpus > 0 else []
    local = cfg.runtime.kind == "inline" or c.address is None  # every model process on this machine
    return host_fit_errors(plan, host_memory_bytes()) if local else []


def local_cluster_errors(cfg: Config) -> list[str]:
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


ADDRESS_FORMS = "null (an embedded local Ray), auto, host:port (a head's GCS port, 6379 by default) or ray://host:port"


def address_errors(cfg: Config) -> list[str]:
    """A cluster address in a form Ray accepts, which (but for `auto`) accepts a TCP connection within a few
    seconds, before anything starts: Ray's own connect loop would retry for minutes, deaf to Ctrl-C."""
    address = cfg.cluster.address
    if cfg.runtime.kind != "ray" or not address or address == "auto":
        return []
    parsed = urlparse(address if "://" in address else f"gcs://{address}")
    try:
        host, port = parsed.hostname, parsed.port or (10001 if parsed.scheme == "ray" else None)  # Ray client's default
    except ValueError:  # a port that is not a number
        host = port = None
    if parsed.scheme not in ("ray", "gcs") or not host or not port or parsed.path not in ("", "/"):
        return [f"cluster.address={address!r}: not a Ray address; use {ADDRESS_FORMS}"]
    try:
        socket.create_connection((host, port), timeout=ADDRESS_TIMEOUT_S).close()
    except OSError as err:
        return [
            f"cluster.address={address!r}: nothing answers at {host}:{port} within {ADDRESS_TIMEOUT_S:g} s "
            f"({err.strerror or err}); start the cluster's head or fix the address"
        ]
    return []


def resource_errors(cfg: Config) -> list[str]:
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
