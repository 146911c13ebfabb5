"""A real multi-node Ray on this machine for the node-loss tests (`ray.cluster_utils.Cluster`): a head
(2 CPUs unless asked, 2 of resource `head`) and a node B (1 CPU, resource `node_b`), each a raylet of its own, with
this process attached; node B can crash (its raylet killed, not drained) and come back."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from speculab.tracking.tracker import NoopTracker

# Fast node-death detection (Ray's defaults take about 15 s to declare a killed raylet's node dead).
FAST_HEALTH = {"health_check_period_ms": 300, "health_check_failure_threshold": 3, "health_check_timeout_ms": 300}
SMALL = ["dataset.num_prompts=2", "sampling.batch_size=1", "sampling.max_new_tokens=12", "measure.repeats=1"]
QUICK = ["tracking=none", "baseline=false", "baseline_hf=false", "runtime.torch_threads=1", *SMALL]


class TwoNodes:
    """The head (`head_cpus` CPUs) and node B, under Ray's health checks `health` (its `_system_config`; {}:
    Ray's defaults)."""

    def __init__(self, health: dict[str, int], head_cpus: int = 2) -> None:
        import ray
        from ray.cluster_utils import Cluster

        self.cluster = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": head_cpus, "resources": {"head": 2}, "_system_config": health},
        )
        self.node_b = self.add_b()
        ray.init(address=self.cluster.address, namespace="speculab-nodeloss")

    def add_b(self) -> Any:
        node = self.cluster.add_node(num_cpus=1, resources={"node_b": 1})
        self.cluster.wait_for_nodes()
        return node

    def crash_b(self, until_dead: bool = True) -> None:
        """Node B's raylet and every process under it (its workers: the actors placed there) killed at once,
        as a machine's crash, not a drain; with `until_dead`, returns once the cluster reports the node dead
        (Ray's health checks), else at once, while Ray may still list it alive."""
        import psutil
        import ray

        raylet = psutil.Process(self.node_b.all_processes["raylet"][0].process.pid)
        workers = raylet.children(recursive=True)  # orphaned by the raylet's death, they could answer a call
        self.cluster.remove_node(self.node_b, allow_graceful=False)
        for worker in workers:
            with contextlib.suppress(psutil.NoSuchProcess):
                worker.kill()
        deadline = time.monotonic() + 30  # a hang guard: the fast health checks mark it dead within seconds
        b = str(self.node_b.node_id)
        while until_dead and any(n["NodeID"] == b and n["Alive"] for n in ray.nodes()) and time.monotonic() < deadline:
            time.sleep(0.1)


def overrides(nodes: TwoNodes, *extra: str) -> list[str]:
    """A small untracked point on `nodes` (two units of one prompt, the speculative decode alone), and `extra`."""
    return [f"cluster.address={nodes.cluster.address}", "cluster.actor_cpus=1", *QUICK, *extra]


def cluster_of_two(health: dict[str, int], head_cpus: int = 2) -> Iterator[TwoNodes]:
    """A module's own two-node cluster (a fixture's body); the session's embedded one is left, and joined
    again after."""
    import ray
    from conftest import RAY_CPUS

    from speculab.runtime.groups import POOL
    from speculab.runtime.ray_actors import connect

    had = ray.is_initialized()
    POOL.close_all()
    ray.shutdown()
    nodes = TwoNodes(health, head_cpus)
    try:
        yield nodes
    finally:
        POOL.close_all()
        ray.shutdown()
        nodes.cluster.shutdown()
        if had:
            connect(None, RAY_CPUS)  # the session fixture's cluster, as it started it


def with_node_b(nodes: TwoNodes) -> Iterator[TwoNodes]:
    """Node B up, and no group left open by the test before (a fixture's body)."""
    from speculab.runtime.groups import POOL

    POOL.close_all()
    if not nodes.cluster.list_all_nodes()[1:]:
        nodes.node_b = nodes.add_b()
    yield nodes
    POOL.close_all()


class CrashOnFirstPrompt(NoopTracker):
    """Records what a point logs, and crashes node B once the first prompt's metrics arrive (its unit done),
    waiting for Ray to report it dead or (`until_dead` False) not."""

    records = True

    def __init__(self, nodes: TwoNodes, until_dead: bool = True) -> None:
        self.nodes, self.until_dead, self.crashed = nodes, until_dead, False
        self.metrics: dict[str, float] = {}
        self.texts: dict[str, str] = {}

    def log_metrics(self, metrics: dict[str, float], step: int = 0) -> None:
        self.metrics |= metrics
        if not self.crashed and "prompt/generated_tokens" in metrics:
            self.nodes.crash_b(self.until_dead)
            self.crashed = True

    def log_text(self, text: str, artifact: str) -> None:
        self.texts[artifact] = text
