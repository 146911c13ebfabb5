"""Issue 2's certificate: token and block verification are lossless on context-free and bigram
toy models over a 3-token vocabulary (every draft sample and random decision enumerated)."""

from __future__ import annotations

import pytest

from speculab.verify.block import block_verify_reference, token_verify_reference
from speculab.verify.exact import (
    ToyModel,
    decode_distribution,
    extended_distribution,
    max_difference,
    round_outcomes,
    target_distribution,
)

REFERENCES = {"token": token_verify_reference, "block": block_verify_reference}


@pytest.mark.parametrize("name", ["token", "block"])
@pytest.mark.parametrize("context", ["free", "bigram"])
@pytest.mark.parametrize("length", [1, 2, 3])
@pytest.mark.parametrize("zeros", [False, True])
def test_next_l_plus_one_tokens_follow_the_target(name: str, context: str, length: int, zeros: bool) -> None:
    target, draft = ToyModel(3, 11, context, zeros), ToyModel(3, 12, context, zeros)
    outcomes = round_outcomes(REFERENCES[name], target, draft, 1, length)
    exact = extended_distribution(outcomes, target, length + 1)
    assert max_difference(exact, target_distribution(target, length + 1)) < 1e-9


@pytest.mark.parametrize("name", ["token", "block"])
@pytest.mark.parametrize("context", ["free", "bigram"])
def test_several_rounds_of_decoding_follow_the_target(name: str, context: str) -> None:
    target, draft = ToyModel(3, 21, context), ToyModel(3, 22, context)
    exact = decode_distribution(REFERENCES[name], target, draft, 1, 2, 5)
    assert max_difference(exact, target_distribution(target, 5)) < 1e-9
