"""A draft sharded over the ranks of a TP = 2 target (`cluster.draft_placement=sharded`; CPU, gloo).

Each rank of the loop group holds a target shard and a draft shard; rank 0's loop announces its draft
calls through the same announcer as its target calls (`runtime.tp_loop`), so the peer's shards run
every call in rank 0's order. The run decodes what one process decodes (fp32, T = 0 and T = 1), for a
path verifier and for DDTree, and a killed rank costs the redo of its unit with the same tokens.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from speculab.runtime import start_loop
from speculab.runtime.groups import GroupPool
from speculab.runtime.transport.proxy import GroupProxy
from support.faults import kill_when_in_flight
from support.tiny_loop import DRAFT, DRAFT_TP2, TARGET, TP2, plan, tokens


@pytest.fixture(scope="module")
def sharded_loop(module_ray_pool: GroupPool) -> GroupProxy:
    """The module's TP = 2 loop group whose draft is sharded over the same two ranks."""
    return start_loop("target", TP2, DRAFT_TP2, plan(1.0))


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize(("algorithm", "drafter"), [("block", "iid"), ("ddtree", "ar_marginals")])
def test_a_sharded_draft_decodes_what_one_process_decodes(
    sharded_loop: GroupProxy, algorithm: str, drafter: str, temperature: float
) -> None:
    """A path verifier and DDTree with the draft's two shards following rank 0's draft calls (fp32): the
    tokens one process decodes, and the draft's KV summed over the ranks as the target's is."""
    work = plan(temperature, algorithm, drafter)
    loop, inline = start_loop("target", TP2, DRAFT_TP2, work), start_loop("inline", TARGET, DRAFT, work)
    assert loop.group is sharded_loop.group
    assert tokens(loop, "speculative") == tokens(inline, "speculative")
    rounds = loop.decode_unit("speculative", 0, 0).result.rounds
    assert [r.kv_draft_bytes for r in rounds] == [
        r.kv_draft_bytes for r in inline.decode_unit("speculative", 0, 0).result.rounds
    ]
    draft = loop.conditions()["draft"]
    assert len(draft.peers) == 1  # the draft's shards: rank 0's process and its peer's


@pytest.mark.slow
def test_a_killed_rank_of_a_sharded_draft_costs_its_unit_and_the_tokens_stay(sharded_loop: GroupProxy) -> None:
    loop = start_loop("target", TP2, DRAFT_TP2, plan(1.0))
    clean = tokens(loop, "speculative")
    restarts = loop.stats.restarts
    killed = kill_when_in_flight(loop, loop.group.members[1])  # the peer: its target and draft shards
    assert tokens(loop, "speculative") == clean and killed
    assert loop.stats.restarts == restarts + 1


@pytest.mark.slow
def test_the_transformers_backend_shards_the_draft_too(module_ray_pool: GroupPool) -> None:
    """`cluster.tp_backend=transformers`: both models' shards from their own tp_plan, in one world."""
    transformers = {"tp_backend": "transformers"}
    loop = start_loop("target", replace(TP2, **transformers), replace(DRAFT_TP2, **transformers), plan(0.0))
    inline = start_loop("inline", TARGET, DRAFT, plan(0.0))
    assert tokens(loop, "speculative") == tokens(inline, "speculative")
