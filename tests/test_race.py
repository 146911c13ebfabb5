"""Racing (`hydra/sweeper=race`): simulated races through the functions a real one decides with
(`support.sweeps.race`: `results.race.ruled_out`, `results.verdicts.sweep_answer`) name a point truly 8%
faster than 19 others on half the tokens a flat 32-prompt sweep decodes, and never name a point beyond the
ranking's share in the case least favourable to it; its checks refuse what it cannot run in one line; a
dataset's slices are disjoint random parts of one sample; and a real race on the tiny pair shows its
stages."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from speculab.config.answer import race_errors, stage_bounds, stage_jobs
from speculab.config.dataset import DatasetConfig, dataset_errors
from speculab.data.prompts import chosen, sliced
from speculab.results.race import RACE_FILE, SPENT, pooled, race_name, ruled_out, stage_share
from speculab.results.verdicts import ALPHA, sweep_answer
from support.cli import speculab
from support.sweeps import LOADED, QUIET, draw_units, point, race, truth, values_only


def test_a_race_names_the_fastest_of_20_on_half_the_tokens_of_a_flat_sweep() -> None:
    """Stages [12, 32] on an idle machine: a point truly 8% faster than 19 others is named in at least 80%
    of races (a flat 32-prompt sweep: 100%, benchmarks/verdicts.py), the wrong point never, and the race
    decodes at most half the tokens the flat sweep does."""
    rng = np.random.default_rng(0)
    found = [race(rng, [1.08] + [1.0] * 19, [12, 32], QUIET) for _ in range(120)]
    named = sum(r.named == 0 for r in found) / len(found)
    assert named >= 0.8 and not any(r.named not in (None, 0) for r in found)
    assert float(np.mean([r.cost for r in found])) <= 0.5


@pytest.mark.parametrize("machine", [QUIET, LOADED], ids=["idle", "loaded"])
def test_two_points_tied_at_the_top_are_named_within_the_rankings_share(machine) -> None:
    """The case least favourable to naming one: two points tied at the top, two far below; a race names
    either (wrongly: neither is faster) at most as often as the ranking's share allows, the 5% of a family
    whose baseline question passes its share on (every point here is decided against the baseline)."""
    rng = np.random.default_rng(1)
    trials = 400
    named = sum(race(rng, [1.0, 1.0, 0.5, 0.5], [12, 32], machine).named is not None for _ in range(trials))
    assert named / trials <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / trials), named


def test_a_stage_rules_out_against_the_points_the_race_began_with() -> None:
    """The threshold is the share over the race's first count less one, whatever is left: with 3 points
    left of 20, a margin that passes among 3 alone may not pass here."""
    rng = np.random.default_rng(2)
    units = draw_units(rng, 12)
    points = [point(rng, units, truth() / 1.3 / s, QUIET, f"p{i}", intervals=False) for i, s in enumerate((1.3, 1.0))]
    share = stage_share(2, 20, baselines=True)
    assert share == pytest.approx(ALPHA / 2 * SPENT)
    leader, out = ruled_out(points, 20, share)
    assert leader is points[0] and [p for p, _ in out] == [points[1]]
    assert out[0][1].level == pytest.approx(1 - 2 * share / 19) and out[0][1].adjusted <= ALPHA


def test_a_point_left_is_pooled_over_its_stages() -> None:
    """The answer's point is one point over every stage's prompts: its units joined in stage order, its
    throughput and speedup the ratios of totals over all of them, its prompt count the whole sample's."""
    rng = np.random.default_rng(3)
    stages = [point(rng, draw_units(rng, n), truth() / 1.3, QUIET, "p0", intervals=False) for n in (12, 20)]
    both = pooled(stages, values_only)
    assert both.units is not None and len(both.units.prompts) == 32 and both.shape.prompts == 32
    assert both.shape.part is None and race_name(both) == race_name(stages[-1])
    totals = [s.units.speculative for s in stages if s.units is not None]
    tokens = sum(sum(t.tokens) for t in totals)
    seconds = sum(sum(t.wall_s) for t in totals)
    assert both.figures.value("tokens_per_s") == pytest.approx(tokens / seconds)
    assert both.figures.value("units") == 32 and "speedup_vs_ar" in both.figures
    assert not any(k.startswith("typical_") for k in both.figures)


def test_a_races_answer_counts_every_point_it_began_with() -> None:
    """Two points left of 20: the leader's test over the other is judged at the share over 19, and each
    baseline question's Holm counts the 18 ruled-out points' tests (as never rejected)."""
    rng = np.random.default_rng(4)
    units = draw_units(rng, 32)
    left = [point(rng, units, truth() / 1.3 / s, QUIET, f"p{i}", intervals=False) for i, s in enumerate((1.3, 1.0))]
    answer = sweep_answer(left, spent=0.01, ruled_out_before=18)
    assert answer.chosen_from == 20 and answer.family.tests == 19 + 20
    (versus,) = answer.versus
    assert versus.level == pytest.approx(1 - 2 * (ALPHA / 2 - 0.01) / 19)
    assert all(v.level >= 1 - ALPHA / 2 / 19 for v in answer.against["speedup_vs_ar"])  # of 20, not of 2


