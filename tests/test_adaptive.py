"""`algorithm.L=auto` (`core.adaptive`): the estimator, the cost fit and the choice; the engine's rounds of any
length, 0 included, decoding what a fixed length decodes at T = 0; the config's refusals; the figures. The
law of the tokens under the policy is certified in tests/verify/test_adaptive_certificates.py."""

from __future__ import annotations

import math
from dataclasses import asdict, replace
from typing import Any

import pytest
import torch

from speculab.config import ConfigError, validate
from speculab.core.adaptive import (
    EXPLORE_EVERY,
    EXPLORE_TRIALS,
    EXPLORE_YOUNG,
    WARM_UP_TRIES,
    AdaptiveLength,
    Choice,
    CostFit,
    DepthCounts,
    Observed,
    Unread,
    expected_tokens,
    pending_positions,
)
from speculab.core.autoregressive import autoregressive
from speculab.core.engine import decode
from speculab.core.records import RunResult
from speculab.registry import ADAPTIVE_ALGORITHMS, get_algorithm, get_verifier
from speculab.results.figures import acceptance_by_depth, adaptive_figures
from speculab.results.point import PointShape
from speculab.tracking.runs import flat_params
from speculab.verify.modification import ModifiedTarget
from support.configs import load
from support.engine import TOY_PROMPTS, settings, toy_roles


def test_acceptance_counts_each_depth_a_round_drafted_and_reached() -> None:
    depths = DepthCounts(4)
    depths.observe(3, [0, 3, 1])  # rejected at depth 1; all three accepted; rejected at depth 2
    assert depths.trials == [3, 2, 1, 0] and depths.accepted == [2, 1, 1, 0]
    assert depths.pooled() == pytest.approx((4 + 0.8 * 2) / (6 + 2))
    assert depths.rates([0.5] * 4) == pytest.approx([(2 + 2) / 7, (1 + 2) / 6, (1 + 2) / 5, 0.5])
    depths.restart()
    assert depths.trials == [0] * 4


def test_a_fresh_unit_starts_from_the_units_before_it() -> None:
    policy = AdaptiveLength(4)
    assert policy.rates() == pytest.approx([0.8] * 4)  # nothing seen: the optimistic prior
    for _ in range(50):
        policy.observe(Observed(4, [0, 0]))  # units that reject at depth 1
    policy.restart()
    assert max(policy.rates()) < 0.2 and policy.depths.trials == [0] * 4


def test_expected_tokens_sums_the_chance_of_reaching_each_depth() -> None:
    assert expected_tokens([0.5, 0.5, 0.5]) == pytest.approx([1, 1.5, 1.75, 1.875])


def test_the_cost_fit_recovers_a_cost_by_length_and_rows() -> None:
    def cost(n: int, r: int) -> float:
        return 0.002 + 0.001 * (n > 0) + 0.0005 * n + 0.001 * r + 0.0002 * r * n

    fit = CostFit()
    for n in (0, 1, 2, 4, 8):
        for r in (1, 4, 16):
            fit.observe(n, r, cost(n, r))
    assert fit.ready
    assert fit.seconds(range(9), 8) == pytest.approx([cost(n, 8) for n in range(9)], rel=1e-4)


def _warmed(policy: AdaptiveLength, cost: float) -> AdaptiveLength:
    """`policy` past its warm-up, with rounds costing 1 + cost * L seconds (each length's first left out)."""
    for _ in range(WARM_UP_TRIES):
        for n in range(policy.longest + 1):
            policy.costs.observe(n, 1, 1 + cost * n)
            policy.choose(1)
    policy.chosen = 0  # the count of rounds chosen by the objective, from here (the next to explore: EXPLORE_YOUNG-th)
    return policy


def test_the_choice_follows_acceptance_and_costs() -> None:
    cheap = _warmed(AdaptiveLength(8), 0.01)
    cheap.restart()
    cheap.observe(Observed(8, [8, 8, 7]))  # accepting nearly everything: draft the longest
    assert cheap.choose(1).length == 8
    dear = _warmed(AdaptiveLength(8), 0.9)
    dear.observe(Observed(8, [0, 1, 0]))  # drafting costs as much as a target pass and is rejected: no drafting
    choice = dear.choose(1)
    assert choice == Choice(0, 1.0)


