"""Drafting ahead (`speculab.drafting.ahead`, SSD): the fan-out, the guesses, and the two facts its
losslessness rests on. A cached draft is the draft of the verdict it guessed: for every verdict of a round
(every accepted length, every added token) on a toy draft, the next round's tokens and q drafted ahead are
exactly those the synchronous draft gives after that verdict, with the same uniforms; a verdict not
guessed drafts with the same uniforms too. The whole decode is then the synchronous decode: the same
tokens at T = 0 and T = 1, on the toy pair (exact arithmetic) and on the tiny transformer pair, where the
forest passes stand in for the synchronous feeds."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from speculab.core.engine import DecodeSettings, decode
from speculab.drafting.ahead import AcceptanceRate, Ahead, AheadDrafter, fan_out, guessed, stop_probabilities
from speculab.drafting.sampling import SamplingParams
from speculab.models import DraftModel, LMSpec, TreeTarget
from speculab.models.toy import random_bigram
from speculab.registry import get_verifier
from speculab.results.figures import run_figures
from support.engine import TOY_PROMPTS
from support.models import TINY_PAIR


@pytest.mark.parametrize("length", [1, 4, 8])
@pytest.mark.parametrize("budget", [1, 3, 9, 24])
@pytest.mark.parametrize("shape", ["geometric", "uniform"])
def test_the_fan_out_spends_the_budget_on_the_likelier_stops(length: int, budget: int, shape: str) -> None:
    fan = fan_out(budget, length, 0.7, shape)
    assert len(fan) == length + 1 and sum(fan) == budget and min(fan) >= (1 if budget >= length + 1 else 0)
    if shape == "geometric" and budget >= 3 * (length + 1):
        stops = stop_probabilities(length, 0.7)
        likelier = sorted(range(length + 1), key=lambda k: -stops[k])
        assert fan[likelier[0]] >= fan[likelier[-1]]  # the likeliest stop gets at least the unlikeliest's share
    if shape == "uniform":
        assert max(fan) - min(fan) <= 1


def test_the_acceptance_rate_starts_at_its_prior_and_follows_the_rounds() -> None:
    rate = AcceptanceRate(4)
    assert rate.rate == 0.5
    rate.add([4, 4, 4])  # three rows accept all four
    assert rate.rate == pytest.approx((12 + 2) / (12 + 4))


def test_a_correction_guess_is_never_the_token_it_replaces() -> None:
    rankings = torch.tensor([[[5.0, 4.0, 3.0, 0.0], [0.0, 9.0, 8.0, 1.0], [1.0, 2.0, 3.0, 4.0]]])  # [1, L+1, V]
    drafted = torch.tensor([[0, 1]])  # d_1 = 0, d_2 = 1
    guesses = guessed(rankings, drafted, [2, 1, 2])
    assert guesses.k.tolist() == [0, 0, 1, 2, 2]
    assert guesses.x.tolist() == [[1, 2, 2, 3, 2]]  # k = 0: not 0; k = 1: not 1; k = L: the draft's top two


def toy_draft(seed: int) -> tuple[DraftModel, torch.Tensor]:
    table = random_bigram(5, torch.Generator().manual_seed(seed))
    return DraftModel(LMSpec("toy", table=table)), table


def next_draft(seed: int, sampling: SamplingParams, verdict: list[int] | None, ahead: bool, L: int = 3):
    """The second round's proposal of a toy draft after the first round's `verdict` (its committed tokens,
    or the first round's path accepted whole plus token 0 when None), drafted ahead (every verdict guessed)
    or not; and the first round's path."""
    draft, _ = toy_draft(11)
    draft.prefill([[1, 2]], [3], seed)
    first = draft.propose(1, L, sampling)
    if ahead:
        draft.speculate(first.paths, [5] * (L + 1), sampling)  # five guesses a stop: every token the vocabulary has
    path = first.paths[0, 0].tolist()
    draft.commit([verdict if verdict is not None else [*path, 0]])
    return draft.propose(1, L, sampling), path


@pytest.mark.parametrize("temperature", [1.0, 0.6, 0.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_cached_draft_is_the_synchronous_draft_of_its_verdict(temperature: float, seed: int) -> None:
    sampling = SamplingParams(temperature)
    _, path = next_draft(seed, sampling, None, ahead=False)
    verdicts = [[*path[:k], x] for k in range(len(path) + 1) for x in range(5) if k == len(path) or x != path[k]]
    hits = 0
    for verdict in verdicts:
        cached, _ = next_draft(seed, sampling, verdict, ahead=True)
        alone, _ = next_draft(seed, sampling, verdict, ahead=False)
        assert torch.equal(cached.paths, alone.paths) and torch.equal(cached.q, alone.q), verdict
        assert torch.equal(cached.tree.tokens, alone.tree.tokens)
        hits += bool(cached.ahead_hit)
    assert hits == len(verdicts)  # five guesses a stop guess every verdict a round can have


def test_a_verdict_not_guessed_drafts_with_the_same_uniforms() -> None:
    sampling = SamplingParams(1.0)
    draft, _ = toy_draft(11)
    draft.prefill([[1, 2]], [3], 5)
    first = draft.propose(1, 3, sampling)
    draft.speculate(first.paths, [0, 0, 0, 1], sampling)  # one guess: the whole path accepted
    path = first.paths[0, 0].tolist()
    miss = [(path[0] + 1) % 5]  # the first token rejected
    draft.commit([miss])
    missed = draft.propose(1, 3, sampling)
    alone, _ = next_draft(5, sampling, miss, ahead=False)
    assert missed.ahead_hit is False and missed.ahead_drafts == 1
    assert torch.equal(missed.paths, alone.paths) and torch.equal(missed.q, alone.q)


def decoded(target: TreeTarget, draft: DraftModel, prompts, settings: DecodeSettings, ahead: int, name: str):
    drafter = AheadDrafter(draft, Ahead(ahead), settings.length) if ahead else draft
    return decode(target, drafter, get_verifier(name), prompts, settings)


@pytest.mark.parametrize("name", ["token", "block"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_toy_decode_drafted_ahead_is_the_synchronous_decode(name: str, temperature: float) -> None:
    g = torch.Generator().manual_seed(4)
    tables = random_bigram(6, g), random_bigram(6, g)
    settings = DecodeSettings(1, 3, SamplingParams(temperature), 24, 2, 7, None, 4)
    runs = [
        decoded(
            TreeTarget(LMSpec("toy", table=tables[0])),
            DraftModel(LMSpec("toy", table=tables[1])),
            TOY_PROMPTS,
            settings,
            budget,
            name,
        )
        for budget in (0, 12)
    ]
    assert [p.tokens for p in runs[1].prompts] == [p.tokens for p in runs[0].prompts]
    assert [p.accepted for p in runs[1].prompts] == [p.accepted for p in runs[0].prompts]
    hits = [r.ahead_hit for r in runs[1].rounds if r.ahead_hit is not None]
    assert hits and any(hits)


def test_a_units_guesses_do_not_depend_on_the_units_decoded_before_it() -> None:
    """The geometric fan-out follows the acceptance of the unit being decoded, from its prefill on: a drafter
    that has decoded other prompts guesses the same verdicts, round by round, as a fresh one."""
    g = torch.Generator().manual_seed(5)
    tables = random_bigram(6, g), random_bigram(6, g)
    settings = DecodeSettings(1, 3, SamplingParams(1.0), 24, 2, 7, None, 4)
    target, draft = TreeTarget(LMSpec("toy", table=tables[0])), DraftModel(LMSpec("toy", table=tables[1]))
    used = AheadDrafter(draft, Ahead(12), settings.length)
    agreeing = TreeTarget(LMSpec("toy", table=tables[1]))  # accepts every drafted token: a rate near 1 before
    decode(agreeing, used, get_verifier("block"), TOY_PROMPTS[::-1], replace(settings, max_new_tokens=96))
    again = decode(target, used, get_verifier("block"), TOY_PROMPTS, settings)
    fresh = decode(target, AheadDrafter(draft, Ahead(12), 3), get_verifier("block"), TOY_PROMPTS, settings)
    assert [r.ahead_hit for r in again.rounds] == [r.ahead_hit for r in fresh.rounds]
    assert [p.tokens for p in again.prompts] == [p.tokens for p in fresh.prompts]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_tiny_pair_drafted_ahead_decodes_the_synchronous_tokens(temperature: float) -> None:
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, 60, (n,), generator=g).tolist() for n in (6, 19, 12, 9)]
    settings = DecodeSettings(1, 4, SamplingParams(temperature), 24, 1, 0, None, 5)
    target = TreeTarget(LMSpec("hf", str(TINY_PAIR / "target")))
    draft = DraftModel(LMSpec("hf", str(TINY_PAIR / "draft")))
    alone = decoded(target, draft, prompts, settings, 0, "block")
    ahead = decoded(target, draft, prompts, settings, 8, "block")
    assert [p.tokens for p in ahead.prompts] == [p.tokens for p in alone.prompts]
    figures = run_figures(ahead)
    assert 0 < figures["ahead_hit_rate"].value <= 1 and figures["ahead_drafts_per_round"].value == 8
    assert "ahead_hit_rate" not in run_figures(alone)
