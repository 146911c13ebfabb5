"""The decoding loop on toy and random-weight models: greedy equivalence, truncation, seeds."""

from __future__ import annotations

import math

import pytest

from speculab.core.autoregressive import autoregressive
from speculab.core.engine import decode
from speculab.models import DraftModel, LMSpec, TreeTarget
from speculab.registry import get_verifier
from support.engine import PROMPTS, TOY_PROMPTS, greedy_reference, settings, toy_roles


@pytest.mark.parametrize("verifier", ["token", "block"])
@pytest.mark.parametrize("same_draft", [False, True])
def test_greedy_speculative_equals_autoregressive(random_llama_pair, verifier: str, same_draft: bool) -> None:
    target_path, draft_path = (str(p) for p in random_llama_pair)
    target = TreeTarget(LMSpec("hf", target_path))
    drafter = DraftModel(LMSpec("hf", target_path if same_draft else draft_path))
    s = settings()
    spec = decode(target, drafter, get_verifier(verifier), PROMPTS, s)
    ar = autoregressive(target, PROMPTS, s)
    assert [p.tokens for p in spec.prompts] == [p.tokens for p in ar.prompts]
    assert spec.prompts[0].tokens == greedy_reference(target_path, PROMPTS[0], s.max_new_tokens)
    if same_draft:  # draft = target: every greedy draft token is accepted
        assert all(tau == 3 for r in spec.rounds for tau in r.accepted)
        assert sum(len(p.accepted) for p in spec.prompts) == len(PROMPTS) * 3  # 12 tokens / (3 + 1) per round


def test_batch_size_does_not_change_greedy_output(random_llama_pair) -> None:
    target = TreeTarget(LMSpec("hf", str(random_llama_pair[0])))
    drafter = DraftModel(LMSpec("hf", str(random_llama_pair[1])))
    outs = [
        [p.tokens for p in decode(target, drafter, get_verifier("block"), PROMPTS, settings(batch=b)).prompts]
        for b in (1, 3, 4)
    ]
    assert outs[0] == outs[1] == outs[2]


def test_same_seed_same_output_and_different_seed_differs() -> None:
    target, drafter = toy_roles()
    runs = [
        [
            p.tokens
            for p in decode(
                target, drafter, get_verifier("block"), TOY_PROMPTS, settings(T=1.0, seed=s, max_new=30)
            ).prompts
        ]
        for s in (7, 7, 8)
    ]
    assert runs[0] == runs[1] != runs[2]


def test_eos_and_max_new_tokens_truncate() -> None:
    target, drafter = toy_roles(1)
    run = decode(target, drafter, get_verifier("token"), TOY_PROMPTS, settings(T=1.0, max_new=25, eos=5, L=4))
    for prompt in run.prompts:
        assert len(prompt.tokens) <= 25
        if prompt.stop == "eos":
            assert prompt.tokens[-1] == 5 and 5 not in prompt.tokens[:-1]
        else:
            assert prompt.stop == "max_new_tokens" and len(prompt.tokens) == 25 and 5 not in prompt.tokens
    assert sum(r.kept[i] for r in run.rounds for i in range(r.rows)) == sum(len(p.tokens) for p in run.prompts)


def test_records_and_timings_are_consistent() -> None:
    target, drafter = toy_roles(2)
    run = decode(target, drafter, get_verifier("block"), TOY_PROMPTS, settings(T=1.0, K=3, L=2, max_new=20))
    assert sum(r.rows for r in run.rounds) == sum(len(p.accepted) for p in run.prompts)
    for r in run.rounds:
        assert all(1 <= n <= 1 + 3 * 2 for n in r.tree_nodes)
        assert all(0 <= tau <= 2 for tau in r.accepted)
        # time_other_s is the round's wall time less its phases, clamped at 0: the bookkeeping between
        # the phases always leaves some, so 0 means that the phases overran the round (one counted twice).
        assert min(r.time_draft_s, r.time_target_s, r.time_verify_s, r.time_other_s) > 0
    assert run.prefill_target_s > 0 and run.prefill_draft_s > 0  # not folded into a round's phases
    phases = sum(r.time_draft_s + r.time_target_s + r.time_verify_s + r.time_other_s for r in run.rounds)
    # The rounds and the prefills are disjoint spans of the run: at most its wall time, and nearly all of
    # it (about 99 % on the toy pair: only the steps between rounds are left), so time no record claims
    # (a batch's rounds lost, a phase outside every round) shows.
    assert 0.75 * run.wall_s < run.prefill_target_s + run.prefill_draft_s + phases <= run.wall_s


def test_first_position_acceptance_agrees_with_the_overlap_of_p_and_q() -> None:
    """One sampled path: the first token is accepted with probability sum_x min(p, q), so over
    many rounds the observed rate sits within sampling error of the logged overlap."""
    from speculab.results.figures import first_position

    target, drafter = toy_roles(3)
    run = decode(target, drafter, get_verifier("token"), TOY_PROMPTS * 10, settings(T=1.0, K=1, L=3, max_new=40))
    metrics = first_position(run)
    rounds = sum(r.rows for r in run.rounds)
    overlap = metrics["first_overlap_mean"]
    assert rounds > 500 and 0.05 < overlap < 0.95
    assert abs(metrics["first_accept_rate"] - overlap) < 4 * (overlap * (1 - overlap) / rounds) ** 0.5
    assert 0 < metrics["first_entropy_target"] <= math.log(6) and 0 < metrics["first_entropy_draft"] <= math.log(6)
    assert first_position(autoregressive(target, TOY_PROMPTS, settings(T=1.0))) == {}
