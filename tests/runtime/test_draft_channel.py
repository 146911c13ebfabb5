"""A draft in an actor of its own, driven over a socket by the loop on the target's rank 0
(`runtime.draft_channel`). In this process: the client's calls give what the model gives beside the loop,
an error in a call that did not wait is raised by the next call that does, each proposal says how long
the draft was busy, and the door: a stray client (a wrong key), a silent one, one from another address
and a newer client of the loop's; a stuck draft and a silent one are lost within their bounds. On the
embedded Ray cluster: the tiny pair's tokens with the draft actor driven over the socket, synchronously
and drafting ahead, are those of the draft beside the target, at T = 0 and T = 1 (the same uniforms,
drawn in the draft's process), and a draft actor killed mid-unit, at TP = 1 and 2, is restarted alone
and the unit decoded again to the same tokens."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client
from typing import TYPE_CHECKING, Any

import pytest
import torch

from speculab.core.records import concat_runs
from speculab.drafting.sampling import SamplingParams
from speculab.models import DraftModel, LMSpec
from speculab.models.toy import random_bigram
from speculab.results.figures import run_figures
from speculab.results.names import AHEAD_METRICS
from speculab.runtime.calls import CALLS, semantics
from speculab.runtime.transport import draft_channel
from speculab.runtime.transport.draft_channel import DraftClient, DraftLost, DraftServer, serving_host

if TYPE_CHECKING:  # imports Ray: only the tests that use the cluster pay for it
    from speculab.runtime.groups import GroupPool


def toy() -> DraftModel:
    return DraftModel(LMSpec("toy", table=random_bigram(5, torch.Generator().manual_seed(3))))


def serving(draft: DraftModel, timeout_s: float = 60.0) -> DraftServer:
    """`draft` served on the loopback to a loop on this node."""
    return DraftServer(draft, "127.0.0.1", "127.0.0.1", timeout_s)


def proposes(client: DraftClient) -> bool:
    client.prefill([[1, 2]], [4], seed=0)
    return client.propose(1, 2, SamplingParams(1.0)).paths.shape == (1, 1, 2)


def test_a_served_draft_proposes_what_it_proposes_beside_the_loop() -> None:
    sampling = SamplingParams(1.0)
    client, beside = DraftClient(serving(toy()).address), toy()
    for draft in (client, beside):
        draft.prefill([[1, 2], [3]], [4, 0], seed=9)
        draft.commit([[2, 1], [0]])
    served, local = client.propose(1, 3, sampling), beside.propose(1, 3, sampling)
    assert torch.equal(served.paths, local.paths) and torch.equal(served.q, local.q)
    assert client.kv_bytes() == beside.kv_bytes()
    assert client.conditions() == beside.conditions()


class StepClock:
    """`draft_channel`'s clock: a perf_counter that only the draft's calls move, each by the seconds it is
    given, so the busy time the server counts is exact whatever the machine's load; the client's deadlines
    keep the real monotonic clock."""

    monotonic = staticmethod(time.monotonic)

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def taking(self, call: Callable[..., Any], seconds: float) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self.now += seconds
            return call(*args, **kwargs)

        return timed


def test_each_proposal_says_how_long_the_draft_was_busy_since_the_one_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """The busy seconds a proposal carries: its own and those of every call run since the proposal before,
    the ones sent without waiting too, and none of the calls before that."""
    clock, draft = StepClock(), toy()
    for method, seconds in (("prefill", 1.0), ("commit", 2.0), ("propose", 4.0)):
        setattr(draft, method, clock.taking(getattr(draft, method), seconds))
    monkeypatch.setattr(draft_channel, "time", clock)
    client = DraftClient(serving(draft).address)
    client.prefill([[1, 2]], [4], seed=0)
    first = client.propose(1, 2, SamplingParams(1.0))
    client.commit([[2]])
    second = client.propose(1, 2, SamplingParams(1.0))
    assert (first.draft_busy_s, second.draft_busy_s) == (1.0 + 4.0, 2.0 + 4.0)


def test_an_error_in_a_call_that_did_not_wait_is_raised_by_the_next_that_does() -> None:
    client = DraftClient(serving(toy()).address)
    client.prefill([[1, 2]], [4], seed=0)
    client.retain(torch.tensor([5]))  # no row 5: fails in the draft's process, sent without waiting
    with pytest.raises(IndexError):
        client.propose(1, 2, SamplingParams(1.0))
    assert proposes(client)  # the channel goes on


def test_every_call_of_a_role_has_its_semantics_and_an_unknown_one_is_refused_before_it_is_sent() -> None:
    """One table (`runtime.calls`) says which calls wait, for the proxy, the peers' announcements and the
    socket alike: every public method of each role is in it, so none is sent unwaited by default."""
    from speculab.models import TreeTarget
    from speculab.runtime.loop_host import LoopHost

    for role, kind in (("target", TreeTarget), ("draft", DraftModel), ("loop", LoopHost)):
        methods = {name for name in vars(kind) if not name.startswith("_") and callable(getattr(kind, name))}
        assert methods - {"describe"} <= set(CALLS[role]), (role, methods - set(CALLS[role]))
    assert not semantics("draft", "prefill").waited and semantics("target", "prefill").waited
    assert not semantics("target", "commit").collective and semantics("draft", "speculate").collective
    client = DraftClient(serving(toy()).address)
    with pytest.raises(AttributeError, match="runtime.calls.CALLS"):
        client._run("forget_everything")
    assert proposes(client)


def test_the_draft_serves_on_the_loopback_to_a_loop_on_its_node_and_on_its_address_to_another() -> None:
    assert serving_host("10.0.0.5", "10.0.0.5") == "127.0.0.1"
    assert serving_host("10.0.0.5", "127.0.0.1") == "127.0.0.1"
    assert serving_host("10.0.0.5", "10.0.0.6") == "10.0.0.5"


def test_a_connection_from_another_address_than_the_loops_is_dropped() -> None:
    server = DraftServer(toy(), "127.0.0.1", "10.9.9.9", 60.0)  # the loop is elsewhere: this one is a stranger
    with pytest.raises(DraftLost, match="did not let this loop in"):
        DraftClient(server.address)


def test_a_stray_client_with_a_wrong_key_leaves_the_door_open_for_the_loop() -> None:
    server = serving(toy())
    for _ in range(3):
        with pytest.raises(AuthenticationError):
            Client((server.address.host, server.address.port), authkey=b"not the key")
    assert proposes(DraftClient(server.address))


def test_a_silent_client_delays_neither_the_loop_nor_the_next_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that connects first and says nothing: the loop's client is let in beside it (were they tried
    in turn, the loop's handshake would wait out the silent one's), and once it hangs up too."""
    monkeypatch.setattr(draft_channel, "HANDSHAKE_S", 60.0)  # a silent client tried in turn would hold the door
    server = serving(toy())
    silent = socket.create_connection((server.address.host, server.address.port))
    assert proposes(DraftClient(server.address))
    silent.close()
    assert proposes(DraftClient(server.address))


