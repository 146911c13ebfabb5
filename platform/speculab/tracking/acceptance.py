"""Acceptance by depth across points: where each point's drafts stop being accepted.

A sweep's parent run and `speculab-report` show every point's conditional acceptance alpha_j
(`tracking.metrics.ACCEPTANCE_METRICS`) as one curve over the draft depth j, its 95% interval
over prompts as a band, with the overlap sum_x min(p_j, q_j) beside it dashed (what token
verification accepts with: a verifier that gains over it shows above it), and the same figures
and the accepted-length histogram as a table. Points of different L share the plot: a curve
stops at its L.
"""

from __future__ import annotations

import csv
import io
import math
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from speculab.tracking.metrics import depth_series

Curves = dict[str, dict[str, float]]  # point label -> its metrics by key (alpha_1, alpha_1_ci_low, ..., hist_0)
# The table's figures: (stem, first depth or length, key ending); alpha and overlap from depth 1, the
# histogram's accepted lengths from 0.
FIGURES = (
    ("alpha", 1, ""),
    ("alpha", 1, "_ci_low"),
    ("alpha", 1, "_ci_high"),
    ("overlap", 1, ""),
    ("overlap", 1, "_ci_low"),
    ("overlap", 1, "_ci_high"),
    ("hist", 0, ""),
)


def reached_depth(metrics: dict[str, float]) -> int:
    """The deepest depth some round of the point reached: alpha_j is NaN past it (no round to count)."""
    alpha = depth_series(metrics, "alpha")
    return next((j for j, value in enumerate(alpha) if math.isnan(value)), len(alpha))


def depth_figure(curves: Curves, note: str = "") -> Figure | None:
    """alpha_j against j, one line per point with its interval as a band and its overlap dashed in
    the same colour; None when no point drafted. ``note``: what every point shares."""
    drawn = {label: metrics for label, metrics in curves.items() if depth_series(metrics, "alpha")}
    if not drawn:
        return None
    figure, axes = plt.subplots(figsize=(9, 5))
    for label, metrics in drawn.items():
        alpha = depth_series(metrics, "alpha")
        depths = list(range(1, len(alpha) + 1))
        (line,) = axes.plot(depths, alpha, marker="o", label=label)
        low, high = (depth_series(metrics, "alpha", end=end) for end in ("_ci_low", "_ci_high"))
        if len(low) == len(high) == len(alpha):
            axes.fill_between(depths, low, high, color=line.get_color(), alpha=0.18, linewidth=0)
        if overlap := depth_series(metrics, "overlap"):
            axes.plot(depths, overlap, linestyle="--", marker="x", color=line.get_color(), linewidth=1)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set(xlabel="draft depth j", ylabel="α_j: P(depth j accepted | depths 1..j-1 accepted)", ylim=(0, 1.02))
    axes.legend(fontsize=8)
    axes.grid(alpha=0.3)
    lines = "bands: 95% CI over prompts; dashed: mean overlap Σ_x min(p_j, q_j) of the rounds that reached depth j"
    figure.suptitle("\n".join(filter(None, ("acceptance by draft depth", lines, note))), fontsize=9)
    figure.tight_layout()
    return figure


def length_figure(curves: Curves, note: str = "") -> Figure | None:
    """The accepted-length histogram (DDTree Fig. 4's form), bars side by side per point; None when
    no point drafted."""
    drawn = {label: hist for label, metrics in curves.items() if (hist := depth_series(metrics, "hist", first=0))}
    if not drawn:
        return None
    figure, axes = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / len(drawn)
    for i, (label, hist) in enumerate(drawn.items()):
        axes.bar([n - 0.4 + (i + 0.5) * width for n in range(len(hist))], hist, width=width, label=label)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set(xlabel="accepted draft tokens per round n (τ with the bonus token: n + 1)", ylabel="share of rounds")
    axes.legend(fontsize=8)
    axes.grid(axis="y", alpha=0.3)
    figure.suptitle("\n".join(filter(None, ("accepted-length histogram", note))), fontsize=9)
    figure.tight_layout()
    return figure


def depth_rows(curves: Curves) -> list[dict[str, Any]]:
    """One row per point and figure (`alpha`, `alpha_ci_low`, ..., `hist`), one column per depth
    (the histogram's per accepted length), the same columns in every row (empty where a point has none)."""
    rows: list[dict[str, Any]] = []
    for label, metrics in curves.items():
        for stem, first, end in FIGURES:
            if values := depth_series(metrics, stem, first, end):
                cells = {str(first + i): round(v, 4) for i, v in enumerate(values)}
                rows.append({"point": label, "figure": stem + end, **cells})
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


def _cell(metrics: dict[str, float], key: str) -> str:
    if key not in metrics or math.isnan(metrics[key]):
        return ""
    low, high = metrics.get(f"{key}_ci_low", math.nan), metrics.get(f"{key}_ci_high", math.nan)
    return f"{metrics[key]:.3f}" + ("" if math.isnan(low) else f" [{low:.2f}, {high:.2f}]")


def depth_markdown(curves: Curves) -> str:
    """alpha_j and the overlap per depth (with their intervals), and the share of rounds per accepted
    length, a row per point and figure, up to the deepest depth a point's rounds reached."""
    drafted = {label: m for label, m in curves.items() if depth_series(m, "alpha")}
    if not drafted:
        return ""
    L = max(map(reached_depth, drafted.values()))
    lines = [
        "| point | figure | " + " | ".join(f"j={j}" for j in range(1, L + 1)) + " |",
        "|" + "---|" * (L + 2),
    ]
    for label, metrics in drafted.items():
        for stem in ("alpha", "overlap"):
            cells = " | ".join(_cell(metrics, f"{stem}_{j}") for j in range(1, L + 1))
            lines.append(f"| {label} | {stem} | {cells} |")
    lines += ["", "| point | " + " | ".join(f"n={n}" for n in range(L + 1)) + " |", "|" + "---|" * (L + 2)]
    for label, metrics in drafted.items():
        lines.append(f"| {label} | " + " | ".join(_cell(metrics, f"hist_{n}") for n in range(L + 1)) + " |")
    return (
        "alpha_j: rounds that accepted depth j over those that reached it (95% CI over prompts); overlap: the "
        "mean of sum_x min(p_j, q_j) over the same rounds. n: share of rounds that accepted n draft tokens.\n\n"
        + "\n".join(lines)
        + "\n"
    )
