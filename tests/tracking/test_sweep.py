"""The sweep's answer (`speculab.results.sweep`): points ranked by their paired speedup, a best point
named only when its interval clears the runner-up's, and the tables and plot that show it."""

from __future__ import annotations

from dataclasses import replace

import matplotlib.pyplot as plt
import numpy as np

from speculab.results.names import Figures
from speculab.results.point import PointResult, PointShape
from speculab.results.sweep import FIRST_PLACE, best_metrics, labels, sweep_name, swept_keys
from speculab.results.verdicts import rank_key, ranked, sweep_answer
from speculab.show.console import plain
from speculab.show.sweep import LEADER_OVER, TOP, ranking_table, sweep_figure
from speculab.stats import Estimate
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
        FIRST_PLACE: 1.0,
        **{f"best/{k}": rows[1].figures[k].value for k in ("speedup_vs_ar", "tokens_per_s")},
    }
    description = sweep_description("algorithm.L=4,5,6", rows, [])
    assert description.startswith("Fastest: **gbv K=2 L=5 T=1.0**, speedup_vs_ar 1.")
    assert "Of the points: against the autoregressive baseline," in description


def test_points_not_separated_share_first_place_and_no_best_is_named() -> None:
    rows = measured(1.3, 1.3, 1.0)
    answer = sweep_answer(rows)
    assert answer.best is None and best_metrics(answer)[FIRST_PLACE] == 2.0
    description = sweep_description("algorithm.L=4,5,6", rows, [])
    assert "No single fastest point:" in description and "separate it from 1 point(s)" in description
    assert "sweep points, ranked by their figures; no single fastest" in sweep_figure(answer).axes[0].get_title()


def test_points_without_their_units_cannot_be_told_apart() -> None:
    rows = [row("gbv K=2 L=4", 1.5, 1.4, 1.6), row("block K=1 L=8", 1.1, 1.0, 1.2)]
    answer = sweep_answer(rows)
    assert answer.best is None and len(answer.versus) == 1
    assert "no per-unit measurements kept" in sweep_description("x", rows, [])


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
    assert names == ["gbv K=2 L=4 T=1.0\nblock eff. 2.00", "block K=1 L=8 T=1.0\nblock eff. 2.00"]  # first on top
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
    assert "K=12" in shown and "K=2 " not in shown  # best first, the last two left out
    assert "top" not in plain(ranking_table(sweep_answer(rows[:TOP]), "ranking"))  # every point shown


def test_the_ranking_shows_the_leaders_ratio_over_each_point_with_its_verdict() -> None:
    rows = measured(1.2, 1.6)
    shown = plain(ranking_table(sweep_answer(rows), "ranking"))
    assert LEADER_OVER in shown and "1.3" in shown and " faster" in shown
    assert f"| {LEADER_OVER} |" in sweep_description("algorithm.L=4,5", rows, [])


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
