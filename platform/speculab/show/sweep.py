"""A sweep's answer as a person sees it outside the parent's description: the console's ranking table (the
top points, each figure with its interval simultaneous over the sweep's points, the leader's ratio over
it and where it stands), the table of the contrasts asked for, and the chart of every point."""

from __future__ import annotations

import math
import statistics

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from rich import box
from rich.table import Table

from speculab.results.sweep import figure, labels, shared_name
from speculab.results.verdicts import Call, Contrast, SweepAnswer
from speculab.show.answers import adjusted_words, level_words, standing_words
from speculab.stats import ratio_text

TOP = 8  # rows of the ranking the console shows (its last screen: 24 lines); beyond, it says where the rest are
LEADER_OVER = "#1 over it"  # the ranking's column: the leader's ratio over the point, at its test's level
STANDING = "fastest?"  # the ranking's column: fastest, in the running, out
AHEAD_HIT = "ahead_hit_rate"  # drafter.ahead=ssd: its column, where a point drafted ahead


def ranking_caption(answer: SweepAnswer) -> str:
    """What the ranking's intervals and words mean, under it, in three short lines: the intervals (and how
    far the first row's may read high), the standings, the family."""
    count, key, chosen = len(answer.ranked), answer.key, answer.leader_figure
    level = level_words(answer.versus[0]) if answer.versus else ""
    high = f"; #1 reads ~{chosen.overstates:.0%} high as the highest" if chosen.overstates > 0.005 else ""
    lines = [
        f"{key}: simultaneous over the {count} points{high}" + (f"; {LEADER_OVER} at {level}" if level else ""),
        "out: some point is at least as fast · in the running: not ruled out as the fastest",
        f"{answer.family}" + (f" · every point: {shared_name(answer.ranked)}" if shared_name(answer.ranked) else ""),
    ]
    if count > TOP:
        lines.insert(0, f"top {TOP} of {count} points; all of them: the parent run's sweep_table.md")
    return "\n".join(lines)


