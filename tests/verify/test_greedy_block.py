"""Greedy block verification (BV App. C, Alg. 4-6): carry, Lemma 8-9, Thm 3, agreement."""

from __future__ import annotations

import pytest
import torch

from speculab.verify.block import block_verify_reference
from speculab.verify.decisions import draw_uniforms
from speculab.verify.exact import (
    ToyModel,
    acceptance_bound,
    decode_distribution,
    expected_accepted,
    max_difference,
    round_outcomes,
    target_distribution,
)
from speculab.verify.greedy_block import greedy_block_verify, greedy_block_verify_reference
from speculab.verify.modification import ModifiedTarget, modify_path
from support.toy_instances import assert_greedy_matching, replay_reference, sample_batch, toy_pair

PAIRS = [  # (vocab, length, context, zeros, one_hot)
    (2, 2, "full", False, False),
    (3, 2, "full", True, False),
    (2, 3, "bigram", False, False),
    (3, 2, "full", False, True),
]


def modified_continuation(
    carry: ModifiedTarget, target: ToyModel, draft: ToyModel, context: tuple[int, ...], count: int
) -> dict[tuple[int, ...], float]:
    """Exact distribution of ``count`` tokens sampled from the carried modified target (Alg. 5)."""
    dist = {(): 1.0}
    for t in range(count):
        grown = {}
        for prefix, prob in dist.items():
            tokens = torch.tensor([prefix + (0,)])
            rows = [target(context + prefix[:i]) for i in range(t + 2)]
            qs = [draft(context + prefix[:i]) for i in range(t + 1)]
            row = modify_path(carry, tokens, torch.stack(rows)[None], torch.stack(qs)[None]).p[0, t]
            for x in range(target.vocab):
                if row[x] > 0:
                    grown[prefix + (x,)] = prob * float(row[x])
        dist = grown
    return dist


def test_section2_example_greedy_accepts_more_but_modifies_target() -> None:
    """BV App. C: on the Section 2 example greedy accepts 12/9 in one round."""
    target = ToyModel(2, 0, "free", table=(1 / 3, 2 / 3))
    draft = ToyModel(2, 0, "free", table=(2 / 3, 1 / 3))
    outcomes = round_outcomes(greedy_block_verify_reference, target, draft, 1, 2)
    assert expected_accepted(outcomes) == pytest.approx(12 / 9, abs=1e-12)


@pytest.mark.parametrize("pair", PAIRS)
def test_lemma9_and_theorem3_one_round(pair: tuple) -> None:
    vocab, length, context, zeros, one_hot = pair
    target, draft = toy_pair(vocab, context, zeros, one_hot, seed=13 + vocab)
    greedy = expected_accepted(round_outcomes(greedy_block_verify_reference, target, draft, 1, length))
    block = expected_accepted(round_outcomes(block_verify_reference, target, draft, 1, length))
    assert greedy == pytest.approx(acceptance_bound(target, draft, length), abs=1e-10)
    assert greedy >= block - 1e-12


@pytest.mark.parametrize("pair", PAIRS)
def test_lemma8_modified_continuation_matches_target(pair: tuple) -> None:
    """(X^tau, Y, Z^{L-tau-1}) with Z from the modified target is distributed as the target."""
    vocab, length, context, zeros, one_hot = pair
    target, draft = toy_pair(vocab, context, zeros, one_hot, seed=17 + vocab)
    exact: dict[tuple[int, ...], float] = {}
    for outcome in round_outcomes(greedy_block_verify_reference, target, draft, 1, length):
        head = outcome.tokens[:length]  # Lemma 8 is about the first L = gamma tokens
        tail = modified_continuation(outcome.carry, target, draft, head, length - len(head))
        for z, prob in tail.items():
            key = head + z
            exact[key] = exact.get(key, 0.0) + outcome.prob * prob
    assert max_difference(exact, target_distribution(target, length)) < 1e-9


@pytest.mark.parametrize("pair,tokens", [(PAIRS[0], 5), (PAIRS[1], 4), (PAIRS[2], 5)])
def test_certificate_several_rounds(pair: tuple, tokens: int) -> None:
    vocab, length, context, zeros, one_hot = pair
    target, draft = toy_pair(vocab, context, zeros, one_hot, seed=19 + vocab)
    exact = decode_distribution(greedy_block_verify_reference, target, draft, 1, length, tokens)
    assert max_difference(exact, target_distribution(target, tokens)) < 1e-9


def test_without_carry_the_output_is_biased() -> None:
    """BV App. C eq. 30: dropping the modification breaks losslessness (the carry matters)."""
    target = ToyModel(2, 0, "free", table=(1 / 3, 2 / 3))
    draft = ToyModel(2, 0, "free", table=(2 / 3, 1 / 3))

    def forgetful(paths, p, q, decisions, carry=None):
        verdict = greedy_block_verify_reference(paths, p, q, decisions)
        verdict.carry = None
        return verdict

    exact = decode_distribution(forgetful, target, draft, 1, 2, 2)
    assert exact[(1, 0)] == pytest.approx(1 / 3, abs=1e-12)  # the target's is 2/3 x 1/3 = 2/9


@pytest.mark.parametrize("zeros,one_hot", [(False, False), (True, False), (False, True)])
def test_batched_equals_reference_over_rounds(zeros: bool, one_hot: bool) -> None:
    target, draft = toy_pair(5, "full", zeros, one_hot, seed=23)
    batched_carry, reference_carry = None, [None] * 48
    for round_index in range(3):
        paths, p, q = sample_batch(target, draft, batch=48, paths=1, length=4, seed=round_index)
        verdict = greedy_block_verify(paths, p, q, rng=torch.Generator().manual_seed(round_index), carry=batched_carry)
        uniforms = draw_uniforms(torch.Generator().manual_seed(round_index), 48, 5, p.device)
        expected = replay_reference(greedy_block_verify_reference, paths, p, q, uniforms, reference_carry)
        assert verdict.rows() == [v.rows()[0] for v in expected]
        for field in ("a", "s", "remaining"):
            stacked = torch.cat([getattr(v.carry, field) for v in expected])
            torch.testing.assert_close(getattr(verdict.carry, field), stacked, rtol=1e-9, atol=1e-12)
        batched_carry, reference_carry = verdict.carry, [v.carry for v in expected]


def test_carry_select_keeps_rows() -> None:
    carry = ModifiedTarget(
        torch.rand(4, 3, dtype=torch.float64),
        torch.rand(4, 3, dtype=torch.float64),
        torch.arange(12).reshape(4, 3),
        power=2,
    )
    kept = carry.select(torch.tensor([3, 1]))
    assert kept.remaining.tolist() == [[9, 10, 11], [3, 4, 5]]
    assert kept.power == 2 and kept.a.shape == (2, 3)


def test_temperature_zero_is_greedy_matching_over_rounds() -> None:
    target, draft = toy_pair(6, "full", False, True, seed=2)
    carry = None
    for round_index in range(3):
        paths, p, q = sample_batch(target, draft, batch=32, paths=1, length=4, seed=round_index)
        verdict = greedy_block_verify(paths, p, q, rng=torch.Generator().manual_seed(0), carry=carry)
        assert_greedy_matching(verdict, paths, p)
        carry = verdict.carry
