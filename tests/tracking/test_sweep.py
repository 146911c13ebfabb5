"""The sweep's answer (`speculab.results.sweep`): points ranked by their paired speedup, a best point
named only when its interval clears the runner-up's, and the tables and plot that show it."""

from __future__ import annotations

from dataclasses import replace

import matplotlib.pyplot as plt
import numpy as np

from speculab.results.names import Figures
from speculab.results.point import PointResult, PointShape
from speculab.results.sweep import IN_THE_RUNNING, best_metrics, contrast_cells, labels, sweep_name, swept_keys
from speculab.results.verdicts import ContrastCell, rank_key, ranked, run_verdicts, sweep_answer
from speculab.show.answers import run_verdict_words, sweep_section, sweep_verdict_words
from speculab.show.console import plain
from speculab.show.sweep import LEADER_OVER, TOP, contrast_markdown, contrast_table, ranking_table, sweep_figure
from speculab.stats import Estimate
from speculab.tracking.run_page import with_sweep_section
from speculab.tracking.sweep_page import sweep_csv, sweep_description, sweep_markdown, table_rows
from support.sweeps import QUIET, draw_units, point, truth

SHARED = "iid · humaneval×4 · tiny-pycode"
SHAPE = PointShape("gbv", None, 2, 4, None, None, 1.0, "iid", "humaneval", 4, "tiny-pycode", 0, 64, 1, 0)


def row(name: str, speedup: float, low: float, high: float) -> PointResult:
    """A point named `<algorithm> K=<K> L=<L>` (or a DDTree `ddtree best_first B=<B> L=<L>`) with its speeds
    (no units kept: its verdicts cannot be tested)."""
    algorithm, *draft, length = name.split()
    shape = replace(SHAPE, algorithm=algorithm, L=int(length.removeprefix("L=")))
    if algorithm == "ddtree":
        shape = replace(shape, tree=draft[0], budget=int(draft[1].removeprefix("B=")))
    else:
        shape = replace(shape, K=int(draft[0].removeprefix("K=")))
    figures = {
        "block_efficiency": 2.0,
        "tokens_per_s": Estimate(100 * speedup, 100 * low, 100 * high),
        "speedup_vs_ar": Estimate(speedup, low, high),
    }
    return PointResult(shape, Figures(figures), generate=Figures({"speedup_vs_ar": 0.9}))


def measured(*speedups: float) -> list[PointResult]:
    """Points measured on the same 32 simulated prompts on a quiet machine, `gbv K=2 L=<i + 4>` truly
    speedups[i] times faster than autoregressive decoding."""
    rng = np.random.default_rng(len(speedups))
    units = draw_units(rng, 32)
    found = [point(rng, units, truth() / s, QUIET) for s in speedups]
    return [
        replace(p, shape=replace(SHAPE, L=4 + i), generate=Figures({"speedup_vs_ar": 0.9})) for i, p in enumerate(found)
    ]


def test_a_leader_separated_from_every_other_point_is_the_best() -> None:
    rows = measured(1.2, 1.6, 1.0)
    answer = sweep_answer(rows)
    assert answer.key == "speedup_vs_ar" and answer.best is rows[1]
    assert best_metrics(answer) == {
        IN_THE_RUNNING: 1.0,
        **{f"best/{k}": rows[1].figures[k].value for k in ("speedup_vs_ar", "tokens_per_s")},
    }
    description = sweep_description("algorithm.L=4,5,6", sweep_answer(rows), [])
    assert description.startswith("Fastest: **gbv K=2 L=5 T=1.0**, speedup_vs_ar 1.")
    assert "Of the points: against the autoregressive baseline," in description


def test_points_not_ruled_out_stay_in_the_running_and_no_best_is_named() -> None:
    rows = measured(1.3, 1.3, 1.0)
    answer = sweep_answer(rows)
    assert answer.best is None and best_metrics(answer)[IN_THE_RUNNING] == 2.0
    description = sweep_description("algorithm.L=4,5,6", sweep_answer(rows), [])
    assert "No single fastest point:" in description and "1 other point(s) are still in the running" in description
    assert "sweep points, ranked by their figures; no single fastest" in sweep_figure(answer).axes[0].get_title()


def test_points_without_their_units_cannot_be_told_apart() -> None:
    rows = [row("gbv K=2 L=4", 1.5, 1.4, 1.6), row("block K=1 L=8", 1.1, 1.0, 1.2)]
    answer = sweep_answer(rows)
    assert answer.best is None and len(answer.versus) == 1
    assert "no per-unit measurements kept" in sweep_description("x", sweep_answer(rows), [])


def test_without_the_autoregressive_baseline_points_rank_by_tokens_per_s() -> None:
    rows = [row("gbv K=2 L=4", 1.5, 1.4, 1.6), row("block K=1 L=8", 1.1, 1.0, 1.2)]
    rows = [replace(r, figures=Figures({"tokens_per_s": speed})) for r, speed in zip(rows, (50.0, 80.0))]
    assert rank_key(rows) == "tokens_per_s" and ranked(rows)[0] is rows[1]


