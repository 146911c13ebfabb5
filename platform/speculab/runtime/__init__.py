"""Where the models live: in this process (`inline`) or in Ray actor groups (`ray`).

Both give objects with the same methods (the protocols in `speculab.engine`), so the engine
does not know which runtime it drives. On Ray the target is always a group
(`speculab.runtime.groups`): `tp_size` ranks joined by torch.distributed when > 1, one plain
actor when 1 (same naming, placement, reuse and restart path, no DeepSpeed), and the
drafter is a one-actor group outside the TP world.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from speculab.models import DraftModel, LMSpec, TreeTarget


def start_models(
    kind: str,
    target: LMSpec,
    draft: LMSpec,
    address: str | None = None,
    num_cpus: int | None = None,
    actor_cpus: float = 1.0,
    draft_gpu: float = 1.0,
    max_restarts: int = 3,
) -> tuple[Any, Any]:
    """(target, drafter) for runtime `kind` ("inline" or "ray"); target.tp_size ranks on Ray."""
    if kind == "inline":
        if target.tp_size > 1:
            raise ValueError(f"tensor parallelism (tp_size={target.tp_size}) needs runtime=ray")
        return TreeTarget(target), DraftModel(draft)
    from speculab.runtime.groups import POOL, draft_bundles, target_bundles
    from speculab.runtime.proxy import GroupProxy
    from speculab.runtime.ray_actors import connect

    connect(address, num_cpus)
    return (
        GroupProxy(
            POOL.get("target", target, target_bundles(target.tp_size, target.device, actor_cpus, draft_gpu)),
            max_restarts,
        ),
        GroupProxy(POOL.get("draft", draft, draft_bundles(draft.device, actor_cpus, draft_gpu)), max_restarts),
    )


@contextmanager
def runtime_metrics(target: Any, drafter: Any) -> Iterator[dict[str, float]]:
    """Fills a dict, on exit, with what the Ray runtime measured inside the block (inline: nothing).

    `time_ray_s`: coordinator time in Ray calls beyond the actors' own compute (already part
    of time_target_s / time_draft_s); `restarts`: groups recreated after a lost actor;
    `model_loads`: group loads in this Ray job so far (a sweep that reuses its actors shows
    the same number at every point); `mem_peak_mb_<role>_<method>`: CUDA peak per call kind.
    """
    from speculab.runtime.proxy import GroupProxy, ProxyStats

    proxies = {role: m for role, m in (("target", target), ("draft", drafter)) if isinstance(m, GroupProxy)}
    for proxy in proxies.values():
        proxy.stats = ProxyStats()
    found: dict[str, float] = {}
    yield found
    if not proxies:
        return
    import ray

    from speculab.runtime.groups import POOL

    found["time_ray_s"] = sum(p.stats.ray_s for p in proxies.values())
    found["restarts"] = float(sum(p.stats.restarts for p in proxies.values()))
    found["model_loads"] = float(sum(ray.get(POOL.ledger.counts.remote()).values()))
    for role, proxy in proxies.items():
        for method, peak in proxy.stats.peak_bytes.items():
            found[f"mem_peak_mb_{role}_{method}"] = peak / 2**20
