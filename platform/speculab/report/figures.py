"""The sweep report's plots (`speculab-report`), one per question the papers ask of a sweep.

Each takes the sweep's points and returns a figure, or None when the sweep does not vary
what the plot is about (one K value: no block efficiency vs K). A line is one series of
points that differ only along the plot's x axis, labelled by the dimensions that set it apart
from the other series; error bars are a speed figure's 95% interval, or one standard error either
side of an acceptance figure (block efficiency, τ), where there are any.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from itertools import pairwise
from textwrap import fill

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from speculab.drafting.ddtree import CHAIN
from speculab.report.points import Point, Value, constants, dimensions, sort_key, varying
from speculab.results.names import is_acceptance
from speculab.show.acceptance import Curves, depth_figure, length_figure
from speculab.show.plots import PHASE_COLORS
from speculab.stats import Estimate

Figure_ = Callable[[Point], Estimate | None]  # a point's figure to plot (None: the point has none)
Bounds = Callable[[Point], tuple[float, float]]  # the least and the most a point's figure can be


def of(key: str) -> Figure_:
    """A point's figure ``key`` as it logged it."""
    return lambda point: point.result.figures.get(key)


def point_label(point: Point, among: list[str]) -> str:
    """The point's coordinates along the dimensions ``among`` (`GBV K=2 L=8`)."""
    coordinate = dimensions(point)
    return " ".join(
        str(coordinate[d]) if d == "Method" else f"{d}={coordinate[d]}" for d in among if coordinate[d] is not None
    )


def series(points: list[Point], x: str) -> dict[str, list[Point]]:
    """Points grouped into lines along ``x`` (each sorted by it), labelled by the other varying
    dimensions; lines in the order of those dimensions (L=8 before L=16)."""
    others = [d for d in varying(points) if d != x]
    lines: dict[tuple, list[Point]] = {}
    for point in points:
        coordinate = dimensions(point)
        lines.setdefault(tuple(sort_key(coordinate[d]) for d in others), []).append(point)
    return {
        point_label(line[0], others) or "all points": sorted(line, key=lambda p: sort_key(dimensions(p)[x]))
        for _, line in sorted(lines.items())
    }


def non_negative(point: Point) -> tuple[float, float]:
    """The possible values of a speed figure."""
    return 0.0, math.inf


def tokens_per_round(point: Point) -> tuple[float, float]:
    """The possible values of block efficiency (τ): the bonus token alone, up to all L drafted and the bonus."""
    return 1.0, point.result.shape.L + 1.0


def plot_lines(
    axes: Axes, lines: dict[str, list[Point]], x: str, y: Figure_, bounds: Bounds = non_negative
) -> dict[str, str]:
    """One line per series, error bars where there are (`Estimate.bar`), kept within each point's
    `bounds`, the figure's possible values (a standard error over few prompts can reach past them);
    lines are nudged apart along a linear x axis so that their bars do not hide each other. Returns
    each line's colour."""
    colors: dict[str, str] = {}
    swept = sorted(
        {float(v) for line in lines.values() for p in line if isinstance(v := dimensions(p)[x], int | float)}
    )
    step = min((b - a for a, b in pairwise(swept)), default=1.0)
    for i, (label, line) in enumerate(lines.items()):
        shown = [(dimensions(p)[x], e, e.bar(*bounds(p))) for p in line if (e := y(p)) is not None]
        xs = [float(v) for v, _, _ in shown if isinstance(v, int | float)]
        if len(xs) != len(shown):
            continue  # a line without this coordinate (the DDTree chain has no budget B)
        nudge = 0.0 if axes.get_xscale() == "log" else (i - (len(lines) - 1) / 2) * 0.03 * step
        errors = [
            [max(e.value - low, 0.0) for _, e, (low, _) in shown],
            [max(high - e.value, 0.0) for _, e, (_, high) in shown],
        ]
        drawn = axes.errorbar(
            [v + nudge for v in xs], [e.value for _, e, _ in shown], yerr=errors, marker="o", capsize=3, label=label
        )
        colors[label] = to_hex(drawn.lines[0].get_color())
    axes.set_xticks(swept, [f"{v:g}" for v in swept])
    axes.legend(fontsize=8)
    axes.grid(alpha=0.3)
    return colors


def titled(figure: Figure, title: str, points: list[Point], intervals: bool = False) -> Figure:
    """The figure's title, with what every point shares (and what the error bars are) beneath it."""
    note = constants(points) + (
        "; error bars: 95% interval (speed), ± one standard error (acceptance)" if intervals else ""
    )
    figure.suptitle(f"{title}\n{fill(note, width=int(figure.get_figwidth() * 13))}", fontsize=10)
    figure.tight_layout()
    return figure


def values(points: list[Point], dimension: str) -> set[Value]:
    return {dimensions(p)[dimension] for p in points}


def efficiency_vs_k(points: list[Point]) -> Figure | None:
    """GBV Tables 1 and 6: block efficiency against the number of paths K, one line per L (and method)."""
    if len(values(points, "K")) < 2:
        return None
    figure, axes = plt.subplots(figsize=(8, 5))
    plot_lines(axes, series(points, "K"), "K", of("block_efficiency"), tokens_per_round)
    axes.set(xlabel="draft paths K", ylabel="block efficiency (tokens per target call)")
    return titled(figure, "block efficiency vs K", points, intervals=True)


