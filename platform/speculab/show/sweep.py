"""A sweep's answer as a person sees it outside the parent's description: the console's ranking table (the
top points, each with the leader's ratio over it and its verdict) and the chart of every point."""

from __future__ import annotations

import math
import statistics

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from rich.table import Table

from speculab.results.sweep import cell, figure, labels, shared_name
from speculab.results.verdicts import SweepAnswer, Verdict, call_words
from speculab.stats import ratio_text

TOP = 10  # rows of the ranking the console shows; beyond, it says how many more and where they are
LEADER_OVER = "#1 over it"  # the ranking's column: the leader's ratio over the point, and its verdict
AHEAD_HIT = "ahead_hit_rate"  # drafter.ahead=ssd: its column, where a point drafted ahead


def leader_cell(verdict: Verdict) -> str:
    """The leader's ratio over a point with its interval and verdict: `1.08 [1.03, 1.13] faster`."""
    return f"{ratio_text(verdict.ratio)} {call_words(verdict)}"


def ranking_table(answer: SweepAnswer, title: str) -> Table:
    """The console's end of a sweep: the top points with their intervals and the leader's ratio over
    each with its verdict, named by what sets them apart (what they share is the caption)."""
    points, key = answer.ranked, answer.key
    shared = f"every point: {shared_name(points)}" if shared_name(points) else ""
    rest = (
        f"top {TOP} of {len(points)} points; all of them: the parent run's sweep_table.md" if len(points) > TOP else ""
    )
    table = Table(title=title, caption="\n".join(filter(None, (rest, shared))) or None)
    other = "tokens_per_s" if key != "tokens_per_s" else "speedup_vs_hf"
    ahead = any(AHEAD_HIT in p.figures for p in points)  # a sweep over drafting ahead: its hit rates beside
    for column in ("#", "point", key, LEADER_OVER, other, "block eff.", *(["ahead hits"] if ahead else [])):
        table.add_column(column, justify="left" if column == "point" else "right")
    short = labels(points)
    versus = ["", *(leader_cell(v) for v in answer.versus)]
    for place, (point, over) in enumerate(zip(points[:TOP], versus), start=1):
        cells = [cell(point, key), over, cell(point, other), f"{figure(point, 'block_efficiency').value:.3g}"]
        hits = figure(point, AHEAD_HIT).value
        cells += [("" if math.isnan(hits) else f"{hits:.0%}")] if ahead else []
        table.add_row(str(place), short[point.shape.name], *cells)
    return table


def sweep_figure(answer: SweepAnswer) -> Figure:
    """The ranking key per point (first on top) with its 95% interval, each point labelled with its
    block efficiency, the title saying what the verdict is; on the speedup axis, reference lines at 1
    (autoregressive) and at transformers' generate, the legend below the axes so that it hides no bar."""
    key, points = answer.key, answer.ranked
    ordered = points[::-1]
    figure_, axes = plt.subplots(figsize=(9, 2.2 + 0.45 * len(ordered)))
    shown = [figure(p, key) for p in ordered]
    values = [e.value for e in shown]
    errors = [
        [max(e.value - e.bar(0.0)[0], 0.0) for e in shown],
        [max(e.bar()[1] - e.value, 0.0) for e in shown],
    ]
    axes.barh(range(len(ordered)), values, xerr=errors, capsize=3, color="#4477aa", ecolor="#222222")
    short = labels(points)
    names = [f"{short[p.shape.name]}\nblock eff. {figure(p, 'block_efficiency').value:.2f}" for p in ordered]
    axes.set_yticks(range(len(ordered)), names, fontsize=8)
    right = max((v + e for v, e in zip(values, errors[1]) if not math.isnan(v)), default=1.0)
    if key == "speedup_vs_ar":
        axes.axvline(1.0, color="#ee6677", linestyle="--", linewidth=1.2, label="autoregressive (1.0)")
        references = [r for p in points if not math.isnan(r := p.generate_vs_ar)]
        if references:
            hf = statistics.median(references)
            axes.axvline(hf, color="#228833", linestyle=":", linewidth=1.5, label=f"transformers generate ({hf:.2f})")
            right = max(right, hf)
        axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, fontsize=8, frameon=False)
        axes.set_xlabel("throughput speedup over the engine's autoregressive loop (95% interval)")
    elif key == "speedup_vs_hf":
        axes.axvline(1.0, color="#228833", linestyle=":", linewidth=1.5, label="transformers generate (1.0)")
        axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, fontsize=8, frameon=False)
        axes.set_xlabel("throughput speedup over transformers' generate, the faster baseline (95% interval)")
    else:
        axes.set_xlabel("tokens/s, total over the units (95% interval)")
    axes.set_xlim(0, right * 1.1)
    axes.grid(axis="x", alpha=0.3)
    shared = shared_name(points)
    axes.set_title(
        f"sweep points, {chart_verdict(answer)}" + (f"\nevery point: {shared}" if shared else ""), fontsize=10
    )
    figure_.tight_layout()
    return figure_


def chart_verdict(answer: SweepAnswer) -> str:
    """The chart's title, as the verdict has it: the fastest point on top, or the first not separated."""
    if answer.best is not None:
        return "the fastest on top (separated from every other point)"
    return "ranked by their figures; no single fastest (see the parent run's description)"