def test_the_warm_up_tries_each_of_its_lengths_twice_and_a_carry_starts_long() -> None:
    policy = AdaptiveLength(8)
    assert [policy.choose(1).length for _ in range(8)] == [8, 8, 0, 0, 1, 1, 4, 4]
    carried = AdaptiveLength(8, longest_first=True)
    assert [carried.choose(1, floor=3).length for _ in range(3)] == [8, 8, 4]  # 0 and 1 wait for a floor of 0
    assert carried.choose(1, floor=0).length == 0
    carried.restart()
    assert carried.choose(1).length == 8  # each prefill sizes a new carry


UNREAD = Unread(tokens=40, remaining=100)  # a unit the draft has not read


def test_a_drafting_length_pays_its_share_of_the_catch_up_where_the_draft_has_not_read_the_unit() -> None:
    """C / remaining seconds for each token a drafting round is expected to emit: worth it over a long rest,
    not over a short one; nothing where the catch-up was never measured or the draft has read the unit."""
    policy = _warmed(AdaptiveLength(4), 0.05)
    # drafting pays: L = 4 emits about 5 tokens for 1.2 s, L = 0 1 for 1 s
    policy.observe(Observed(4, [4] * EXPLORE_TRIALS))
    assert policy.choose(1, unread=UNREAD).length == 4  # no catch-up measured yet
    policy.catch_up.add(0.5)  # 0.5 s a token read: 20 s for the unit's 40 tokens
    assert policy.choose(1, unread=UNREAD).length == 4  # 0.2 s more a token over 100: about 0.45 s a token, < 1 s
    assert policy.choose(1, unread=Unread(40, remaining=10)).length == 0  # 2 s more a token: 2.3 s, > 1 s
    assert policy.choose(1).length == 4


def test_every_so_often_a_neighbour_of_the_choice_is_measured_again() -> None:
    policy = _warmed(AdaptiveLength(4), 0.9)
    policy.observe(Observed(4, [0, 0, 0]))
    # a young life (3 trials of depth 1, fewer than EXPLORE_TRIALS) explores every EXPLORE_YOUNG rounds, even
    # before the draft has read the unit (where that round pays the catch-up), lest a warm-up's few fix the rates
    picks = [policy.choose(1, unread=UNREAD).length for _ in range(EXPLORE_YOUNG)]
    assert picks == [0] * (EXPLORE_YOUNG - 1) + [1] and not policy.resting
    policy.observe(Observed(4, [0] * EXPLORE_TRIALS))
    policy.chosen = 0
    picks = [policy.choose(1).length for _ in range(EXPLORE_EVERY)]
    assert picks[:-1] == [0] * (EXPLORE_EVERY - 1) and picks[-1] == 1
    # ... and, grown up, no longer off a choice of 0 where the draft has not read the unit
    assert [policy.choose(1, unread=UNREAD).length for _ in range(EXPLORE_EVERY)] == [0] * EXPLORE_EVERY
    # ... so a choice of 0 there holds to the unit's end, and the engine stops weighing it (`resting`)
    assert policy.resting
    policy.restart()
    assert not policy.resting


def test_pending_positions_is_the_most_a_carry_still_modifies() -> None:
    carry = ModifiedTarget.empty(2, 3, 1, torch.device("cpu"))
    carry.remaining[1, 2] = 2
    assert pending_positions(carry) == 2 and pending_positions(None) == 0


class Scripted(AdaptiveLength):
    """Lengths from a script (a carry's floor honoured), to drive the engine through every kind of round."""

    script: tuple[int, ...] = (3, 0, 0, 1, 2, 0, 3, 1)
    rounds_seen = 0

    def choose(self, rows: int, floor: int = 0, unread: Unread | None = None) -> Choice:
        length = max(self.script[self.rounds_seen % len(self.script)], floor)
        self.rounds_seen += 1
        return Choice(length, 1.0)