def test_the_newest_client_of_the_loop_is_the_one_served() -> None:
    """A restarted loop actor connects again: the server serves it, and hangs up on the one before."""
    server = serving(toy())
    old = DraftClient(server.address)
    assert proposes(old)
    assert proposes(DraftClient(server.address))
    with pytest.raises(DraftLost, match="closed"):
        old.propose(1, 2, SamplingParams(1.0))


def test_a_draft_stuck_in_a_call_is_lost_past_the_call_timeout() -> None:
    """Alive (it beats) but never answering: the loop's call ends with DraftLost at the timeout."""
    draft, release = toy(), threading.Event()
    draft.propose = lambda *args, **kwargs: release.wait()  # type: ignore[method-assign]
    client = DraftClient(serving(draft, timeout_s=1.5).address)
    client.prefill([[1, 2]], [4], seed=0)
    with pytest.raises(DraftLost, match=r"no answer to propose within 1\.5 s .*stuck"):
        client.propose(1, 2, SamplingParams(1.0))
    release.set()


def test_a_draft_that_falls_silent_is_lost_without_waiting_out_the_call_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A draft that lets the loop in, then says nothing (its process frozen, its node gone without a word):
    lost once SILENCE_S passes without a beat, long before the call's own timeout."""
    from multiprocessing.connection import Connection, answer_challenge, deliver_challenge

    monkeypatch.setattr(draft_channel, "SILENCE_S", 0.5)
    listener, key, kept = socket.create_server(("127.0.0.1", 0)), b"k" * 16, []

    def frozen() -> None:
        sock, _ = listener.accept()
        conn = Connection(sock.detach())
        deliver_challenge(conn, key)
        answer_challenge(conn, key)
        kept.append(conn)  # open, never answered

    door = threading.Thread(target=frozen)
    door.start()
    address = draft_channel.DraftAddress("127.0.0.1", listener.getsockname()[1], key, 3600.0)
    client = DraftClient(address)
    door.join()
    with pytest.raises(DraftLost, match="said nothing for 0.5 s while conditions waited"):
        client.conditions()
    listener.close()


