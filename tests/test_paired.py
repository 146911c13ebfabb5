"""Paired comparison (`algorithm.compare`): decoding is untouched, each verifier's mean accepted
length converges to its exact expectation on the same drafts, and the statistics are the paired ones."""

from __future__ import annotations

import pytest
import torch

from speculab.algorithms import get_reference, get_verifier
from speculab.engine import decode
from speculab.paired import PairedComparison
from speculab.results.figures import paired_figures
from speculab.stats import mean_estimate
from speculab.tracking.summary import paired_table
from speculab.verify.exact import ToyModel, expected_accepted, round_outcomes
from support.engine import TOY_PROMPTS, settings, toy_roles


def test_decoding_is_the_same_with_and_without_the_comparison() -> None:
    target, drafter = toy_roles(3)
    plain = decode(target, drafter, get_verifier("block"), TOY_PROMPTS, settings(K=1, T=1.0, max_new=20))
    paired = PairedComparison({"block": get_verifier("block"), "token": get_verifier("token")}, 4, seed=1)
    with_it = decode(
        target, drafter, get_verifier("block"), TOY_PROMPTS, settings(K=1, T=1.0, max_new=20), None, paired
    )
    assert [p.tokens for p in with_it.prompts] == [p.tokens for p in plain.prompts]
    units = paired.units()
    assert units["block"].numel() == units["token"].numel() == sum(r.rows for r in with_it.rounds)
    assert with_it.paired_s == pytest.approx(sum(r.time_paired_s for r in with_it.rounds)) and with_it.paired_s > 0


@pytest.mark.parametrize("name", ["token", "block", "gbv"])
def test_mean_accepted_converges_to_the_exact_expectation(name: str) -> None:
    """One context, its drafts fixed per unit: averaged over many units, the collected mean is
    the verifier's exact expected accepted length (enumerated by verify.exact)."""
    target, draft = ToyModel(3, 11, "free"), ToyModel(3, 12, "free")
    paths_k, length, units = 2, 2, 4000
    exact = expected_accepted(round_outcomes(get_reference(name), target, draft, paths_k, length))
    gen = torch.Generator().manual_seed(5)
    q_row, p_row = draft(()), target(())
    drafted = torch.multinomial(q_row, units * paths_k * length, replacement=True, generator=gen)
    paths = drafted.view(units, paths_k, length)
    p = p_row.expand(units, paths_k, length + 1, -1)
    q = q_row.expand(units, paths_k, length, -1)
    comparison = PairedComparison({name: get_verifier(name)}, repeats=4, seed=2)
    comparison(paths, p, q)
    found = mean_estimate(comparison.units()[name].tolist())
    assert abs(found.value - exact) < 4 * found.se


def test_paired_figures_are_differences_unit_by_unit() -> None:
    units = {"block": torch.tensor([1.0, 2.0, 3.0, 4.0]), "token": torch.tensor([0.5, 2.0, 2.5, 4.0])}
    figures = paired_figures(units, "block")
    assert figures["compare/block/block_efficiency"].value == pytest.approx(3.5)
    diff = figures["compare/token/diff_block_efficiency"]
    diffs = torch.tensor([-0.5, 0.0, -0.5, 0.0])
    assert diff.value == pytest.approx(-0.25) and diff.se == pytest.approx(float(diffs.std() / 2))
    assert "compare/block/diff_block_efficiency" not in figures
    assert [str(c.header) for c in paired_table(figures, "block", 4).columns][-1] == "minus block"
