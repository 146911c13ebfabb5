"""A point's plots, as its MLflow page and the report show them: how many draft tokens each round
accepted, and how its wall time split between drafting, scoring, verifying and the rest."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # files, never a window: runs are often on machines without a display
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from speculab.core.records import RunResult
from speculab.results.figures import PHASES, acceptance_histogram
from speculab.results.names import Figures


def acceptance_figure(run: RunResult) -> Figure:
    counts = acceptance_histogram(run)
    figure, axes = plt.subplots(figsize=(8, 4.5))
    axes.bar(list(counts), list(counts.values()), color="#4477aa")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))  # tau is a count of tokens
    axes.set_xlabel("accepted draft tokens per round (tau)")
    axes.set_ylabel("sequence-rounds")
    axes.set_title("acceptance length")
    figure.tight_layout()
    return figure


PHASE_COLORS = dict(zip(PHASES, ("#4477aa", "#ee6677", "#228833", "#bbbbbb")))  # share_<phase>


def time_split_figure(figures: Figures) -> Figure:
    figure, axes = plt.subplots(figsize=(8, 2.6))
    left = 0.0
    for phase, color in PHASE_COLORS.items():
        share = figures.value(f"share_{phase}")
        axes.barh([0], [share], left=left, color=color, label=f"{phase} {share:.0%}")
        left += share
    axes.set_xlim(0, 1)
    axes.set_yticks([])
    axes.legend(ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.25), fontsize=11, frameon=False)
    axes.set_title("wall-time split")
    figure.tight_layout()
    return figure