@pytest.mark.parametrize("name", ADAPTIVE_ALGORITHMS)
def test_rounds_of_any_length_decode_the_greedy_tokens(name: str) -> None:
    """At T = 0 every lossless decode is the target's greedy one: rounds of 0..3 tokens in any order, in a
    batch whose rows leave, commit to the drafter what a round drafting nothing held back."""
    s = replace(settings(K=1, L=3, T=0.0, batch=2, max_new=11), adaptive=True)
    target, drafter = toy_roles(2)
    policy = Scripted(3, longest_first=get_algorithm(name).carry)
    run = decode(target, drafter, get_verifier(name), TOY_PROMPTS, s, policy=policy)
    reference = autoregressive(target, TOY_PROMPTS, s)
    assert [p.tokens for p in run.prompts] == [p.tokens for p in reference.prompts]
    lengths = {r.length for r in run.rounds}  # greedy block's carry keeps a round from drafting nothing here
    assert lengths == ({1, 2, 3} if get_algorithm(name).carry else {0, 1, 2, 3})
    assert all(len(p.drafted) == len(p.accepted) for p in run.prompts)
    assert all(tau <= n for p in run.prompts for tau, n in zip(p.accepted, p.drafted))


def test_the_draft_reads_a_units_prompts_only_when_a_round_first_drafts() -> None:
    """Under a policy the drafter's prefill waits for the first round that drafts (a unit the policy never drafts
    for never pays it); rows that left before it (eos after 2 and 3 tokens, three rounds of L = 0 first) are
    dropped from the drafter then, and the decode is still the target's greedy one."""
    s = replace(settings(K=1, L=3, T=0.0, batch=4, max_new=8, eos=1), adaptive=True)
    target, drafter = toy_roles(9)
    prefills: list[int] = []
    prefill = drafter.prefill

    def counted(contexts: list[list[int]], *args: Any, **kwargs: Any) -> None:
        prefills.append(len(contexts))
        prefill(contexts, *args, **kwargs)

    drafter.prefill = counted  # type: ignore[method-assign]
    policy = Scripted(3)
    policy.script = (0, 0, 0, 2, 3, 0, 1)
    run = decode(target, drafter, get_verifier("block"), TOY_PROMPTS, s, policy=policy)
    reference = autoregressive(target, TOY_PROMPTS, s)
    assert [p.tokens for p in run.prompts] == [p.tokens for p in reference.prompts]
    assert [len(p.tokens) for p in run.prompts] == [2, 5, 3, 4] and prefills == [4]
    # the first round that drafts reads the four prompts, and for each of the two rows still decoding its root
    # and the 3 tokens its rounds of L = 0 emitted
    assert [r.catch_up_tokens for r in run.rounds] == [0, 0, 0, sum(len(p) for p in TOY_PROMPTS) - 4 + 2 * 4]
    never = Scripted(3)
    never.script = (0,)
    decode(target, drafter, get_verifier("block"), TOY_PROMPTS, s, policy=never)
    assert prefills == [4]


def test_the_policy_learns_its_costs_across_units_and_its_figures_say_what_it_did() -> None:
    s = replace(settings(K=1, L=4, T=1.0, batch=2, max_new=24), adaptive=True)
    target, drafter = toy_roles(3)
    policy = AdaptiveLength(4)
    runs = [decode(target, drafter, get_verifier("block"), TOY_PROMPTS, s, policy=policy) for _ in range(2)]
    assert policy.costs.ready and {0, 1, 2, 4} <= policy.costs.sizes
    run = runs[1]
    figures = adaptive_figures(run)
    assert sum(figures[f"adaptive_length_{n}"] for n in range(5)) == pytest.approx(1.0)
    assert figures["adaptive_realised_tokens"] == pytest.approx(
        sum(tau + 1 for r in run.rounds for tau in r.accepted) / sum(r.rows for r in run.rounds)
    )
    assert figures["adaptive_policy_ms"] > 0 and figures["adaptive_calibration"] > 0
    fixed = decode(target, drafter, get_verifier("block"), TOY_PROMPTS, replace(s, adaptive=False))
    assert adaptive_figures(fixed) == {} and all(math.isnan(r.predicted_tokens) for r in fixed.rounds)