def test_tables_are_ranked_and_leave_out_columns_no_point_has() -> None:
    rows = [row("gbv K=2 L=4", 1.2, 1.1, 1.3), row("ddtree best_first B=64 L=4", 1.4, 1.3, 1.5)]
    shown = table_rows(rows)
    assert [r["speedup_vs_ar"] for r in shown] == [1.4, 1.2] and shown[1]["budget"] == "" and shown[0]["K"] == ""
    assert shown[0]["budget"] == 64 and "budget" not in table_rows(rows[:1])[0]
    header = sweep_csv(rows).splitlines()[0].split(",")
    assert {"speedup_vs_ar low", "speedup_vs_ar high", "tokens_per_s low", "baseline_hf/speedup_vs_ar"} <= set(header)
    assert shown[0]["tree"] == "best_first" and shown[1]["tree"] == ""  # the shape's own columns
    assert "1.4 [1.3, 1.5]" in sweep_markdown(rows)


def test_labels_keep_what_tells_points_apart() -> None:
    rows = [row("gbv K=2 L=4", 1.2, 1.1, 1.3), row("gbv K=2 L=8", 1.4, 1.3, 1.5)]
    assert labels(rows) == {r.shape.name: r.shape.name_parts[0] for r in rows}


def test_the_sweep_plot_has_interval_bars_and_both_reference_lines() -> None:
    rows = [row("gbv K=2 L=4", 1.2, 1.1, 1.3), row("block K=1 L=8", 1.6, 1.5, 1.7)]
    figure = sweep_figure(sweep_answer(rows))
    axes = figure.axes[0]
    lines = {line.get_label(): line.get_xdata()[0] for line in axes.get_lines() if not line.get_label().startswith("_")}
    assert lines == {"autoregressive (1.0)": 1.0, "transformers generate (0.90)": 0.9}
    names = [t.get_text() for t in axes.get_yticklabels()]
    no_units = "block eff. 2.00 · too few units"  # each point named with where it stands
    assert names == [f"gbv K=2 L=4 T=1.0\n{no_units}", f"block K=1 L=8 T=1.0\n{no_units}"]  # first on top
    assert len(axes.containers) == 2  # the bars and their error bars
    assert "every point: iid · humaneval×4 · tiny-pycode" in axes.get_title()
    plt.close(figure)


def test_the_parent_is_named_by_what_is_swept_and_what_every_point_shares() -> None:
    swept = ["algorithm=gbv,spectr,specinfer", "algorithm.L=4,8", "dataset.num_prompts=4"]
    assert sweep_name(SHAPE, swept) == (
        "sweep algorithm=gbv,spectr,specinfer algorithm.L=4,8 · T=1.0 · iid · humaneval×4 · tiny-pycode"
    )
    assert sweep_name(SHAPE, ["sampling.temperature=0,1", "model=tiny-pycode"]) == (
        "sweep sampling.temperature=0,1 · gbv K=2 L=4 · iid · humaneval×4 · tiny-pycode"
    )
    tree = replace(SHAPE, algorithm="ddtree", tree="best_first", budget=64)
    assert sweep_name(tree, ["algorithm.budget=16,64"]).startswith("sweep algorithm.budget=16,64 · ddtree L=4 T=1.0")
    held = sweep_name(tree, ["sampling.temperature=0,1"])  # the tree and its budget are what every point shares
    assert held.startswith("sweep sampling.temperature=0,1 · ddtree best_first B=64 L=4 ·")


def test_a_list_value_is_not_a_sweep() -> None:
    overrides = ["algorithm.compare=[gbv,spectr]", "algorithm.L=range(4,9,4)"]
    assert swept_keys(overrides) == ["algorithm.L"]
    assert sweep_name(SHAPE, overrides).startswith("sweep algorithm.L=range(4,9,4) · gbv K=2 T=1.0 ·")


def test_the_console_ranking_says_how_many_points_it_leaves_out_and_where_they_are() -> None:
    rows = [row(f"gbv K={k} L=4", 1 + k / 100, 1, 1.5) for k in range(1, TOP + 3)]
    shown = plain(ranking_table(sweep_answer(rows), "ranking"))
    assert f"top {TOP} of {TOP + 2} points; all of them: the parent run's sweep_table.md" in shown
    assert f"K={TOP + 2}" in shown and "K=2 " not in shown  # best first, the last two left out
    assert "top" not in plain(ranking_table(sweep_answer(rows[:TOP]), "ranking"))  # every point shown


def test_the_ranking_shows_the_leaders_ratio_over_each_point_with_its_verdict() -> None:
    rows = measured(1.2, 1.6)
    shown = plain(ranking_table(sweep_answer(rows), "ranking"))
    assert LEADER_OVER in shown and "1.3" in shown and " out" in shown
    assert f"| {LEADER_OVER} |" in sweep_description("algorithm.L=4,5", sweep_answer(rows), [])


