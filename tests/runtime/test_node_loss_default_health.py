"""A lost node as a default Ray cluster reports it: Ray's own health checks (about 15 s before a killed
raylet's node is marked dead), not the fast ones of `test_node_loss.py`. The point whose group is pinned
to the lost node ends naming that node (by address and id) before `runtime.placement_timeout_s` runs out
(its message says which ended the wait), though speculab sees the group's actors fail seconds before Ray
lists the node dead: the wait for a place checks every second whether an alive node can still hold the
group."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from speculab.config import resolve
from speculab.point.experiment import decode_point
from speculab.results.point import PointShape
from speculab.runtime.placement import ClusterError
from support.configs import load
from support.two_nodes import CrashOnFirstPrompt, TwoNodes, cluster_of_two, overrides, with_node_b

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def default_health() -> Iterator[TwoNodes]:
    yield from cluster_of_two({})


@pytest.fixture
def pool(default_health: TwoNodes) -> Iterator[TwoNodes]:
    yield from with_node_b(default_health)


def test_a_pinned_group_s_lost_node_is_named_under_ray_s_default_health_checks(pool: TwoNodes) -> None:
    tracker = CrashOnFirstPrompt(pool, until_dead=False)  # the next unit meets the crash as Ray first knows it
    pinned = ["cluster.target_resources={node_b: 1}", "runtime.placement_timeout_s=30"]
    plan = resolve(load(overrides(pool, *pinned)))
    with pytest.raises(ClusterError) as failed:
        decode_point(plan, PointShape.of(plan.cfg), tracker)
    message = str(failed.value)
    assert f"node {pool.node_b.node_ip_address} (node {str(pool.node_b.node_id)[:8]}) was lost" in message, message
    assert "1 of 2 finished unit(s) are logged" in message, message
    assert "no alive node can hold" in message and "not placed within" not in message, message
