"""Issue 26: every batched verifier is one capturable graph for fixed shapes.

``torch.compile(decide, fullgraph=True)`` fails on any graph break (a host read, a shape chosen
by data), so passing here means no host synchronisation inside a call. Traced, the verifiers
take their static-shape form (`device.hostreads.reads_free` is False); eager on the CPU they
prune finished rows and sparse sets. Both must give the same verdict for the same uniforms.
The "eager" backend keeps compiling cheap; what is checked is the trace, not the kernels.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from speculab.config import Config, passes_on
from speculab.core.engine import decode
from speculab.device.graphs import Graphs
from speculab.device.hostreads import device_form
from speculab.drafting.best_first import best_first_tree
from speculab.registry import ALGORITHMS, PATH_ALGORITHMS, get_verifier
from speculab.verify.captured import CapturedPaths, carry_from, carry_parts, replayed
from speculab.verify.contracts import DrawnPathVerifier
from speculab.verify.ddtree_walk import ddtree_walk_decision
from speculab.verify.decisions import draw_uniforms
from speculab.verify.modification import ModifiedTarget
from speculab.verify.verdict import Verdict
from support.engine import TOY_PROMPTS, settings, toy_roles
from support.toy_instances import sample_batch, toy_pair

BATCH, LENGTH = 12, 3


def assert_same_verdict(eager: Verdict, captured: Verdict) -> None:
    for field in ("tokens", "num_tokens", "path"):
        assert torch.equal(getattr(eager, field), getattr(captured, field)), field
    if eager.carry is not None:  # the pending modifications, up to the order of float sums
        for field in ("a", "s", "remaining"):
            torch.testing.assert_close(getattr(eager.carry, field), getattr(captured.carry, field))


@pytest.mark.parametrize("name", PATH_ALGORITHMS)
def test_compiled_verifier_gives_the_eager_verdict(name: str) -> None:
    """Two rounds (the second with the first round's carry), compiled whole vs eager."""
    spec = ALGORITHMS[name]
    assert isinstance(spec.verifier, DrawnPathVerifier), f"{name}: draws its uniforms inside the call"
    count = 3 if spec.multi_path else 1
    target, draft = toy_pair(6, "full", False, False, seed=3)
    paths, p, q = sample_batch(target, draft, batch=BATCH, paths=count, length=LENGTH, seed=5)
    compiled = torch.compile(spec.verifier.decide, fullgraph=True, backend="eager", dynamic=False)
    carry: Any = None
    for round_index in range(2):
        u = draw_uniforms(
            torch.Generator().manual_seed(round_index),
            BATCH,
            spec.verifier.uniforms(count, LENGTH),
            torch.device("cpu"),
        )
        eager = spec.verifier.decide(paths, p, q, u, carry)
        assert_same_verdict(eager, compiled(paths, p, q, u, carry))
        carry = eager.carry


@pytest.mark.parametrize("name", PATH_ALGORITHMS)
def test_the_captured_form_decodes_the_eager_tokens(name: str) -> None:
    """`verify.captured.CapturedPaths` with its graphs off: the decision reads its inputs and the previous
    round's carry from the buffers a graph would replay over, in the GPU's static forms, and the toy pair
    decodes what the verifier itself decodes, rows leaving the batch (new shapes) and carries crossing
    rounds. The graphs themselves are checked in tests/gpu/test_verify_cuda.py."""
    made: list[CapturedPaths] = []

    def replay(verifier: DrawnPathVerifier) -> CapturedPaths:
        made.append(CapturedPaths(verifier, Graphs(enabled=False)))
        return made[-1]

    s = settings(K=3, L=3, T=1.0, batch=4, max_new=10)
    plain = decode(*toy_roles(1), get_verifier(name), TOY_PROMPTS, s)
    with device_form():
        captured = decode(*toy_roles(1), get_verifier(name, replay=replay), TOY_PROMPTS, s)
    assert [p.tokens for p in captured.prompts] == [p.tokens for p in plain.prompts]
    (form,) = made
    assert len(form.buffers) >= 2  # one set of buffers per shape: rows left, or a carry came back


def test_a_run_replays_its_path_verifier_only_where_asked() -> None:
    """`model.capture_verifier` with capture on a GPU gives "graphs"; elsewhere the verifier runs as it is."""
    assert replayed("eager") is None
    replay = replayed("static")
    assert replay is not None
    form = replay(ALGORITHMS["gbv"].verifier)
    assert isinstance(form, CapturedPaths) and not form.graphs.enabled
    assert [passes_on("cuda", True and on) for on in (True, False)] == ["graphs", "eager"]
    assert passes_on("cpu", True) == "eager" and Config().model.capture_verifier is False


def test_a_carry_crosses_a_graph_as_its_tensors_and_its_kind() -> None:
    """A carry's tensors go in and out of a graph; its class, shapes and other fields key the graph."""
    carry = ModifiedTarget(
        torch.rand(2, 3, dtype=torch.float64),
        torch.rand(2, 3, dtype=torch.float64),
        torch.zeros(2, 3, dtype=torch.int64),
        power=4,
    )
    tensors, kind = carry_parts(carry)
    assert [t is getattr(carry, name) for t, name in zip(tensors, ("a", "s", "remaining"), strict=True)] == [True] * 3
    assert kind == carry_parts(ModifiedTarget(*(t.clone() for t in tensors), power=4))[1]
    assert kind != carry_parts(ModifiedTarget(*tensors, power=1))[1]
    rebuilt = carry_from(kind, tuple(t.clone() for t in tensors))
    assert isinstance(rebuilt, ModifiedTarget) and rebuilt.power == 4 and torch.equal(rebuilt.a, carry.a)
    assert carry_parts(None) == ((), None) and carry_from(None, ()) is None


def test_compiled_ddtree_walk_gives_the_eager_verdict() -> None:
    gen = torch.Generator().manual_seed(7)
    vocab = 5
    marginals = torch.softmax(torch.randn(BATCH, LENGTH, vocab, generator=gen) * 2, dim=-1)
    tree = best_first_tree(marginals, torch.randint(0, vocab, (BATCH,), generator=gen), 6)
    table = torch.softmax(torch.randn(vocab, vocab, generator=gen) * 2, dim=-1)
    p = table[tree.tokens]  # [B, N, V] a bigram target at every node
    u = draw_uniforms(gen, BATCH, LENGTH + 1, torch.device("cpu"))
    compiled = torch.compile(ddtree_walk_decision, fullgraph=True, backend="eager", dynamic=False)
    assert_same_verdict(ddtree_walk_decision(tree, p, u), compiled(tree, p, u))
