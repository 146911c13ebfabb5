"""Token and block verification (BV paper Alg. 1-2): exact certificates and agreement."""

from __future__ import annotations

import pytest
import torch

from speculab.registry import PATH_ALGORITHMS, get_verifier
from speculab.verify import Verdict
from speculab.verify.block import block_verify, block_verify_reference, token_verify, token_verify_reference
from speculab.verify.decisions import draw_uniforms
from speculab.verify.exact import (
    ToyModel,
    decode_distribution,
    expected_accepted,
    max_difference,
    round_outcomes,
    target_distribution,
)
from support.toy_instances import MULTI_PATH_INSTANCES, one_round_error, replay_reference, sample_batch, toy_pair

REFERENCES = {"token": token_verify_reference, "block": block_verify_reference}
BATCHED = {"token": token_verify, "block": block_verify}


def test_section2_example_expected_accepted_tokens() -> None:
    """BV paper Section 2: E[tau] = 10/9 (token) and 11/9 (block) at gamma = 2."""
    target = ToyModel(2, 0, "free", table=(1 / 3, 2 / 3))
    draft = ToyModel(2, 0, "free", table=(2 / 3, 1 / 3))
    token = round_outcomes(token_verify_reference, target, draft, 1, 2)
    block = round_outcomes(block_verify_reference, target, draft, 1, 2)
    assert expected_accepted(token) == pytest.approx(10 / 9, abs=1e-12)
    assert expected_accepted(block) == pytest.approx(11 / 9, abs=1e-12)


@pytest.mark.parametrize("name", ["token", "block"])
@pytest.mark.parametrize("instance", MULTI_PATH_INSTANCES)
def test_certificate_one_round_matches_target(name: str, instance: tuple) -> None:
    assert one_round_error(REFERENCES[name], instance, seed=7) < 1e-9


@pytest.mark.parametrize("name", ["token", "block"])
def test_certificate_decoding_four_tokens(name: str) -> None:
    target, draft = toy_pair(2, "full", True, False, seed=3)
    exact = decode_distribution(REFERENCES[name], target, draft, 1, 2, 4)
    assert max_difference(exact, target_distribution(target, 4)) < 1e-9


def test_block_accepts_at_least_token_in_expectation() -> None:
    target, draft = toy_pair(3, "full", False, False, seed=11)
    token = expected_accepted(round_outcomes(token_verify_reference, target, draft, 1, 3))
    block = expected_accepted(round_outcomes(block_verify_reference, target, draft, 1, 3))
    assert block >= token - 1e-12


@pytest.mark.parametrize("name", ["token", "block"])
@pytest.mark.parametrize("zeros,one_hot", [(False, False), (True, False), (False, True)])
def test_batched_equals_reference_for_identical_draws(name: str, zeros: bool, one_hot: bool) -> None:
    target, draft = toy_pair(5, "full", zeros, one_hot, seed=5)
    paths, p, q = sample_batch(target, draft, batch=64, paths=2, length=4, seed=1)
    verdict = BATCHED[name](paths, p, q, rng=torch.Generator().manual_seed(9))
    uniforms = draw_uniforms(torch.Generator().manual_seed(9), 64, 5, p.device)
    expected = replay_reference(REFERENCES[name], paths, p, q, uniforms)
    assert verdict.rows() == [v.rows()[0] for v in expected]
    assert verdict.path.tolist() == [0] * 64


@pytest.mark.parametrize("name", ["token", "block"])
def test_float32_zeros_and_one_hot_are_nan_free(name: str) -> None:
    gen = torch.Generator().manual_seed(0)
    p = torch.rand(16, 1, 4, 7, generator=gen) * (torch.rand(16, 1, 4, 7, generator=gen) < 0.4)
    p[..., 0] += 1e-30 * (p.sum(-1) == 0)  # keep every row a distribution
    p = p / p.sum(-1, keepdim=True)
    q = torch.nn.functional.one_hot(torch.randint(7, (16, 1, 3), generator=gen), 7).float()
    paths = q.argmax(-1)
    verdict = BATCHED[name](paths, p, q, rng=gen)
    assert ((verdict.tokens >= 0) | (verdict.tokens == -1)).all()
    assert (verdict.tokens.gather(1, verdict.tau.unsqueeze(1)) >= 0).all()


def test_get_verifier_unknown_name_lists_registry() -> None:
    with pytest.raises(ValueError, match="nope.*token"):
        get_verifier("nope")
    assert {"token", "block"} <= set(PATH_ALGORITHMS)


def test_verdict_make_dummy() -> None:
    verdict = Verdict.make_dummy([[3, 1], [2]], draft_length=3)
    assert verdict.tokens.tolist() == [[3, 1, -1, -1], [2, -1, -1, -1]]
    assert verdict.tau.tolist() == [1, 0]
    assert verdict.rows() == [[3, 1], [2]]