def test_a_race_that_cannot_run_is_refused_in_one_line() -> None:
    assert race_errors([12, 32], ["algorithm.L=4,8"], None, 12, 164) == []
    (short,) = race_errors([8, 32], [], None, 12, None)
    assert short.startswith("hydra.sweeper.stages=[8, 32]: must be two or more increasing prompt counts")
    assert race_errors([12, 20], [], None, 12, None) and race_errors([32], [], None, 12, None)  # 8 fresh; one stage
    (beyond,) = race_errors([12, 200], [], None, 12, 164)
    assert beyond.startswith("hydra.sweeper.stages=[12, 200]: the last stage decodes 200") and "<= 164" in beyond
    (count,) = race_errors([12, 32], ["dataset.num_prompts=40"], None, 12, None)
    assert count.startswith("dataset.num_prompts: a race sets it")
    (paired,) = race_errors([12, 32], [], "algorithm", 12, None)
    assert "a race drops points a contrast pairs" in paired
    assert stage_bounds([12, 32]) == [(0, 12), (12, 32)]
    assert stage_jobs([["algorithm=gbv"]], 12, 32, 32) == [
        ["algorithm=gbv", "dataset.num_prompts=32", "dataset.slice=[12,32]"]
    ]


def test_a_slice_past_the_dataset_is_refused_where_the_sample_is_all_of_it() -> None:
    """With `dataset.num_prompts=null` the sample is the whole dataset: a slice past its end is refused
    naming what it holds, not run on fewer prompts than its name says (or on none)."""
    (line,) = dataset_errors(DatasetConfig(num_prompts=None, slice=[160, 170]))
    assert line == (
        "dataset.slice=[160, 170]: must be [start, stop] with 0 <= start < stop <= 164, the prompts humaneval "
        "holds, or null"
    )
    assert dataset_errors(DatasetConfig(num_prompts=None, slice=[150, 164])) == []


def test_a_samples_slices_are_disjoint_random_parts_of_it() -> None:
    sample = chosen(164, 32, 0)
    parts = [sliced(sample, 0, bounds) for bounds in ((0, 12), (12, 32))]
    assert sorted(parts[0] + parts[1]) == sample and not set(parts[0]) & set(parts[1])
    assert parts[0] != sample[:12] and parts[0] == sorted(parts[0])  # random positions, in the dataset's order
    assert sliced(list(range(10)), None, (0, 4)) == [0, 1, 2, 3]  # no seed: the first prompts, then the next


def test_a_real_race_on_the_tiny_pair_shows_its_stages(tmp_path: Path) -> None:
    """Four points, stages [12, 24] of 8 tokens each: every point decodes the first 12 prompts, those left
    the next 12, and the console, the parent's description and race.json say which and why."""
    args = [
        "-m",
        "hydra/sweeper=race",
        "hydra.sweeper.stages=[12,24]",
        "algorithm=block,token",
        "algorithm.L=2,4",
        "runtime=inline",
        "sampling.max_new_tokens=8",
        "measure.repeats=1",
        "baseline_hf=false",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    ]
    result = speculab(args, tmp_path)
    assert result.returncode == 0, result.stderr
    stages = json.loads((tmp_path / "sweep" / RACE_FILE).read_text())
    assert [(s["start"], s["stop"]) for s in stages] == [(0, 12), (12, 24)] and len(stages[0]["points"]) == 4
    assert len(stages[1]["points"]) == 4 - len(stages[0]["out"])
    assert "speculab: race: stage 1, prompts 0-12 of the sample: 4 points" in result.stdout
    assert "the sweep's answer is on these points, over every stage's prompts" in result.stdout
    described = (tmp_path / "sweep" / "sweep_description.md").read_text()
    assert "- Race, stage 1, prompts 0-12 of the sample" in described


def test_a_race_with_a_bad_stage_is_refused_before_anything_runs(tmp_path: Path) -> None:
    args = ["-m", "hydra/sweeper=race", "hydra.sweeper.stages=[8,32]", "algorithm.L=2,4", "tracking=none"]
    result = speculab([*args, f"hydra.sweep.dir={tmp_path / 's'}"], tmp_path)
    assert result.returncode == 2 and "hydra.sweeper.stages=[8, 32]: must be two or more" in result.stderr
    assert not (tmp_path / "s").exists()
