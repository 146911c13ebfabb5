"""A lost node on a real multi-node Ray (`ray.cluster_utils.Cluster`: a head and a node B, each a
raylet of its own, on this machine; CPU, the tiny pair).

Groups go where `cluster.target_resources` / `cluster.draft_resources` say, for each place the loop
can run; when node B is removed (its raylet killed, as a crash) between two units, a group that the
head can hold is placed there again and the point decodes the tokens of an undisturbed run, and a
group that no remaining node can hold ends the point at once with a message naming the lost node and
what the group needs, the finished units logged."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from conftest import RAY_CPUS

from speculab.config import resolve
from speculab.experiment import decode_point
from speculab.results.point import PointShape
from speculab.runtime import start_loop
from speculab.runtime.placement import ClusterError
from speculab.tracking.tracker import NoopTracker
from support.configs import load

pytestmark = pytest.mark.slow

# Fast node-death detection (Ray's defaults take about 15 s to declare a killed raylet's node dead).
FAST_HEALTH = {"health_check_period_ms": 300, "health_check_failure_threshold": 3, "health_check_timeout_ms": 300}
SMALL = ["dataset.num_prompts=2", "sampling.batch_size=1", "sampling.max_new_tokens=12", "measure.repeats=1"]
QUICK = ["tracking=none", "baseline=false", "baseline_hf=false", "runtime.torch_threads=1", *SMALL]


class TwoNodes:
    """A head (2 CPUs, 2 of resource `head`) and a node B (1 CPU, resource `node_b`), this process attached."""

    def __init__(self) -> None:
        import ray
        from ray.cluster_utils import Cluster

        self.cluster = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 2, "resources": {"head": 2}, "_system_config": FAST_HEALTH},
        )
        self.node_b = self.add_b()
        ray.init(address=self.cluster.address, namespace="speculab-nodeloss")

    def add_b(self) -> Any:
        node = self.cluster.add_node(num_cpus=1, resources={"node_b": 1})
        self.cluster.wait_for_nodes()
        return node

    def crash_b(self) -> None:
        """Node B's raylet and workers killed at once, as a crash (not a drain); returns once the cluster
        reports the node dead, so that the next call meets the loss (a worker can outlive its raylet for a
        moment and answer one more call)."""
        import time

        import ray

        self.cluster.remove_node(self.node_b, allow_graceful=False)
        deadline = time.monotonic() + 30
        b = str(self.node_b.node_id)
        while any(n["NodeID"] == b and n["Alive"] for n in ray.nodes()) and time.monotonic() < deadline:
            time.sleep(0.1)


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[TwoNodes]:
    """The module's own two-node cluster; the session's embedded one is left and joined again after."""
    import ray

    from speculab.runtime.groups import POOL
    from speculab.runtime.ray_actors import connect

    had = ray.is_initialized()
    POOL.close_all()
    ray.shutdown()
    nodes = TwoNodes()
    try:
        yield nodes
    finally:
        POOL.close_all()
        ray.shutdown()
        nodes.cluster.shutdown()
        if had:
            connect(None, RAY_CPUS)  # the session fixture's cluster, as it started it


@pytest.fixture
def pool(two_nodes: TwoNodes) -> Iterator[TwoNodes]:
    """Node B up, and no group left open by the test before."""
    from speculab.runtime.groups import POOL

    POOL.close_all()
    if not two_nodes.cluster.list_all_nodes()[1:]:
        two_nodes.node_b = two_nodes.add_b()
    yield two_nodes
    POOL.close_all()


def overrides(nodes: TwoNodes, *extra: str) -> list[str]:
    return [f"cluster.address={nodes.cluster.address}", "cluster.actor_cpus=1", *QUICK, *extra]


@pytest.mark.parametrize("loop", ["driver", "target"])
def test_groups_run_on_the_nodes_their_resources_name(pool: TwoNodes, loop: str) -> None:
    extra = ["cluster.target_resources={node_b: 1}", f"runtime.loop={loop}"]
    if loop == "driver":
        extra.append("cluster.draft_resources={head: 1}")
    plan = resolve(load(overrides(pool, *extra)))
    figures = decode_point(plan, PointShape.of(plan.cfg), NoopTracker()).figures
    assert figures.value("restarts") == 0
    from speculab.runtime.groups import POOL

    where = {g.role: set(g.nodes) for g in POOL.groups.values()}
    b, head = str(pool.node_b.node_id), str(pool.cluster.head_node.node_id)
    expected = {"loop": {b}} if loop == "target" else {"target": {b}, "draft": {head}}
    assert where == expected


def test_a_request_no_node_offers_is_refused_before_any_actor(pool: TwoNodes) -> None:
    import ray

    plan = resolve(load(overrides(pool, "cluster.target_resources={gpu_a100: 1}")))
    with pytest.raises(ClusterError, match=r"cluster\.target_resources=\{'gpu_a100': 1\}: no alive node .*node_b"):
        decode_point(plan, PointShape.of(plan.cfg), NoopTracker())
    assert ray.util.list_named_actors() == []


@pytest.mark.parametrize("loop", ["target", "driver"])
def test_a_group_on_a_lost_node_is_placed_again_and_decodes_the_same_tokens(pool: TwoNodes, loop: str) -> None:
    """The group on node B (the loop group, or with the loop in the driver the draft's, the target pinned to
    the head), placed there while the head is busy; node B crashes after the first unit: the group comes
    back on the head and the second unit decodes what it decodes undisturbed."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    pinned = ["cluster.target_resources={head: 1}"] if loop == "driver" else []
    plan = resolve(load(overrides(pool, f"runtime.loop={loop}", *pinned)))
    busy = {"CPU": 1, "head": 1} if loop == "driver" else {"CPU": 2, "head": 2}
    blocker = placement_group([busy])  # holds the head's free CPUs while the groups are placed
    ray.get(blocker.ready())
    loop_ = start_loop(plan.loop, *model_specs(plan), work(plan), plan.placement)
    moved = loop_.draft_model if loop == "driver" else loop_
    assert moved.group.nodes == [str(pool.node_b.node_id)]
    remove_placement_group(blocker)
    first = loop_.decode_unit("speculative", 0, 0).result.prompts[0].tokens
    undisturbed = loop_.decode_unit("speculative", 1, 0).result.prompts[0].tokens
    pool.crash_b()
    again = loop_.decode_unit("speculative", 1, 0).result.prompts[0].tokens
    assert again == undisturbed and first
    assert moved.stats.restarts == 1 and moved.group.nodes == [str(pool.cluster.head_node.node_id)]


