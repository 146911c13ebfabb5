"""Ray actors for the target and the drafter: thin shells around the in-process roles.

`ray.remote(TreeTarget)` is the whole actor: it builds its model from an `LMSpec` in its own
process and returns CPU tensors or small structs. `ActorProxy` makes a handle look like the
plain object (each call is `.remote()` then one `ray.get`), so the engine has one code path.
Actors are named by a hash of what they load, so a sweep in one Ray job reuses them.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import ray

from speculab.models import IIDDrafter, LMSpec, TreeTarget

NAMESPACE = "speculab"


def connect(address: str | None, num_cpus: int | None) -> None:
    """Attach to a running cluster, or start an embedded one sized to this machine."""
    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=True)
    else:
        ray.init(num_cpus=num_cpus or os.cpu_count(), namespace=NAMESPACE, include_dashboard=False, log_to_driver=True)


def actor_name(role: str, spec: LMSpec) -> str:
    """Stable name from everything that determines the loaded model (get_if_exists ignores args)."""
    key = f"{role}|{spec.backend}|{os.path.abspath(spec.path)}|{spec.dtype}|{spec.device}|{spec.threads}"
    return f"{role}-{hashlib.sha1(key.encode()).hexdigest()[:12]}"


# Methods that return nothing: submitted without waiting (an actor runs its calls in order);
# the next waiting call also waits on them, so their errors still surface, in the same phase.
FIRE_AND_FORGET = frozenset({"commit", "retain"})


class ActorProxy:
    """Calls methods of a Ray actor as if it were the local object."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.in_flight: list[Any] = []

    def __getattr__(self, method: str) -> Any:
        remote = getattr(self.handle, method)
        return lambda *args, **kwargs: self._call(method, remote.remote(*args, **kwargs))

    def _call(self, method: str, ref: Any) -> Any:
        self.in_flight.append(ref)
        if method in FIRE_AND_FORGET:
            return None
        results, self.in_flight = ray.get(self.in_flight), []
        return results[-1]


def spawn(role: type, spec: LMSpec, cpus: float, gpus: float = 0.0) -> ActorProxy:
    """The named actor for (role, spec), created on first use and reused afterwards."""
    options = dict(
        name=actor_name(role.__name__, spec),
        get_if_exists=True,
        num_cpus=cpus,
        num_gpus=gpus,
        runtime_env={"env_vars": {"OMP_WAIT_POLICY": os.environ["OMP_WAIT_POLICY"]}},  # see speculab/__init__
    )
    return ActorProxy(ray.remote(role).options(**options).remote(spec))


def spawn_pair(target: LMSpec, draft: LMSpec, cpus: float) -> tuple[ActorProxy, ActorProxy]:
    """Target and drafter actors; on one GPU they share it (multi-GPU groups are separate)."""
    def gpu_share(spec: LMSpec) -> float:
        return 0.5 if spec.device == "cuda" else 0.0

    pair = spawn(TreeTarget, target, cpus, gpu_share(target)), spawn(IIDDrafter, draft, cpus, gpu_share(draft))
    ray.get([proxy.handle.kv_bytes.remote() for proxy in pair])  # both load in parallel; timing starts after
    return pair