def speedup_vs_l(points: list[Point]) -> Figure | None:
    """BV Fig. 4 and GBV Table 6: speedup over autoregressive decoding against the draft length L."""
    if len(values(points, "L")) < 2:
        return None
    figure, axes = plt.subplots(figsize=(8, 5))
    plot_lines(axes, series(points, "L"), "L", of("speedup_vs_ar"))
    axes.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
    axes.set(xlabel="draft length L", ylabel="speedup over autoregressive")
    return titled(figure, "speedup vs L", points, intervals=True)


def tau_vs_budget(points: list[Point]) -> Figure | None:
    """DDTree Sec. 5: tau and speedup against the node budget B (log scale); the drafter's chain,
    which has no budget, as a dashed line per temperature, and a budget chosen each round
    (`algorithm.budget=auto`) as a dotted one."""
    trees = [p for p in points if isinstance(dimensions(p)["B"], int)]
    if len(values(trees, "B")) < 2:
        return None
    lines = [(p, "chain", "--") for p in points if p.result.shape.tree == CHAIN]
    lines += [(p, "B=auto", ":") for p in points if p.result.shape.budget_auto]
    figure, (tau_axes, speed_axes) = plt.subplots(1, 2, figsize=(12, 5))
    for axes, y, name, bounds in (
        (tau_axes, of("block_efficiency"), "τ (tokens per round, bonus included)", tokens_per_round),
        (speed_axes, of("speedup_vs_ar"), "speedup over autoregressive", non_negative),
    ):
        axes.set_xscale("log", base=2)
        colors = plot_lines(axes, series(trees, "B"), "B", y, bounds)
        for point, kind, style in lines:
            if (estimate := y(point)) is not None:
                label = point_label(point, [d for d in varying(trees) if d != "B"])
                axes.axhline(estimate.value, linestyle=style, linewidth=1, color=colors.get(label, "grey"))
                axes.annotate(
                    f"{kind} {label}",
                    (0.01, estimate.value),
                    xycoords=("axes fraction", "data"),
                    fontsize=8,
                )
        axes.set(xlabel="node budget B", ylabel=name)
    title = "DDTree: τ and speedup vs node budget (dashed: the drafter's chain; dotted: B=auto)"
    return titled(figure, title, points, intervals=True)


def time_split(points: list[Point]) -> Figure | None:
    """GBV App. I, Table 6: each point's wall time split into draft, target, verify and other."""
    shares = {phase: f"share_{phase}" for phase in PHASE_COLORS}
    timed = [p for p in points if all(key in p.result.figures for key in shares.values())]
    if not timed:
        return None
    among = varying(timed)
    ordered = sorted(timed, key=lambda p: [sort_key(dimensions(p)[d]) for d in among])[::-1]
    figure, axes = plt.subplots(figsize=(9, 1.4 + 0.35 * len(ordered)))
    left = [0.0] * len(ordered)
    for phase, color in PHASE_COLORS.items():
        widths = [p.result.figures.value(shares[phase]) for p in ordered]
        axes.barh(range(len(ordered)), widths, left=left, color=color, label=phase)
        left = [a + b for a, b in zip(left, widths)]
    axes.set_yticks(range(len(ordered)), [point_label(p, among) or p.name for p in ordered], fontsize=8)
    axes.set_xlim(0, 1)
    axes.set_xlabel("share of wall time")
    axes.legend(ncol=4, loc="lower center", bbox_to_anchor=(0.5, 1.0), fontsize=9, frameon=False)
    return titled(figure, "wall-time split per point", timed)


def kv_vs_tree_size(points: list[Point]) -> Figure | None:
    """GBV App. I: peak KV cache of target and draft against the scored tree's size."""
    nodes, target, draft = "tree_nodes_mean", "kv_peak_mb_target", "kv_peak_mb_draft"
    sized = [p for p in points if nodes in p.result.figures and target in p.result.figures]
    if len(sized) < 2:
        return None
    figure, axes = plt.subplots(figsize=(8, 5))
    for role, key, marker in (("target", target, "o"), ("draft", draft, "s")):
        shown = [p for p in sized if key in p.result.figures]
        axes.scatter(
            [p.result.figures.value(nodes) for p in shown],
            [p.result.figures.value(key) for p in shown],
            marker=marker,
            label=f"{role} KV peak",
        )
    axes.set(xlabel="tree size (nodes per scored tree, root included)", ylabel="peak KV cache (MiB)")
    axes.legend(fontsize=9)
    axes.grid(alpha=0.3)
    return titled(figure, "KV footprint vs tree size", sized)


def acceptance_curves(points: list[Point]) -> Curves:
    """Each point's figures, labelled by its coordinates that vary across the points (those that drafted)."""
    among = varying(points)
    return {
        point_label(p, among) or p.name: p.result.figures for p in points if any(map(is_acceptance, p.result.figures))
    }


def acceptance_by_depth(points: list[Point]) -> Figure | None:
    """alpha_j per point with the overlap beside it (`show.acceptance`); no paper plots it."""
    return depth_figure(acceptance_curves(points), constants(points))


def accepted_length(points: list[Point]) -> Figure | None:
    """DDTree Fig. 4: the accepted-length histogram per point."""
    return length_figure(acceptance_curves(points), constants(points))


FIGURES: dict[str, Callable[[list[Point]], Figure | None]] = {
    "block_efficiency_vs_K.png": efficiency_vs_k,
    "speedup_vs_L.png": speedup_vs_l,
    "tau_vs_budget.png": tau_vs_budget,
    "time_split.png": time_split,
    "kv_vs_tree_size.png": kv_vs_tree_size,
    "acceptance_by_depth.png": acceptance_by_depth,
    "accepted_length.png": accepted_length,
}
