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

from speculab.config import resolve
from speculab.point.experiment import decode_point
from speculab.results.point import PointShape
from speculab.runtime import start_loop
from speculab.runtime.placement import ClusterError
from speculab.tracking.tracker import NoopTracker
from support.configs import load
from support.two_nodes import FAST_HEALTH, CrashOnFirstPrompt, TwoNodes, cluster_of_two, overrides, with_node_b

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[TwoNodes]:
    """The module's own two-node cluster, with fast health checks (FAST_HEALTH)."""
    yield from cluster_of_two(FAST_HEALTH)


@pytest.fixture
def pool(two_nodes: TwoNodes) -> Iterator[TwoNodes]:
    """Node B up, and no group left open by the test before."""
    yield from with_node_b(two_nodes)


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
    """Pinned to node B, which crashes after the first unit: the point ends as soon as no alive node can hold
    the group (not once `runtime.placement_timeout_s` runs out, which would say so instead), naming node B
    and the group's needs; the finished unit is logged."""
    tracker = CrashOnFirstPrompt(pool)
    plan = resolve(load(overrides(pool, "cluster.target_resources={node_b: 1}", "runtime.placement_timeout_s=60")))
    with pytest.raises(ClusterError) as failed:
        decode_point(plan, PointShape.of(plan.cfg), tracker)
    message = str(failed.value)
    lost_b = f"node {pool.node_b.node_ip_address} (node {str(pool.node_b.node_id)[:8]}) was lost"
    assert lost_b in message, message  # by address and id: both nodes of this test share one address
    assert "CPU 1, node_b 1 on one node" in message and "1 of 2 finished unit(s) are logged" in message
    assert "no alive node can hold" in message and "not placed within" not in message, message
    assert tracker.metrics["runtime/units_finished"] == 1 and "records.jsonl" in tracker.texts


def model_specs(plan: Any) -> tuple[Any, Any]:
    from speculab.point.experiment import model_specs as specs

    return specs(plan)


def work(plan: Any) -> Any:
    from transformers import AutoTokenizer

    from speculab.data import encode_prompt, load_prompts
    from speculab.point.experiment import point_work, settings_of

    tokenizer = AutoTokenizer.from_pretrained(plan.target_dir)
    prompts = [encode_prompt(p, tokenizer) for p in load_prompts("humaneval", 2)]
    return point_work(plan.cfg, prompts, settings_of(plan, tokenizer.eos_token_id))
