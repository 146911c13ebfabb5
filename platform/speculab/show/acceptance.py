"""Acceptance by depth across points: where each point's drafts stop being accepted.

A sweep's parent run and `speculab-report` show every point's conditional acceptance alpha_j
(`results.names.ACCEPTANCE_METRICS`) as one curve over the draft depth j (a panel per point beyond
four, so that twelve stay readable), one standard error over
prompts either side as a band, with the overlap sum_x min(p_j, q_j) beside it dashed (what token
verification accepts with: a verifier that gains over it shows above it), and the same figures
and the accepted-length histogram as a table. Points of different L share the plot: a curve
stops at its L.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from speculab.results.names import Figures
from speculab.stats import Estimate

Curves = dict[str, Figures]  # point label -> its figures (acceptance by depth among them)
# The table's rows per point: (label, stem, first depth or length, what of each estimate); alpha and
# overlap from depth 1 with their standard errors, the histogram's accepted lengths from 0.
FIGURES: tuple[tuple[str, str, int, Callable[[Estimate], float]], ...] = (
    ("alpha", "alpha", 1, lambda e: e.value),
    ("alpha se", "alpha", 1, lambda e: e.se),
    ("overlap", "overlap", 1, lambda e: e.value),
    ("overlap se", "overlap", 1, lambda e: e.se),
    ("hist", "hist", 0, lambda e: e.value),
)
DIGITS = ".3f"  # acceptance figures are shares: three decimals


def reached_depth(figures: Figures) -> int:
    """The deepest depth some round of the point reached: alpha_j is NaN past it (no round to count)."""
    alpha = figures.series("alpha")
    return next((j for j, e in enumerate(alpha) if math.isnan(e.value)), len(alpha))


MAX_OVERLAID = 4  # more curves than this, each with its band, cannot be told apart on one axes: a panel each
PANEL_COLUMNS = 4


def depth_figure(curves: Curves, note: str = "") -> Figure | None:
    """alpha_j against j, one line per point with a band of one standard error either side and its overlap dashed in
    the same colour, on one axes up to MAX_OVERLAID points and in a panel per point beyond (shared axes);
    None when no point drafted. ``note``: what every point shares."""
    drawn = [(label, figures) for label, figures in curves.items() if figures.series("alpha")]
    if not drawn:
        return None
    panels = [drawn] if len(drawn) <= MAX_OVERLAID else [[item] for item in drawn]
    columns = min(len(panels), PANEL_COLUMNS)
    rows = math.ceil(len(panels) / columns)
    size = (9, 5) if len(panels) == 1 else (3 * columns, 2.3 * rows + 1.2)
    figure, grid = plt.subplots(rows, columns, figsize=size, sharex=True, sharey=True, squeeze=False)
    for axes, panel in zip(grid.flat, panels):
        for label, figures in panel:
            depth_curve(axes, label, figures)
        if len(panel) == 1 and len(panels) > 1:
            axes.set_title(panel[0][0], fontsize=8)
        else:
            axes.legend(fontsize=8)
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.set(ylim=(0, 1.02))
        axes.grid(alpha=0.3)
    for axes in grid.flat[len(panels) :]:
        axes.set_visible(False)
    figure.supxlabel("draft depth j", fontsize=9)
    figure.supylabel("α_j: P(depth j accepted | depths 1..j-1 accepted)", fontsize=9)
    lines = (
        "bands: ± one standard error over prompts; dashed: mean overlap Σ_x min(p_j, q_j) of the rounds that "
        "reached depth j"
    )
    figure.suptitle("\n".join(filter(None, ("acceptance by draft depth", lines, note))), fontsize=9)
    figure.tight_layout()
    return figure


def depth_curve(axes: Any, label: str, figures: Figures) -> None:
    """One point's alpha_j line, its band of one standard error and its overlap dashed, in one colour."""
    alpha = figures.series("alpha")
    depths = list(range(1, len(alpha) + 1))
    (line,) = axes.plot(depths, [e.value for e in alpha], marker="o", label=label)
    if all(e.has_interval or e.has_se for e in alpha):
        low, high = zip(*(e.bar(0.0, 1.0) for e in alpha))  # a rate's band stays in [0, 1]
        axes.fill_between(depths, low, high, color=line.get_color(), alpha=0.18, linewidth=0)
    if overlap := figures.series("overlap"):
        axes.plot(depths, [e.value for e in overlap], linestyle="--", marker="x", color=line.get_color(), linewidth=1)


