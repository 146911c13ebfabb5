"""Paired comparison (`algorithm.compare`): decoding is untouched, each verifier's mean accepted
length converges to its exact expectation on the same drafts, the sums are kept per prompt, and the
figures are ratios of those sums with the verdict rule of `results.verdicts`."""

from __future__ import annotations

import pytest
import torch

from speculab.core.engine import decode
from speculab.core.paired import PairedComparison, PromptSums
from speculab.registry import get_reference, get_verifier
from speculab.results.figures import paired_figures
from speculab.results.verdicts import Call, compared
from speculab.show.console import plain
from speculab.show.summary import paired_table
from speculab.verify.exact import ToyModel, expected_accepted, round_outcomes
from support.engine import TOY_PROMPTS, settings, toy_roles


def test_decoding_is_the_same_with_and_without_the_comparison() -> None:
    target, drafter = toy_roles(3)
    plain_run = decode(target, drafter, get_verifier("block"), TOY_PROMPTS, settings(K=1, T=1.0, max_new=20))
    paired = PairedComparison({"block": get_verifier("block"), "token": get_verifier("token")}, 4, 1, len(TOY_PROMPTS))
    with_it = decode(
        target, drafter, get_verifier("block"), TOY_PROMPTS, settings(K=1, T=1.0, max_new=20), None, paired
    )
    assert [p.tokens for p in with_it.prompts] == [p.tokens for p in plain_run.prompts]
    sums = paired.sums()
    assert sums.rounds.tolist() == [float(len(p.accepted)) for p in with_it.prompts]  # every round, by prompt
    assert set(sums.accepted) == {"block", "token"} and sums.accepted["token"].shape == (len(TOY_PROMPTS),)
    assert with_it.paired_s == pytest.approx(sum(r.time_paired_s for r in with_it.rounds)) and with_it.paired_s > 0


@pytest.mark.parametrize("name", ["token", "block", "gbv"])
def test_mean_accepted_converges_to_the_exact_expectation(name: str) -> None:
    """One context, its drafts fixed per row: averaged over many rows (each its own prompt), the
    collected mean is the verifier's exact expected accepted length (enumerated by verify.exact)."""
    target, draft = ToyModel(3, 11, "free"), ToyModel(3, 12, "free")
    paths_k, length, rows = 2, 2, 4000
    exact = expected_accepted(round_outcomes(get_reference(name), target, draft, paths_k, length))
    gen = torch.Generator().manual_seed(5)
    q_row, p_row = draft(()), target(())
    drafted = torch.multinomial(q_row, rows * paths_k * length, replacement=True, generator=gen)
    paths = drafted.view(rows, paths_k, length)
    p = p_row.expand(rows, paths_k, length + 1, -1)
    q = q_row.expand(rows, paths_k, length, -1)
    comparison = PairedComparison({name: get_verifier(name)}, repeats=4, seed=2, prompts=rows)
    comparison(paths, p, q, list(range(rows)))
    found = paired_figures(comparison.sums(), name)[f"compare/{name}/accepted_mean"]
    assert found.has_interval and found.low < exact < found.high


def test_paired_figures_are_ratios_of_sums_paired_by_prompt() -> None:
    """Twelve prompts, two verifiers on the same drafts: token accepts 0.8 of what block does on each."""
    rounds = torch.tensor([4.0, 2.0, 6.0, 3.0, 5.0, 4.0, 2.0, 3.0, 4.0, 5.0, 2.0, 3.0], dtype=torch.float64)
    block = rounds * torch.tensor([1.5, 2.0, 1.0, 2.5, 1.5, 1.0, 2.0, 1.5, 1.0, 2.0, 1.5, 1.5], dtype=torch.float64)
    token = (block + rounds) * 0.8 - rounds
    sums = PromptSums(rounds, {"block": block, "token": token})
    figures = paired_figures(sums, "block")
    assert figures["compare/block/accepted_mean"].value == pytest.approx(float(block.sum() / rounds.sum()))
    assert figures["compare/block/acceptance_length"].value == pytest.approx(1 + float(block.sum() / rounds.sum()))
    assert figures["compare/token/relative"].value == pytest.approx(0.8) and "compare/block/relative" not in figures
    verdicts = compared(sums, "block")
    assert list(verdicts) == ["token"] and verdicts["token"].call is Call.BELOW  # the same ratio on every prompt
    table = plain(paired_table(figures, "block", 4, verdicts))
    assert "over block" in table and "lower" in table and "algorithm.compare's verifiers, 1 test" in table


def test_few_prompts_give_a_standard_error_and_no_verdict() -> None:
    rounds = torch.tensor([4.0, 2.0, 6.0], dtype=torch.float64)
    sums = PromptSums(rounds, {"block": rounds * 1.5, "token": rounds * torch.tensor([1.0, 1.4, 0.9])})
    relative = paired_figures(sums, "block")["compare/token/relative"]
    assert relative.has_se and not relative.has_interval
    assert compared(sums, "block")["token"].call is Call.TOO_FEW
