"""The verdict rule (`speculab.results.verdicts`), run through its own code on simulated sweeps
(`support.sweeps`, on the machine noise one point measured here): it names a point truly 8% faster
than the other over 16 shared prompts, and sweeps of 20 equal points print no false verdict beyond
the family's 5%; Holm's procedure by hand; pairing, unpaired points, too few units."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from speculab.results.names import Figures
from speculab.results.verdicts import (
    Call,
    baselines_sentence,
    decide,
    effect_groups,
    first_place,
    headline_note,
    holm,
    leader_sentence,
    rank_key,
    resamples_for,
    sweep_answer,
)
from speculab.stats import CONFIDENCE, log_ratio
from support.sweeps import LOADED, MEASURED, QUIET, draw_units, point, truth

TRIALS = 200


def name(p) -> str:
    return p.shape.algorithm


def test_holm_steps_down_and_counts_the_untested() -> None:
    assert holm([0.01, 0.04, 0.03, math.nan]) == [True, False, False, False]  # 0.03 > 0.05 / 2
    assert holm([0.001, 0.02, 0.03]) == [True, True, True]  # 0.001 <= 0.05/3, 0.02 <= 0.05/2, 0.03 <= 0.05
    assert holm([0.02, 0.03], family=3) == [False, False]  # a third hypothesis, untested, counts: 0.02 > 0.05/3
    assert resamples_for(3) == 1999 and 2 / (resamples_for(210) + 1) < 0.05 / 210 / 10


def test_a_point_truly_8_percent_faster_over_16_shared_prompts_is_named() -> None:
    """Power through the sweep's own code: the faster point named in at least 60% of simulated sweeps at
    the noise measured here, and never the slower one; the interval-overlap rule this replaced named it
    in none at the same noise (docs/measuring.md)."""
    cost = truth() / 1.3
    rng = np.random.default_rng(0)
    named = wrong = 0
    for _ in range(TRIALS):
        units = draw_units(rng, 16)
        fast, slow = point(rng, units, cost, MEASURED, "fast"), point(rng, units, cost * 1.08, MEASURED, "slow")
        best = sweep_answer([slow, fast]).best
        named += best is fast
        wrong += best is slow
    assert named / TRIALS >= 0.6 and wrong == 0, (named, wrong)


@pytest.mark.parametrize("machine", [MEASURED, LOADED], ids=["measured", "loaded"])
def test_null_sweeps_of_20_points_print_a_false_verdict_in_at_most_5_percent(machine) -> None:
    """Every point truly as fast as every other and as autoregressive decoding: a sweep prints a false
    verdict (a leader, a point decided against another or against the baseline) in at most 5% of
    sweeps, within simulation error."""
    cost = truth()
    rng = np.random.default_rng(1)
    false = 0
    trials = TRIALS // 4
    for _ in range(trials):
        units = draw_units(rng, 16)
        answer = sweep_answer([point(rng, units, cost, machine, f"p{i}") for i in range(20)])
        decided = [v.decided for v in answer.versus] + [v.decided for vs in answer.against.values() for v in vs]
        false += any(decided)
    assert false / trials <= 1 - CONFIDENCE + 3 * math.sqrt(0.05 * 0.95 / trials), false


def test_a_clear_leader_is_named_with_its_margin_and_the_baselines_are_counted() -> None:
    rng = np.random.default_rng(2)
    units = draw_units(rng, 32)  # code and prose differ: against the baseline, 16 prompts leave 1.2x and 0.8x open
    points = [point(rng, units, truth() / s, QUIET, n) for s, n in ((1.2, "block"), (1.6, "gbv"), (0.8, "token"))]
    answer = sweep_answer(points)
    assert answer.best is points[1] and [p.shape.algorithm for p in answer.ranked] == ["gbv", "block", "token"]
    assert all(v.call is Call.ABOVE for v in answer.versus) and first_place(answer) == [points[1]]
    assert answer.family == 3 + 3  # three pairs and three points against the baseline
    sentence = leader_sentence(answer, name)
    assert sentence.startswith("Fastest: **gbv**, speedup_vs_ar 1.") and "of the runner-up block by 1.3" in sentence
    assert "32 prompts, paired" in sentence and "Holm over 6 tests" in sentence
    assert baselines_sentence(answer) == (
        "Of the points: against the autoregressive baseline, 2 faster, 1 slower (Holm over the sweep's 6 tests, 5% "
        "family-wise)."
    )


def test_points_the_data_do_not_separate_are_listed_and_none_is_named() -> None:
    rng = np.random.default_rng(3)
    units = draw_units(rng, 16)
    points = [point(rng, units, truth() / 1.3, LOADED, n) for n in ("block", "gbv", "spectr")]
    answer = sweep_answer(points)
    assert answer.best is None and len(first_place(answer)) >= 2
    assert "No single fastest point:" in leader_sentence(answer, name) and "Inconclusive over 16 prompts" in (
        leader_sentence(answer, name)
    )


def test_one_point_and_too_few_units_give_no_verdict() -> None:
    rng = np.random.default_rng(4)
    alone = sweep_answer([point(rng, draw_units(rng, 2), 1.0, QUIET, "gbv")])
    assert alone.best is None and leader_sentence(alone, name) == "One point (gbv): nothing to compare it with."
    units = draw_units(rng, 4)
    few = sweep_answer([point(rng, units, 0.5, QUIET, "gbv"), point(rng, units, 2.0, QUIET, "block")])
    assert few.best is None and all(v.call is Call.TOO_FEW for v in few.versus)
    assert leader_sentence(few, name).startswith(
        "No verdict on speedup_vs_ar: too few to tell: 4 prompts, needs at least 8;"
    )


def test_points_on_different_prompts_are_compared_unpaired() -> None:
    rng = np.random.default_rng(5)
    a = point(rng, draw_units(rng, 12), truth() / 1.5, QUIET, "a")
    b = point(rng, draw_units(rng, 10), truth() / 1.0, QUIET, "b")
    b = replace(b, units=replace(b.units, prompts=tuple((f"q{i}",) for i in range(10))))
    groups = effect_groups(a.units, b.units, "speedup_vs_ar")
    assert groups is not None and len(groups) == 2  # resampled independently
    assert log_ratio(*groups).n == 10
    assert "unpaired (the points decoded different prompts)" in leader_sentence(sweep_answer([a, b]), name)


def test_a_verdict_is_shown_with_the_figure_as_logged() -> None:
    rng = np.random.default_rng(6)
    p = point(rng, draw_units(rng, 16), truth() / 1.5, QUIET)
    ratio = log_ratio(*effect_groups(p.units, p.units, "tokens_per_s") or ())
    assert ratio.value == 1.0
    verdicts = decide([ratio, None], [p.figures["speedup_vs_ar"], p.figures["tokens_per_s"]])
    assert verdicts[0].call is Call.INCONCLUSIVE and verdicts[0].ratio == p.figures["speedup_vs_ar"]
    assert verdicts[1].call is Call.TOO_FEW and verdicts[0].family == 1


def test_a_target_off_the_lean_layers_is_judged_against_the_faster_baseline() -> None:
    """Where the engine's loop ran on transformers' own code and generate was faster, speedup_vs_ar would
    read high: the headline becomes speedup_vs_hf, and the run says why."""
    rng = np.random.default_rng(7)
    units = draw_units(rng, 16)
    points = [point(rng, units, truth() / s, QUIET, n, generate=0.8) for s, n in ((1.2, "a"), (1.5, "b"))]
    lean = [replace(p, generate=Figures({"speedup_vs_ar": 1.25})) for p in points]
    assert rank_key(lean) == "speedup_vs_ar" and headline_note(lean) == ""
    slow = [replace(p, figures=p.figures | {"ar_lean": 0.0}) for p in lean]
    assert rank_key(slow) == "speedup_vs_hf" and "the headline is speedup_vs_hf" in headline_note(slow)
    answer = sweep_answer(slow)
    assert answer.key == "speedup_vs_hf" and answer.best is slow[1]
    no_hf = [replace(p, figures=Figures({k: v for k, v in p.figures.items() if k != "speedup_vs_hf"})) for p in slow]
    assert rank_key(no_hf) == "speedup_vs_ar" and "speedup_vs_ar may read high" in headline_note(no_hf)
