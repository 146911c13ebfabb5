"""Acceptance prompt by prompt, as a point's page and its sweep's parent show it: how the prompts' own
acceptance lengths spread, with the run's two means marked (per step: every round pooled; per request: the
prompts' own averaged), and the histogram of accepted draft tokens a round by draft length; a sweep's points
side by side. docs/measuring.md, "Per request", says what each mean is beside vLLM's and specdec_bench's."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from speculab.stats import Estimate

FILE = "acceptance_per_request.png"  # a point's and a sweep's parent's
MEANS = (("acceptance_length", "per step", "-"), ("acceptance_length_per_request", "per request", "--"))


def request_figure(
    lengths: list[float], means: dict[str, Estimate], histograms: dict[int, dict[int, int]], note: str
) -> Figure:
    """Left: the prompts' acceptance lengths (``lengths`` [prompt]) as a histogram, each of ``means`` (by key)
    a vertical line; right: the share of rounds that accepted tau draft tokens, one bar series per draft length
    (``histograms``: L -> tau -> rounds). ``note``: the point and its prompt count."""
    figure, (spread, rounds) = plt.subplots(1, 2, figsize=(11, 4.2), width_ratios=(3, 2))
    spread.hist(lengths, bins=min(24, max(6, len(lengths))), color="#88bbdd", edgecolor="#4477aa")
    for key, words, style in MEANS:
        if key in means and not math.isnan(means[key].value):
            spread.axvline(means[key].value, color="#222222", linestyle=style, label=f"{words} {means[key]:.3f}")
    spread.set(xlabel="a prompt's acceptance length: 1 + accepted drafts per round", ylabel="prompts")
    spread.yaxis.set_major_locator(MaxNLocator(integer=True))
    spread.legend(fontsize=8, title="the run's mean", title_fontsize=8)
    width = 0.8 / max(len(histograms), 1)
    for i, (length, counts) in enumerate(sorted(histograms.items())):
        total = sum(counts.values())
        at = [tau - 0.4 + (i + 0.5) * width for tau in counts]
        rounds.bar(at, [c / total for c in counts.values()], width=width, label=f"L={length}")
    rounds.xaxis.set_major_locator(MaxNLocator(integer=True))
    rounds.set(xlabel="accepted draft tokens a round (τ)", ylabel="share of rounds")
    rounds.legend(fontsize=8, title="draft length", title_fontsize=8)
    figure.suptitle(f"acceptance per request · {note}", fontsize=9)
    figure.tight_layout()
    return figure


def sweep_request_figure(points: dict[str, list[float]], note: str) -> Figure | None:
    """Each point's prompts' acceptance lengths as a box with the prompts as dots, and their mean (per request)
    as a diamond; None where no point kept them (``points``: label -> [prompt])."""
    drawn = {label: lengths for label, lengths in points.items() if lengths}
    if not drawn:
        return None
    figure, axes = plt.subplots(figsize=(max(6.0, 1.1 * len(drawn) + 2), 4.5))
    labels, series = list(drawn), list(drawn.values())
    axes.boxplot(series, tick_labels=labels, showfliers=False)
    for i, lengths in enumerate(series, start=1):
        axes.plot([i + 0.18] * len(lengths), lengths, ".", color="#4477aa", alpha=0.5, markersize=4)
        axes.plot([i], [sum(lengths) / len(lengths)], "D", color="#ee6677", markersize=6)
    axes.set(ylabel="a prompt's acceptance length\n(1 + accepted drafts per round)")  # one line overran 4.5 in
    axes.tick_params(axis="x", labelrotation=20, labelsize=8)
    axes.grid(axis="y", alpha=0.3)
    figure.suptitle(f"acceptance per request; diamond: the mean over prompts · {note}", fontsize=9)
    figure.tight_layout()
    return figure
