"""The decode loop on rank 0 of a TP = 2 target (`runtime.loop=target`, `cluster.tp_size=2`; CPU, gloo).

Rank 0 holds its target shard, the draft and the loop; rank 1 follows every target call rank 0
announces (`runtime.tp_loop`), so a round makes no Ray call. The run decodes what one process decodes
(fp32, T = 0 and T = 1, seeded per unit), names every rank's process, sums the KV cache over the
ranks, and a killed peer or rank 0 costs the redo of its unit, with the same tokens.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from speculab.point.experiment import decode_point
from speculab.runtime import start_loop
from speculab.runtime.groups import GroupPool
from speculab.runtime.transport.proxy import GroupProxy
from speculab.tracking.tracker import NoopTracker
from support.configs import plan_and_shape
from support.faults import kill_when_in_flight
from support.tiny_loop import DRAFT, TARGET, TP2, plan, tokens


def test_an_announcement_carries_its_calls_and_their_tensors_exactly() -> None:
    """The wire format of rank 0's announcements: calls pickled without their tensors, whose bytes follow."""
    import torch

    from speculab.drafting.tree import DraftTree
    from speculab.runtime.transport.tp_loop import Call, decoded, encoded, stripped

    tree = DraftTree.from_paths(torch.tensor([5, 6]), torch.randint(2, 99, (2, 3, 4)))
    calls = [
        Call("target", "commit", (torch.tensor([[0, 2, -1], [0, -1, -1]]),), {}),
        Call("draft", "retain", (torch.tensor([1]),), {}),
        Call("target", "score", (tree, 0.7), {"mask": torch.ones(2, 0, dtype=torch.bool)}),
        Call("draft", "prefill", ([[1, 2, 3], []],), {"room": 17}),
    ]
    data, on_device = encoded(calls)
    assert on_device == []  # CPU tensors travel in the bytes
    again = decoded(data, lambda ref: pytest.fail(f"no tensor is on a device: {ref}"))
    sent, got = [], []  # the calls' tensors, in order: their structures (TensorRefs in place) equal
    assert stripped(again, got) == stripped(calls, sent) and len(got) == len(sent) == 8
    for want, found in zip(sent, got):
        assert found.dtype == want.dtype and torch.equal(found, want)
    assert decoded(encoded(None)[0], lambda ref: pytest.fail()) is None


@pytest.fixture(scope="module")
def tp_loop(module_ray_pool: GroupPool) -> GroupProxy:
    """The module's TP = 2 loop group, loaded once (each test starts its own point on it)."""
    return start_loop("target", TP2, DRAFT, plan(1.0))


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_rank_0_s_loop_decodes_what_one_process_decodes(tp_loop: GroupProxy, temperature: float) -> None:
    loop = start_loop("target", TP2, DRAFT, plan(temperature))
    inline = start_loop("inline", TARGET, DRAFT, plan(temperature))
    methods = ("speculative", "autoregressive") + (("generate",) if temperature == 0 else ())
    for method in methods:
        assert tokens(loop, method) == tokens(inline, method), method
    assert loop.group is tp_loop.group  # one load for every point


@pytest.mark.slow
def test_every_rank_is_named_and_the_kv_cache_summed_over_them(tp_loop: GroupProxy) -> None:
    loop = start_loop("target", TP2, DRAFT, plan(0.0))
    target = loop.conditions()["target and generate"]
    assert len(target.peers) == 1 and target.peers[0].pid != target.pid
    assert f"rank 1 process {target.peers[0].pid}" in target.describe(0)
    inline = start_loop("inline", TARGET, DRAFT, plan(0.0))
    for method in ("speculative", "autoregressive"):  # call by call, and one announced decode
        kv = [r.kv_target_bytes for r in loop.decode_unit(method, 0, 0).result.rounds]
        assert kv == [r.kv_target_bytes for r in inline.decode_unit(method, 0, 0).result.rounds], method


@pytest.mark.slow
def test_a_point_at_tp_2_makes_no_ray_call_a_round(tp_loop: GroupProxy, module_ray_pool: GroupPool) -> None:
    """The whole point through the experiment, on the module's group (the same specs name it)."""

    overrides = ["cluster.tp_size=2", "runtime.torch_threads=1", "tracking=none", "baseline_hf=false"]
    small = ["dataset.num_prompts=1", "sampling.max_new_tokens=12", "measure.repeats=1"]
    loads = module_ray_pool.model_loads()
    figures = decode_point(*plan_and_shape([*overrides, *small]), NoopTracker()).figures
    assert figures.value("ray_calls_per_round") == 0 and figures.value("restarts") == 0
    assert figures.value("model_loads") == loads  # the module's group, not a new one


@pytest.mark.slow
@pytest.mark.parametrize("rank", [1, 0])
def test_a_killed_rank_costs_its_unit_and_the_tokens_stay(tp_loop: GroupProxy, rank: int, caplog) -> None:

    loop = start_loop("target", TP2, DRAFT, plan(1.0))
    clean = tokens(loop, "speculative")
    victim = loop.group.members[rank]
    restarts = loop.stats.restarts
    killed = kill_when_in_flight(loop, victim)  # the first unit's call, once submitted
    with caplog.at_level(logging.WARNING, logger="speculab.runtime.transport.proxy"):
        again = tokens(loop, "speculative")
    assert killed and again == clean
    assert loop.stats.restarts == restarts + 1 and "loop group" in caplog.text and "lost an actor" in caplog.text
    assert victim not in loop.group.members


@pytest.mark.slow
def test_the_transformers_backend_s_ranks_decode_the_same_tokens(module_ray_pool: GroupPool) -> None:
    """`cluster.tp_backend=transformers`: the model's own tp_plan (DTensor shards) under the same loop."""
    loop = start_loop("target", replace(TP2, tp_backend="transformers"), DRAFT, plan(0.0))
    inline = start_loop("inline", TARGET, DRAFT, plan(0.0))
    for method in ("speculative", "autoregressive", "generate"):
        assert tokens(loop, method) == tokens(inline, method), method


def test_the_autoregressive_baseline_is_one_announcement_a_decode(monkeypatch) -> None:
    """Rank 0 announces the whole autoregressive decode once (its peers run it themselves) where call
    by call it announced every token; what it decodes and the KV it reports (summed over the world, here
    of one process) are the same."""
    import torch.distributed as dist

    from speculab.core.autoregressive import autoregressive
    from speculab.runtime.transport import tp_loop
    from support.engine import TOY_PROMPTS, settings, toy_roles
    from support.servers import free_port

    sent: list[list[str]] = []
    monkeypatch.setattr(tp_loop, "announce", lambda calls: sent.append([c.method for c in calls or []]))
    target, _ = toy_roles(3)
    s = settings(T=1.0, K=1, L=3, max_new=12, batch=2)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        leader = tp_loop.Leader(target, tp_loop.Announcer(world=2))  # peers stubbed: announcements recorded, not sent
        whole = leader.autoregressive(TOY_PROMPTS, s)
        assert sent == [["autoregressive"]]
        sent.clear()
        by_call = autoregressive(leader, TOY_PROMPTS, s)
        assert len(sent) > 12  # a prefill and a score a token, each announced
    finally:
        dist.destroy_process_group()
    assert [p.tokens for p in whole.prompts] == [p.tokens for p in by_call.prompts]
    assert [r.kv_target_bytes for r in whole.rounds] == [r.kv_target_bytes for r in by_call.rounds]
