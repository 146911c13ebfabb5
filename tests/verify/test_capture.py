"""Issue 26: every batched verifier is one capturable graph for fixed shapes.

``torch.compile(decide, fullgraph=True)`` fails on any graph break (a host read, a shape chosen
by data), so passing here means no host synchronisation inside a call. Traced, the verifiers
take their static-shape form (`hostreads.reads_free` is False); eager on the CPU they
prune finished rows and sparse sets. Both must give the same verdict for the same uniforms.
The "eager" backend keeps compiling cheap; what is checked is the trace, not the kernels.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from speculab.algorithms import ALGORITHMS, PATH_ALGORITHMS
from speculab.drafting.best_first import best_first_tree
from speculab.verify.contracts import DrawnPathVerifier
from speculab.verify.ddtree_walk import ddtree_walk_decision
from speculab.verify.decisions import draw_uniforms
from speculab.verify.verdict import Verdict
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