def test_a_served_loop_charges_the_draft_actors_cpu_to_its_decodes() -> None:
    """The loop on the target's rank 0 counts a decode's CPU as its ranks' and the draft actor's."""
    from speculab.models import TreeTarget
    from speculab.runtime.loop_host import LoopHost
    from speculab.runtime.transport.tp_loop import Announcer, Leader
    from support.tiny_loop import plan

    draft = toy()
    draft.cpu_seconds = lambda: 1000.0  # type: ignore[method-assign]  # the draft actor's process, far busier
    target = TreeTarget(LMSpec("toy", table=random_bigram(5, torch.Generator().manual_seed(3))))
    host = LoopHost(Leader(target, Announcer(1)), None)
    host.start_point(plan(1.0), serving(draft).address)
    assert host.loop is not None and host.loop.cpu() >= 1000.0


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_tiny_pair_decodes_the_same_tokens_with_its_draft_served_over_a_socket(temperature: float) -> None:
    from speculab.config import resolve
    from speculab.config.prompts import point_prompts
    from speculab.point.experiment import prepare
    from support.configs import load

    common = [
        "runtime=ray",
        "runtime.torch_threads=1",
        "cluster.num_cpus=3",
        "algorithm=block",
        f"sampling.temperature={temperature}",
        "dataset.num_prompts=3",
        "sampling.max_new_tokens=24",
        "sampling.batch_size=1",
        "tracking=none",
    ]
    placements = {
        "beside": ["cluster.draft_placement=beside"],
        "served": ["cluster.draft_placement=own", "runtime.loop=target"],
        "ahead": ["cluster.draft_placement=own", "drafter.ahead=ssd"],
    }
    tokens, hits, logged = {}, [], set()
    for name, overrides in placements.items():
        plan = resolve(load([*common, *overrides]))
        prepared = prepare(plan, point_prompts(plan))
        (loop,) = prepared.loops
        runs = [loop.decode_unit("speculative", unit, 0).result for unit in range(prepared.units)]
        tokens[name] = [p.tokens for run in runs for p in run.prompts]
        hits += [r.ahead_hit for run in runs for r in run.rounds if name == "ahead" and r.ahead_hit is not None]
        logged |= set(run_figures(concat_runs(runs))) if name == "ahead" else set()
    assert tokens["served"] == tokens["beside"] and tokens["ahead"] == tokens["beside"]
    assert hits and any(hits)
    assert {m.key for m in AHEAD_METRICS} <= logged  # every figure of drafting ahead over the socket


@pytest.mark.slow
def test_a_unit_whose_draft_actor_died_is_decoded_again_on_a_restarted_draft(monkeypatch: pytest.MonkeyPatch) -> None:
    """The draft actor dies between two units: rank 0's next call on its socket fails with DraftLost, the
    driver restarts the draft's group for it (the loop's group untouched) and decodes the unit again, with
    the tokens it decodes without the loss."""
    import ray

    from speculab.config import resolve
    from speculab.config.prompts import point_prompts
    from speculab.point.experiment import prepare
    from speculab.runtime import loop_groups
    from speculab.runtime.transport.draft_channel import DraftLost
    from support.configs import load

    overrides = [
        "runtime=ray",
        "runtime.torch_threads=1",
        "cluster.num_cpus=2",
        "cluster.draft_placement=own",
        "drafter.ahead=ssd",
        "algorithm=block",
        "dataset.num_prompts=2",
        "sampling.max_new_tokens=16",
        "sampling.batch_size=1",
        "tracking=none",
    ]
    plan = resolve(load(overrides))
    (loop,) = prepare(plan, point_prompts(plan)).loops
    before = loop.decode_unit("speculative", 1, 0).result
    groups = loop_groups(loop)
    draft = groups["draft"]
    (actor,) = draft.group.members
    lost: list[Exception] = []
    restart = draft.restart

    def restarting(err: Exception) -> None:
        lost.append(err)
        restart(err)

    monkeypatch.setattr(draft, "restart", restarting)
    ray.kill(actor, no_restart=True)
    after = loop.decode_unit("speculative", 1, 0).result
    assert [p.tokens for p in after.prompts] == [p.tokens for p in before.prompts]
    assert draft.stats.restarts == 1 and draft.group.members[0] != actor
    (err,) = lost  # rank 0's error, raised through Ray as a DraftLost: the socket closed under a call
    assert isinstance(err, DraftLost) and "the draft actor's socket closed" in str(err), err
    assert groups["loop"].stats.restarts == 0


@pytest.mark.slow
@pytest.mark.parametrize("tp_size", [1, 2])
def test_a_draft_actor_killed_mid_unit_is_restarted_alone_and_the_unit_decoded_again(
    ray_pool: GroupPool, tp_size: int
) -> None:
    """The draft actor dies while rank 0 decodes a unit: rank 0's socket fails with DraftLost, its peers are
    released, and the driver restarts the draft's group alone (the target's ranks keep their load) and
    decodes the unit again, to the tokens it decodes without the loss."""
    from dataclasses import replace

    from speculab.runtime import start_loop
    from speculab.runtime.placement import EMBEDDED
    from support.faults import kill_when_in_flight
    from support.tiny_loop import DRAFT, TARGET, plan

    target = replace(TARGET, tp_size=tp_size)
    loop = start_loop("target", target, DRAFT, plan(1.0), replace(EMBEDDED, draft_own=True))
    before = loop.decode_unit("speculative", 1, 0).result
    (actor,) = loop.draft.group.members
    ranks = list(loop.loop.group.members)
    killed = kill_when_in_flight(loop.loop, actor)
    after = loop.decode_unit("speculative", 1, 0).result
    assert killed and [p.tokens for p in after.prompts] == [p.tokens for p in before.prompts]
    assert loop.draft.stats.restarts == 1 and loop.draft.group.members[0] != actor
    assert loop.loop.stats.restarts == 0 and loop.loop.group.members == ranks and loop.loop.group.loads == 1
