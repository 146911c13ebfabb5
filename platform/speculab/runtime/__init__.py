"""Where the models live: in this process (`inline`) or in Ray actors (`ray`).

Both give objects with the same methods (the protocols in `speculab.engine`), so the engine
does not know which runtime it drives.
"""

from __future__ import annotations

from typing import Any

from speculab.models import IIDDrafter, LMSpec, TreeTarget


def start_models(kind: str, target: LMSpec, draft: LMSpec, address: str | None = None,
                 num_cpus: int | None = None, actor_cpus: float = 1.0) -> tuple[Any, Any]:
    """(target, drafter) for runtime `kind` ("inline" or "ray")."""
    if kind == "inline":
        return TreeTarget(target), IIDDrafter(draft)
    from speculab.runtime.ray_actors import connect, spawn_pair

    connect(address, num_cpus)
    return spawn_pair(target, draft, actor_cpus)
