"""Traversal verification (Weng et al. 2025): certificates, reduction to block, agreement."""

from __future__ import annotations

import pytest
import torch

from speculab.verify.block import block_verify_reference
from speculab.verify.decisions import draw_uniforms
from speculab.verify.exact import max_difference, round_outcomes
from speculab.verify.traversal import traversal_verify, traversal_verify_reference
from support.toy_instances import (
    MULTI_PATH_INSTANCES,
    instance_pair,
    one_round_error,
    replay_reference,
    sample_batch,
    toy_pair,
)

SINGLE_PATH = [
    (2, 3, 1, "full", False, False),
    (3, 2, 1, "full", True, False),
    (2, 3, 1, "bigram", False, False),
    (3, 2, 1, "full", False, True),
]


@pytest.mark.parametrize("instance", MULTI_PATH_INSTANCES)
def test_certificate_one_round_matches_target_for_iid_paths(instance: tuple) -> None:
    assert one_round_error(traversal_verify_reference, instance, seed=81) < 1e-9


@pytest.mark.parametrize("instance", SINGLE_PATH)
def test_single_path_is_block_verification(instance: tuple) -> None:
    """On a chain the traversal is BV Alg. 2: the same exact distribution of (tau, tokens)."""
    target, draft = instance_pair(instance, seed=83)
    length = instance[1]
    traversal = round_outcomes(traversal_verify_reference, target, draft, 1, length)
    block = round_outcomes(block_verify_reference, target, draft, 1, length)
    assert max_difference({o.tokens: o.prob for o in traversal}, {o.tokens: o.prob for o in block}) < 1e-12


@pytest.mark.parametrize(
    "vocab,paths,zeros,one_hot",
    [(3, 3, False, False), (3, 3, True, False), (5, 4, False, False), (4, 2, False, True), (5, 1, True, False)],
)
def test_batched_equals_reference_for_identical_draws(vocab: int, paths: int, zeros: bool, one_hot: bool) -> None:
    target, draft = toy_pair(vocab, "full", zeros, one_hot, seed=vocab + paths)
    tokens, p, q = sample_batch(target, draft, batch=48, paths=paths, length=3, seed=6)
    verdict = traversal_verify(tokens, p, q, rng=torch.Generator().manual_seed(2))
    uniforms = draw_uniforms(torch.Generator().manual_seed(2), 48, paths * 4 + 1, p.device)
    expected = replay_reference(traversal_verify_reference, tokens, p, q, uniforms)
    assert verdict.rows() == [v.rows()[0] for v in expected]
    assert verdict.path.tolist() == [int(v.path[0]) for v in expected]
