"""A process's one pool of model groups (`runtime.groups.GroupPool`), shared by a spread point's lane
threads (`cluster.spread`): threads opening groups while the run's end closes all break no walk and leave
no group open. Stub groups stand in for Ray's."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace

import pytest

from speculab.config.cluster import Placement
from speculab.models import LMSpec
from speculab.runtime import groups
from speculab.runtime.placement import EMBEDDED


@dataclass
class StubGroup:
    role: str
    spec: LMSpec
    bundles: list[dict[str, float]]
    placement: Placement
    nodes: list[str] = field(default_factory=lambda: ["n"])
    loads: int = 1
    closed: bool = False

    def close(self) -> None:
        time.sleep(0)  # a real group's close waits on Ray, letting the other threads run
        self.closed = True


def test_a_groups_name_carries_its_replica() -> None:
    spec = LMSpec(backend="hf", path="m")
    assert [groups.replica_of(groups.group_name("target", spec, [{"CPU": 1.0}], r)) for r in (0, 1, 7)] == [0, 1, 7]
    assert groups.replica_of("speculab-0a1b2c3d:" + groups.group_name("draft", spec, [{"CPU": 1.0}], 2)) == 2


def test_lane_threads_open_groups_while_the_end_closes_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(groups, "ActorGroup", StubGroup)
    monkeypatch.setattr(groups.ray, "available_resources", lambda: {"CPU": 1e9})  # room for every stub
    pool: groups.GroupPool = groups.GroupPool()
    made: list[StubGroup] = []
    errors: list[BaseException] = []

    def replica(r: int) -> None:
        try:
            opening(r)
        except BaseException as err:  # a thread's error would only be printed
            errors.append(err)

    def opening(r: int) -> None:
        placement = replace(EMBEDDED, replica=r)
        for i in range(400):
            made.append(pool.get("target", LMSpec(backend="hf", path=f"m{i}"), [{"CPU": 1.0}], placement))  # type: ignore[arg-type]
            pool.model_loads(r)

    threads = [threading.Thread(target=replica, args=(r,)) for r in range(3)]
    for thread in threads:
        thread.start()
    while any(t.is_alive() for t in threads):
        pool.close_all()
    for thread in threads:
        thread.join()
    pool.close_all()
    assert errors == [] and len(made) == 1200 and all(group.closed for group in made) and pool.groups == {}


@pytest.mark.slow
def test_a_group_without_room_beside_earlier_points_idle_groups_gets_theirs(ray_pool: groups.GroupPool) -> None:
    """On the session's 4 CPUs: a point's group that the free CPUs cannot hold closes this process's idle
    groups of earlier points (another layout's, which would hold the CPUs until the wait for placement
    failed), never one of its own point's (`keep`); where there is room, they stay loaded."""
    import torch

    from speculab.models.toy import random_bigram

    spec = LMSpec("toy", table=random_bigram(5, torch.Generator().manual_seed(1)))
    earlier = ray_pool.get("target", spec, [{"CPU": 3.0}])  # an earlier point's, idle now
    point = ray_pool.get("draft", spec, [{"CPU": 2.0}])  # 1 CPU free: the earlier point's group makes room
    assert earlier.name not in ray_pool.groups and point.name in ray_pool.groups
    room = ray_pool.get("target", spec, [{"CPU": 1.0}])  # 2 CPUs free: nothing closed
    assert {point.name, room.name} <= set(ray_pool.groups)
    beside = ray_pool.get(
        "target", spec, [{"CPU": 2.0}], keep=frozenset({point.name})
    )  # 1 free: the idle one goes, not its own
    assert set(ray_pool.groups) == {point.name, beside.name}