def test_a_group_with_nowhere_to_go_ends_its_point_at_once_keeping_what_finished(pool: TwoNodes) -> None:
    """Pinned to node B, which crashes after the first unit: the point ends within seconds (not after
    `runtime.placement_timeout_s`), naming node B and the group's needs; the finished unit is logged."""
    import time

    tracker = CrashOnFirstPrompt(pool)
    plan = resolve(load(overrides(pool, "cluster.target_resources={node_b: 1}", "runtime.placement_timeout_s=60")))
    with pytest.raises(ClusterError) as failed:
        decode_point(plan, PointShape.of(plan.cfg), tracker)
    message = str(failed.value)
    lost_b = f"node {pool.node_b.node_ip_address} (node {str(pool.node_b.node_id)[:8]}) was lost"
    assert lost_b in message, message  # by address and id: both nodes of this test share one address
    assert "CPU 1, node_b 1 on one node" in message and "1 of 2 finished unit(s) are logged" in message
    assert time.monotonic() - tracker.crashed_at < 30
    assert tracker.metrics["runtime/units_finished"] == 1 and "records.jsonl" in tracker.texts


class CrashOnFirstPrompt(NoopTracker):
    """Records what a point logs, and crashes node B once the first prompt's metrics arrive (its unit done)."""

    def __init__(self, nodes: TwoNodes) -> None:
        self.nodes, self.crashed_at = nodes, 0.0
        self.metrics: dict[str, float] = {}
        self.texts: dict[str, str] = {}

    def log_metrics(self, metrics: dict[str, float], step: int = 0) -> None:
        import time

        self.metrics |= metrics
        if not self.crashed_at and "prompt/generated_tokens" in metrics:
            self.nodes.crash_b()
            self.crashed_at = time.monotonic()

    def log_text(self, text: str, artifact: str) -> None:
        self.texts[artifact] = text


def model_specs(plan: Any) -> tuple[Any, Any]:
    from speculab.experiment import model_specs as specs

    return specs(plan)


def work(plan: Any) -> Any:
    from transformers import AutoTokenizer

    from speculab.data import encode_prompt, load_prompts
    from speculab.experiment import point_work, settings_of

    tokenizer = AutoTokenizer.from_pretrained(plan.target_dir)
    prompts = [encode_prompt(p, tokenizer) for p in load_prompts("humaneval", 2)]
    return point_work(plan.cfg, prompts, settings_of(plan, tokenizer.eos_token_id))
