"""A draft in an actor of its own, driven over a socket by the loop on the target's rank 0
(`runtime.draft_channel`). In this process: the client's calls give what the model gives beside the loop,
an error in a call that did not wait is raised by the next call that does, and each proposal says how
long the draft was busy. On the embedded Ray cluster: the tiny pair's tokens with the draft actor driven
over the socket, synchronously and drafting ahead, are those of the draft beside the target, at T = 0 and
T = 1 (the same uniforms, drawn in the draft's process)."""

from __future__ import annotations

import pytest
import torch

from speculab.drafting.sampling import SamplingParams
from speculab.models import DraftModel, LMSpec
from speculab.models.toy import random_bigram
from speculab.records import concat_runs
from speculab.results.figures import run_figures
from speculab.results.names import AHEAD_METRICS
from speculab.runtime.draft_channel import DraftClient, DraftServer


def toy() -> DraftModel:
    return DraftModel(LMSpec("toy", table=random_bigram(5, torch.Generator().manual_seed(3))))


def test_a_served_draft_proposes_what_it_proposes_beside_the_loop() -> None:
    sampling = SamplingParams(1.0)
    client, beside = DraftClient(DraftServer(toy(), "127.0.0.1").address), toy()
    for draft in (client, beside):
        draft.prefill([[1, 2], [3]], [4, 0], seed=9)
        draft.commit([[2, 1], [0]])
    served, local = client.propose(1, 3, sampling), beside.propose(1, 3, sampling)
    assert torch.equal(served.paths, local.paths) and torch.equal(served.q, local.q)
    assert served.draft_busy_s > 0 and client.kv_bytes() == beside.kv_bytes()
    assert client.conditions() == beside.conditions()


def test_an_error_in_a_call_that_did_not_wait_is_raised_by_the_next_that_does() -> None:
    client = DraftClient(DraftServer(toy(), "127.0.0.1").address)
    client.prefill([[1, 2]], [4], seed=0)
    client.retain(torch.tensor([5]))  # no row 5: fails in the draft's process, sent without waiting
    with pytest.raises(IndexError):
        client.propose(1, 2, SamplingParams(1.0))
    client.prefill([[1, 2]], [4], seed=0)  # the channel goes on
    assert client.propose(1, 2, SamplingParams(1.0)).paths.shape == (1, 1, 2)


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_tiny_pair_decodes_the_same_tokens_with_its_draft_served_over_a_socket(temperature: float) -> None:
    from speculab.config import resolve
    from speculab.config.prompts import point_prompts
    from speculab.experiment import prepare
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
def test_a_unit_whose_draft_actor_died_is_decoded_again_on_a_restarted_draft() -> None:
    """The draft actor dies between two units: rank 0's next call on its socket fails, the driver restarts
    the draft's group and decodes the unit again, with the tokens it decodes without the loss."""
    import ray

    from speculab.config import resolve
    from speculab.config.prompts import point_prompts
    from speculab.experiment import prepare
    from speculab.runtime import loop_groups
    from speculab.runtime.draft_channel import DraftLost
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
    draft = loop_groups(loop)["draft"]
    (actor,) = draft.group.members
    ray.kill(actor, no_restart=True)
    after = loop.decode_unit("speculative", 1, 0).result
    assert [p.tokens for p in after.prompts] == [p.tokens for p in before.prompts]
    assert draft.stats.restarts == 1 and draft.group.members[0] != actor
    assert issubclass(DraftLost, RuntimeError)
