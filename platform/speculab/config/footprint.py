"""What a point's models take of the cluster, worked out from config.json alone: the memory footprint on
each GPU (or host process) with the draft where it sits (`speculab.models.memory`), the tensor-parallel
backend a target needs, and the memory this machine lets its model processes use.

`speculab.models` (and torch with it) is imported by the functions that need it: `speculab --help` and a
refused key answer without it (1.2 s of import on 2 cores)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from speculab.config.algorithm import ahead_nodes, draft_length, largest_tree
from speculab.config.checkpoints import Checkpoint
from speculab.config.cluster import ClusterView

if TYPE_CHECKING:
    from speculab.models.memory import MemoryFootprint

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


def tp_backend_for(choice: str, target_config: dict[str, Any]) -> str:
    """`cluster.tp_backend` resolved for a target: auto is transformers' tp_plan for a mixture-of-experts
    target (DeepSpeed AutoTP cannot shard its experts) and DeepSpeed AutoTP for a dense one."""
    from speculab.models.memory import expert_count

    if choice != "auto":
        return choice
    return "transformers" if expert_count(target_config) else "deepspeed"


def planned_footprint(cfg: ClusterView, found: dict[str, Checkpoint], where: str) -> MemoryFootprint | None:
    """The bytes of the point on each GPU (or host process), planned from both checkpoints' config.json
    with the draft `where` (`gpu_place`); None where the planner does not know an architecture, or an
    algorithm or a dtype it would size the caches by (each refused in its own line)."""
    from speculab.models.memory import DTYPE_BYTES, Workload, architecture, memory_footprint
    from speculab.registry import ALGORITHMS

    c, s = cfg.cluster, cfg.sampling
    if cfg.algorithm.name not in ALGORITHMS or cfg.model.dtype not in DTYPE_BYTES:
        return None
    try:
        target, draft = architecture(found["target"].config), architecture(found["draft"].config)
    except (ValueError, KeyError):
        return None
    work = Workload(
        s.batch_size,
        c.plan_prompt_tokens,
        s.max_new_tokens,
        largest_tree(cfg.algorithm),
        DTYPE_BYTES[cfg.model.dtype],
        ahead_nodes(cfg.drafter.ahead, cfg.drafter.ahead_budget, draft_length(cfg.algorithm)),
    )
    return memory_footprint(target, draft, work, c.tp_size, where)