def test_a_sweep_over_drafting_ahead_tables_its_hit_rates_and_what_they_cost() -> None:
    rows = [row("block K=1 L=4", 1.2, 1.1, 1.3), row("block K=1 L=8", 1.4, 1.3, 1.5)]
    ahead = {"ahead_hit_rate": 0.72, "ahead_tokens_hit": 3.1, "ahead_drafts_per_round": 8.0, "share_draft_idle": 0.3}
    rows[1] = replace(rows[1], figures=Figures({**rows[1].figures, **ahead}))
    header = sweep_markdown(rows).splitlines()[0]
    assert all(f" {key} " in header for key in ahead) and "ahead_tokens_miss" not in header  # no point has it
    assert set(ahead) <= set(sweep_csv(rows).splitlines()[0].split(","))
    shown = plain(ranking_table(sweep_answer(rows), "ranking"))
    assert "ahead hits" in shown and "72%" in shown
    assert "ahead hits" not in plain(ranking_table(sweep_answer(rows[:1]), "ranking"))


def test_a_contrast_places_each_point_by_its_value_and_the_other_swept_keys() -> None:
    overrides = [
        ["algorithm=gbv", "algorithm.L=4", "sampling.temperature=0", "dataset.num_prompts=8"],
        ["algorithm=block", "algorithm.L=4", "sampling.temperature=0", "dataset.num_prompts=8"],
        ["algorithm=gbv", "algorithm.L=8", "sampling.temperature=0", "dataset.num_prompts=8"],
        ["algorithm=block", "algorithm.L=8", "sampling.temperature=0", "dataset.num_prompts=8"],
    ]
    cells, order = contrast_cells(overrides, "algorithm")
    assert order == ["gbv", "block"] and [c.value for c in cells] == ["gbv", "block", "gbv", "block"]
    assert cells[2].setting == ("algorithm.L=8",)  # the keys held by every point are no setting


def test_the_contrast_table_says_each_verdict_with_its_level_and_adjusted_p() -> None:
    rows = measured(1.3, 1.0, 1.0, 1.0)  # gbv (first) 30% faster than block at L=4, alike at L=5
    cells = [ContrastCell(a, (f"algorithm.L={L}",)) for L in (4, 5) for a in ("gbv", "block")]
    answer = sweep_answer(rows, cells, ["gbv", "block"])
    shown = plain(contrast_table(answer, answer.key))
    assert "algorithm.L=4: gbv / block" in shown and "gbv faster (adjusted p" in shown
    assert "algorithm.L=5: gbv / block" in shown and "inconclusive (adjusted p" in shown
    assert "the sweep's verdicts, 9 tests" in shown  # 3 comparisons with the best, 4 baselines, 2 contrasts
    assert "| algorithm.L=4: gbv / block |" in contrast_markdown(answer)
    assert "Contrasts on speedup_vs_ar" in sweep_description("x", answer, [])


def test_a_points_page_opens_on_its_sweeps_verdicts_then_its_headline() -> None:
    rows = measured(1.2, 1.6, 1.0)
    answer = sweep_answer(rows)
    name = lambda p: p.shape.name_parts[0]  # noqa: E731
    section = sweep_section(answer, rows[0], name)
    assert section.startswith("In the sweep: **out**, gbv K=2 L=5 T=1.0 over it 1.")
    assert "at 9" in section and "the sweep's verdicts, 5 tests" in section and section.endswith("; vs AR faster.")
    note = "**speedup vs ar 1.2**\n\n**gbv** verification ...\n\nDecoding notes"
    told = with_sweep_section(note, section)
    assert told.split("\n\n")[:2] == [section, "**speedup vs ar 1.2**"]  # what MLflow shows first
    assert with_sweep_section(told, "In the sweep: again") == "\n\n".join(
        ["In the sweep: again", "**speedup vs ar 1.2**", "**gbv** verification ...", "Decoding notes"]
    )  # a later launch's replaces the earlier one
    assert sweep_verdict_words(answer, rows[1]) == "fastest" and sweep_verdict_words(answer, rows[2]) == "out"
    assert run_verdict_words(run_verdicts(rows[1])) == "AR: faster"


def test_the_chart_draws_each_point_with_its_interval_simultaneous_over_the_points() -> None:
    answer = sweep_answer(measured(1.2, 1.6, 1.0))
    figure = sweep_figure(answer)
    axes = figure.axes[0]
    assert "intervals simultaneous over the 3 points" in axes.get_xlabel()
    assert all(e.has_interval and "simultaneous over 3 points" in e.method for e in answer.figures)
    own = answer.leader.figures["speedup_vs_ar"]
    assert answer.figures[0].high - answer.figures[0].low > own.high - own.low  # wider than its own 95%
    plt.close(figure)