def test_acceptance_by_depth_counts_a_depth_over_the_rounds_that_drafted_it() -> None:
    from speculab.core.records import PromptRecord

    # two rounds: one drafted 1 token and accepted it, one drafted 3 and accepted 1
    record = PromptRecord(0, 3, tokens=[1] * 4, accepted=[1, 1], drafted=[1, 3], overlap=[[0.9], [0.8, 0.4]])
    figures = acceptance_by_depth(RunResult([record], [], 1.0, 0.0, 0.0, length=4))
    assert figures["alpha_1"].value == 1.0  # both rounds drafted depth 1 and accepted it
    assert figures["alpha_2"].value == 0.0  # only the second drafted depth 2, and rejected it
    assert math.isnan(figures["alpha_3"].value)  # drafted, never reached
    assert "alpha_4" not in figures  # no round drafted depth 4


def test_auto_is_a_length_of_its_own_in_the_point_and_its_logged_params(weightless_pair_overrides) -> None:
    from speculab.config import resolve

    cfg = resolve(load([*weightless_pair_overrides, "algorithm.L=auto"])).cfg
    shape = PointShape.of(cfg)
    assert "block K=1 L=auto T=1.0" in shape.name and shape.L == 8 and shape.adaptive
    params = {key: str(value) for key, value in flat_params(asdict(cfg)).items()}
    assert PointShape.from_params(params) == shape


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        (["algorithm.L=abc"], "algorithm.L=abc: must be an integer >= 1 and <= 128, or auto"),
        (
            ["algorithm=gbv", "algorithm.K=2", "algorithm.L=auto"],
            "algorithm.L=auto: chooses the length of one i.i.d. path (algorithm=token/block/greedy_block, "
            "algorithm.K=1, drafter=iid, drafter.ahead=off, no algorithm.compare); got algorithm=gbv algorithm.K=2",
        ),
        (["algorithm=ddtree", "drafter=ar_marginals", "algorithm.L=auto"], "got algorithm=ddtree drafter=ar_marginals"),
        (["algorithm.L=auto", "algorithm.compare=[token]"], "got algorithm.compare=['token']"),
    ],
)
def test_auto_is_refused_in_one_line_where_it_cannot_serve(weightless_pair_overrides, overrides, line) -> None:
    with pytest.raises(ConfigError) as err:
        validate(load([*weightless_pair_overrides, *overrides]))
    assert line in str(err.value)
    assert sum("algorithm.L" in text for text in str(err.value).splitlines()) == 1


def test_a_sweep_tables_what_auto_chose_and_mlflow_gets_every_figure() -> None:
    from speculab.results.names import Figures, flatten
    from speculab.results.point import PointResult
    from speculab.stats import Estimate
    from speculab.tracking.sweep_page import ADAPTIVE_TABLED, sweep_csv, sweep_markdown

    s = replace(settings(K=1, L=4, T=1.0, batch=2, max_new=16), adaptive=True)
    target, drafter = toy_roles(4)
    run = decode(target, drafter, get_verifier("block"), TOY_PROMPTS, s, policy=AdaptiveLength(4))
    figures = adaptive_figures(run)
    logged = flatten(Figures(figures))
    assert {f"adaptive/length_{n}" for n in range(5)} <= set(logged) and "adaptive/calibration" in logged
    shape = PointShape("block", None, 1, 8, None, None, 1.0, "iid", "humaneval", 4, "tiny-pycode", 0, 16, 2, 0)
    speed = {"tokens_per_s": Estimate(100, 90, 110), "speedup_vs_ar": Estimate(1.0, 0.9, 1.1)}
    points = [
        PointResult(shape, Figures(speed)),
        PointResult(replace(shape, adaptive=True), Figures(speed | figures)),
    ]
    header = sweep_markdown(points).splitlines()[0]
    tabled = [key for key in ADAPTIVE_TABLED if key != "adaptive_budget_mean"]  # algorithm.budget=auto's
    assert all(f" {key} " in header for key in tabled) and "L=auto" in sweep_markdown(points)
    assert "adaptive_budget_mean" not in header
    assert set(tabled) <= set(sweep_csv(points).splitlines()[0].split(","))