def length_figure(curves: Curves, note: str = "") -> Figure | None:
    """The accepted-length histogram (DDTree Fig. 4's form), bars side by side per point; None when
    no point drafted."""
    drawn = {label: [e.value for e in figures.series("hist", 0)] for label, figures in curves.items()}
    drawn = {label: shares for label, shares in drawn.items() if shares}
    if not drawn:
        return None
    figure, axes = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / len(drawn)
    for i, (label, shares) in enumerate(drawn.items()):
        axes.bar([n - 0.4 + (i + 0.5) * width for n in range(len(shares))], shares, width=width, label=label)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set(xlabel="accepted draft tokens per round n (τ with the bonus token: n + 1)", ylabel="share of rounds")
    axes.legend(fontsize=8)
    axes.grid(axis="y", alpha=0.3)
    figure.suptitle("\n".join(filter(None, ("accepted-length histogram", note))), fontsize=9)
    figure.tight_layout()
    return figure


def depth_rows(curves: Curves) -> list[dict[str, Any]]:
    """One row per point and figure (`alpha`, `alpha low`, ..., `hist`), one column per depth (the
    histogram's per accepted length), the same columns in every row (empty where a point has none)."""
    rows: list[dict[str, Any]] = []
    for label, figures in curves.items():
        for name, stem, first, part in FIGURES:
            if estimates := figures.series(stem, first):
                cells = {str(first + i): round(part(e), 4) for i, e in enumerate(estimates)}
                rows.append({"point": label, "figure": name, **cells})
    depths = sorted({int(c) for row in rows for c in row if c not in ("point", "figure")})
    return [{c: row.get(c, "") for c in ("point", "figure", *map(str, depths))} for row in rows]


def depth_csv(curves: Curves) -> str:
    rows = depth_rows(curves)
    out = io.StringIO()
    if rows:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return out.getvalue()


def _cell(figures: Figures, key: str) -> str:
    return "" if key not in figures or math.isnan(figures[key].value) else f"{figures[key]:{DIGITS}}"


def depth_markdown(curves: Curves) -> str:
    """alpha_j and the overlap per depth (each ± its standard error), and the share of rounds per accepted
    length, a row per point and figure, up to the deepest depth a point's rounds reached."""
    drafted = {label: figures for label, figures in curves.items() if figures.series("alpha")}
    if not drafted:
        return ""
    L = max(map(reached_depth, drafted.values()))
    lines = [
        "| point | figure | " + " | ".join(f"j={j}" for j in range(1, L + 1)) + " |",
        "|" + "---|" * (L + 2),
    ]
    for label, figures in drafted.items():
        for stem in ("alpha", "overlap"):
            cells = " | ".join(_cell(figures, f"{stem}_{j}") for j in range(1, L + 1))
            lines.append(f"| {label} | {stem} | {cells} |")
    lines += ["", "| point | " + " | ".join(f"n={n}" for n in range(L + 1)) + " |", "|" + "---|" * (L + 2)]
    for label, figures in drafted.items():
        lines.append(f"| {label} | " + " | ".join(_cell(figures, f"hist_{n}") for n in range(L + 1)) + " |")
    return (
        "alpha_j: rounds that accepted depth j over those that reached it (± one standard error over prompts); "
        "overlap: the mean of sum_x min(p_j, q_j) over the same rounds. n: share of rounds that accepted n draft "
        "tokens.\n\n" + "\n".join(lines) + "\n"
    )