def ranking_table(answer: SweepAnswer, title: str) -> Table:
    """The console's end of a sweep: the top points, each figure with its simultaneous interval, the
    leader's ratio over each with its interval at its test's level, and where each stands; named by what
    sets them apart (what they share is the caption)."""
    points, key = answer.ranked, answer.key
    table = Table(title=title, caption=ranking_caption(answer), box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    ahead = any(AHEAD_HIT in p.figures for p in points)  # a sweep over drafting ahead: its hit rates beside
    for column in ("#", "point", key, LEADER_OVER, STANDING, *(["ahead hits"] if ahead else [])):
        table.add_column(column, justify="left" if column in ("point", STANDING) else "right")
    short = labels(points)
    versus = ["", *(ratio_text(v.ratio) for v in answer.versus)]
    for place, (point, shown, over) in enumerate(zip(points[:TOP], answer.figures, versus), start=1):
        hits = figure(point, AHEAD_HIT).value
        cells = [ratio_text(shown), over, standing_words(answer, point)]
        cells += [("" if math.isnan(hits) else f"{hits:.0%}")] if ahead else []
        table.add_row(str(place), short[point.shape.name], *cells)
    return table


def contrast_words(contrast: Contrast, a: str, b: str) -> str:
    """`gbv faster`, `block faster` or `inconclusive` (`too few units`)."""
    return {Call.ABOVE: f"{a} faster", Call.BELOW: f"{b} faster"}.get(
        contrast.verdict.call, contrast.verdict.call.value
    )


def contrast_rows(answer: SweepAnswer) -> list[tuple[str, str, str, str, str]]:
    """(setting, which over which, the ratio with its interval, its level, the verdict with its adjusted
    p-value) of each contrast, in the sweep's order."""
    rows = []
    for contrast in answer.contrasts:
        a, b = contrast.values
        verdict = contrast.verdict
        evidence = "" if verdict.call is Call.TOO_FEW else f" ({adjusted_words(verdict)})"
        said = contrast_words(contrast, a, b) + evidence
        rows.append((" ".join(contrast.setting), f"{a} / {b}", ratio_text(verdict.ratio), level_words(verdict), said))
    return rows


def contrast_table(answer: SweepAnswer, key: str) -> Table:
    """The contrasts the sweep was asked for (`sweep.contrast`), one row each, in the console."""
    table = Table(
        title=f"contrasts on {key}",
        caption=f"Holm; {answer.family}",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
    )
    for column in ("at", "ratio", "level", "verdict"):
        table.add_column(column, justify="right" if column in ("ratio", "level") else "left")
    for setting, which, ratio, level, said in contrast_rows(answer):
        table.add_row(f"{setting}: {which}", ratio, level, said)
    return table


def contrast_markdown(answer: SweepAnswer) -> str:
    """The contrasts as the parent's description and `sweep_contrasts.md` show them."""
    lines = [
        f"Contrasts on {answer.key} (Holm; {answer.family}):",
        "",
        "| at | ratio | level | verdict |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {setting}: {which} | {ratio} | {level} | {said} |"
        for setting, which, ratio, level, said in contrast_rows(answer)
    ]
    return "\n".join(lines) + "\n"


def sweep_figure(answer: SweepAnswer) -> Figure:
    """The ranking key per point (first on top) with its interval simultaneous over the points, each point
    labelled with its block efficiency and where it stands, the title saying what the verdict is; on the
    speedup axis, reference lines at 1 (autoregressive) and at transformers' generate, the legend below the
    axes so that it hides no bar."""
    key, points = answer.key, answer.ranked
    ordered, shown = points[::-1], answer.figures[::-1]
    figure_, axes = plt.subplots(figsize=(9, 2.2 + 0.45 * len(ordered)))
    values = [e.value for e in shown]
    errors = [
        [max(e.value - e.bar(0.0)[0], 0.0) for e in shown],
        [max(e.bar()[1] - e.value, 0.0) for e in shown],
    ]
    axes.barh(range(len(ordered)), values, xerr=errors, capsize=3, color="#4477aa", ecolor="#222222")
    short = labels(points)
    names = [
        f"{short[p.shape.name]}\nblock eff. {figure(p, 'block_efficiency').value:.2f} · {standing_words(answer, p)}"
        for p in ordered
    ]
    axes.set_yticks(range(len(ordered)), names, fontsize=8)
    right = max((v + e for v, e in zip(values, errors[1]) if not math.isnan(v)), default=1.0)
    spread = f"intervals simultaneous over the {len(points)} points, 95%"
    if key == "speedup_vs_ar":
        axes.axvline(1.0, color="#ee6677", linestyle="--", linewidth=1.2, label="autoregressive (1.0)")
        references = [r for p in points if not math.isnan(r := p.generate_vs_ar)]
        if references:
            hf = statistics.median(references)
            axes.axvline(hf, color="#228833", linestyle=":", linewidth=1.5, label=f"transformers generate ({hf:.2f})")
            right = max(right, hf)
        axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, fontsize=8, frameon=False)
        axes.set_xlabel(f"throughput speedup over the engine's autoregressive loop ({spread})")
    elif key == "speedup_vs_hf":
        axes.axvline(1.0, color="#228833", linestyle=":", linewidth=1.5, label="transformers generate (1.0)")
        axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, fontsize=8, frameon=False)
        axes.set_xlabel(f"throughput speedup over transformers' generate, the faster baseline ({spread})")
    else:
        axes.set_xlabel(f"tokens/s, total over the units ({spread})")
    axes.set_xlim(0, right * 1.1)
    axes.grid(axis="x", alpha=0.3)
    shared = shared_name(points)
    axes.set_title(
        f"sweep points, {chart_verdict(answer)}" + (f"\nevery point: {shared}" if shared else ""), fontsize=10
    )
    figure_.tight_layout()
    return figure_


def chart_verdict(answer: SweepAnswer) -> str:
    """The chart's title, as the verdict has it: the fastest point on top, or how many are in the running."""
    if answer.best is not None:
        return "the fastest on top (every other point ruled out)"
    return f"ranked by their figures; no single fastest ({len(answer.running())} in the running)"
