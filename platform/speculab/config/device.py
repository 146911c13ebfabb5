"""Where the models run: `model.device` and `model.draft_device` checked against the GPUs of the place
that runs them (this machine, an embedded Ray cluster on it, or a remote cluster's declared GPUs),
resolved (`auto`) and described for the run's tags."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from speculab.config.schema import CUDA_INDEX, DEVICES, Config, loop_host
from speculab.runtime.placement import OWN_DRAFT_GPU


def device_fields(cfg: Config) -> dict[str, str]:
    """The config keys that place a model, and their values (the draft's only where it is set)."""
    fields = {"model.device": cfg.model.device}
    if cfg.model.draft_device is not None:
        fields["model.draft_device"] = cfg.model.draft_device
    return fields


def remote_cluster(cfg: Config) -> bool:
    """The models run on a Ray cluster elsewhere, whose GPUs this machine cannot see."""
    return cfg.runtime.kind == "ray" and cfg.cluster.address is not None


def local_gpus() -> list[str]:
    """This machine's CUDA devices as `cuda:i (name)`."""
    if not torch.cuda.is_available():
        return []
    return [f"cuda:{i} ({torch.cuda.get_device_name(i)})" for i in range(torch.cuda.device_count())]


def resolve_device(cfg: Config, device: str) -> str:
    """A configured device as torch names it where the models run: `auto` becomes cuda when that
    place has a GPU (this machine's CUDA, or cluster.num_gpus > 0 on a remote cluster), else cpu."""
    if device != "auto":
        return device
    has_gpu = cfg.cluster.num_gpus > 0 if remote_cluster(cfg) else bool(local_gpus())
    return "cuda" if has_gpu else "cpu"


def describe_device(cfg: Config, device: str) -> str:
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


def own_draft_gpu(cfg: Config) -> bool:
    """The draft has a GPU of its own in rank 0's bundle (`runtime.loop=target` on Ray, OWN_DRAFT_GPU)."""
    return cfg.runtime.kind == "ray" and loop_host(cfg) == "target" and cfg.model.draft_device == OWN_DRAFT_GPU


def device_errors(cfg: Config) -> list[str]:
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


def _cuda_errors(cfg: Config, key: str, device: str) -> list[str]:
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


CGROUP_LIMIT = Path("/sys/fs/cgroup/memory.max")  # cgroup v2: a container's memory limit, or "max"


def host_memory_bytes() -> int:
    """The memory this machine lets this process's models use: its physical memory, or its cgroup's
    limit when lower (a container's, which is what the kernel enforces with the OOM killer)."""
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        limit = CGROUP_LIMIT.read_text().strip()
    except OSError:
        return physical
    return min(physical, int(limit)) if limit.isdigit() else physical
