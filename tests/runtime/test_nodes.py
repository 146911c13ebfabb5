"""What a placement knows of the cluster's nodes, without Ray: whether a group can ever fit, which of
its nodes were lost, and why a pinned request is refused (`speculab.runtime.nodes`)."""

from __future__ import annotations

from speculab.runtime.nodes import Node, demand, fits, free_text, lost, readable, unoffered, unplaceable

HEAD = Node("h0123456789", "10.0.0.1", True, {"CPU": 2.0, "memory": 2**31, "node:10.0.0.1": 1.0})
B = Node("b", "10.0.0.2", False, {"CPU": 4.0, "GPU": 1.0, "node_b": 1.0})


def test_a_strict_pack_group_asks_one_node_for_its_bundles_summed() -> None:
    bundles = [{"CPU": 1.0, "GPU": 1.0}, {"CPU": 1.0, "GPU": 1.0}]
    assert demand(bundles) == {"CPU": 2.0, "GPU": 2.0}
    assert not fits(bundles, B.resources) and fits([{"CPU": 2.0}], HEAD.resources)


def test_a_group_only_a_dead_node_could_hold_is_unplaceable_and_the_node_named_lost() -> None:
    assert unplaceable([{"CPU": 1.0, "node_b": 1.0}], [HEAD, B])
    assert not unplaceable([{"CPU": 1.0}], [HEAD, B])
    assert lost(["b", "h0123456789", "b"], [HEAD, B]) == [B]


def test_resources_read_as_a_person_reads_them() -> None:
    """What `ray.available_resources()` returns, without Ray's own entries or bytes: the waiting lines."""
    free = {
        "node:__internal_head__": 0.999,
        "node:10.0.0.1": 1.0,
        "CPU_group_0_a1b2": 1.0,
        "bundle_group_a1b2": 999.999,
        "memory": 13958643712.0,
        "object_store_memory": 2e9,
        "node_b": 1.0,
        "CPU": 1.5,
        "GPU": 0.9999999,
    }
    assert readable(free) == "CPU 1.5, GPU 1, node_b 1, memory 13.0 GiB"
    assert readable({}) == "nothing"


def test_a_pin_no_alive_node_offers_is_refused_naming_the_field_and_the_nodes() -> None:
    why = unoffered("cluster.target_resources", {"node_b": 1.0}, [HEAD, B])
    assert why is not None and why.startswith("cluster.target_resources={'node_b': 1.0}: no alive node")
    assert why.endswith("alive nodes offer: 10.0.0.1 (node h0123456): CPU 2, memory 2.0 GiB")  # Ray's own left out
    assert unoffered("cluster.target_resources", {}, [HEAD]) is None


def test_attaching_to_no_cluster_is_one_clusters_error(monkeypatch) -> None:
    """`cluster.address=auto` with no Ray on this machine: Ray's ConnectionError becomes a ClusterError
    (one line from the command, the run FAILED), not a traceback."""
    import pytest
    import ray

    from speculab.runtime.placement import ClusterError
    from speculab.runtime.ray_actors import connect

    def no_cluster(**kwargs):
        raise ConnectionError("Could not find any running Ray instance.")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", no_cluster)
    with pytest.raises(ClusterError, match=r"cluster\.address='auto': no Ray cluster to attach to \(Could not find"):
        connect("auto", None)


def test_an_embedded_cluster_is_started_even_where_another_runs(monkeypatch) -> None:
    """With no `cluster.address`, Ray's own default attaches to any `ray start` head on this machine,
    which then refuses the embedded cluster's `num_cpus` (seen when a test's head ran beside a CLI run);
    "local" always starts the run's own cluster, with token authentication on a token of its own."""
    import os

    import ray

    from speculab.runtime.ray_actors import connect

    calls: list[dict] = []
    monkeypatch.setattr(os, "environ", {"HOME": "/nowhere"})  # what the cluster's processes would inherit
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(kwargs | {"env": dict(os.environ)}))
    connect(None, 3)
    assert calls[0]["address"] == "local" and calls[0]["num_cpus"] == 3
    assert len(calls[0]["env"]["RAY_AUTH_TOKEN"]) == 64  # Ray turns token mode on for a new local cluster


def test_an_embedded_cluster_keeps_the_users_auth_settings_and_each_gets_its_own_token() -> None:
    """Ray's default for a new local cluster writes `~/.ray/auth_token` and warns that it did; speculab's
    embedded cluster gets a fresh token in its environment instead, unless the user chose Ray's auth."""
    from speculab.config.attach import embedded_auth

    first, second = embedded_auth({}), embedded_auth({})
    assert first.keys() == {"RAY_AUTH_MODE", "RAY_AUTH_TOKEN"} and first["RAY_AUTH_TOKEN"] != second["RAY_AUTH_TOKEN"]
    assert first["RAY_AUTH_MODE"] == "token"  # named: a process started before the cluster reads it too
    assert embedded_auth({"RAY_AUTH_MODE": "disabled"}) == {}
    assert embedded_auth({"RAY_AUTH_TOKEN": "mine"}) == {}


def test_a_group_placed_again_does_not_count_as_free_the_node_where_it_lost_its_actors() -> None:
    """Ray counts a dead node alive, its resources free, until its health checks say otherwise (about 15 s):
    the waiting line leaves out the nodes the group held before, naming them, and counts the rest."""
    b_alive = Node("b0123456789", "10.0.0.2", True, {"CPU": 4.0, "GPU": 1.0})
    available = {"CPU": 5.0, "GPU": 1.0, "memory": 2**31}
    assert free_text(available, []) == readable(available)
    said = free_text(available, [b_alive])
    assert said.startswith("CPU 1, GPU 0, memory 2.0 GiB (not counting 10.0.0.2 (node b0123456)"), said
    assert free_text(available, [B]) == readable(available)  # a node Ray already lists dead is not in the count
