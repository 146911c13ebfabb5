"""What a sweep's parent run shows: one row per finished point, ranked, the table in markdown
and CSV, a chart of the points, the best point (or the points that tie for it) and a
description of what was swept.

Points are ranked by `speedup_vs_ar`, a median of paired ratios (`speculab.measure`), which a
busy machine moves far less than raw tokens/s; a sweep without the autoregressive baseline
ranks by tokens/s. The leader is named the best only when its 95% interval lies wholly above
every other point's; otherwise every point whose interval reaches the leader's lower end ties.
Points come from their own results in this process (`MlflowSweepCallback`), so the summary is
written (or spooled) even when MLflow was down during the sweep. A point that a resumed sweep
(`resume=true`) skipped returns the figures its earlier run logged, so the parent of the resumed
launch still reports every point of the sweep, those rows marked `resumed`.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from rich.table import Table

from speculab.results.names import HEADLINE, HF_PREFIX, interval_names, mlflow_name
from speculab.results.point import PointResult, PointShape
from speculab.stats import Estimate

TOP = 10  # rows of the ranking the console shows; beyond, it says how many more and where they are
RESUMED = "resumed"  # the table's column of points finished in an earlier launch (`resume=true`)
HF_SPEEDUP = f"{HF_PREFIX}speedup_vs_ar"  # the table's column of generate's own paired speedup over the engine's loop


@dataclass(frozen=True)
class SweepVerdict:
    """The sweep's answer: its best point, or the points tied for first."""

    key: str  # what the points are ranked by
    tied: list[PointResult]  # the best point alone, or every point tied with the leader

    @property
    def best(self) -> PointResult | None:
        return self.tied[0] if len(self.tied) == 1 else None


def swept_keys(overrides: list[str]) -> list[str]:
    """The keys (or config groups) an override list sweeps: those given several values."""
    return [o.split("=", 1)[0].lstrip("+~") for o in overrides if "," in o]


def sweep_name(shape: PointShape, overrides: list[str]) -> str:
    """The parent run's name: what is swept, then the settings every point shares (algorithm, K,
    L, T, drafter, dataset, model: those no swept key or group touches), from a point's shape."""
    swept = swept_keys(overrides)

    def held(*keys: str) -> bool:
        return not any(k == s or k.startswith(f"{s}.") for k in keys for s in swept)

    lengths = (("K", shape.K), ("L", shape.L))
    parts = [f"{key}={value}" for key, value in lengths if value is not None and held(f"algorithm.{key}")]
    if held("sampling.temperature"):
        parts.append(f"T={shape.temperature}")
    if held("algorithm.name"):
        parts.insert(0, shape.algorithm)
    fixed = [" ".join(parts)] if parts else []
    if held("drafter.name"):
        fixed.append(shape.drafter)
    if held("dataset.name", "dataset.num_prompts"):
        fixed.append(f"{shape.dataset}×{shape.prompt_count}")
    if held("model.name"):
        fixed.append(shape.model)
    varied = " ".join(o for o in overrides if "," in o) or " ".join(overrides)
    return " · ".join([f"sweep {varied}".strip(), *fixed])


def figure(point: PointResult, key: str) -> Estimate:
    """A point's figure, NaN where it has none (a sweep without a baseline has no speedups)."""
    return point.figures.get(key, Estimate(math.nan))


def point_row(point: PointResult) -> dict[str, Any]:
    """A point's row as numbers: its name and shape, then its headline figures, each with the ends of its
    interval where it has one, generate's speedup over the engine's loop and, for a point finished in an
    earlier launch, `resumed: yes`."""
    s = point.shape
    shape: dict[str, Any] = {"algorithm": s.algorithm, "K": s.K, "L": s.L}
    if s.budget is not None:
        shape["budget"] = s.budget
    shape |= {"T": s.temperature, "drafter": s.drafter}
    figures: dict[str, float] = {}
    for key in HEADLINE:
        if (estimate := point.figures.get(key)) is not None:
            figures[key] = round(estimate.value, 4)
            if estimate.has_interval:
                low, high = interval_names(key)
                figures |= {low: round(estimate.low, 4), high: round(estimate.high, 4)}
    reference = {} if math.isnan(point.generate_vs_ar) else {HF_SPEEDUP: round(point.generate_vs_ar, 4)}
    resumed = {RESUMED: "yes"} if point.resumed else {}
    return {"point": s.name, **shape, **figures, **reference, **resumed}


def table_rows(points: list[PointResult]) -> list[dict[str, Any]]:
    """Rows with the same columns, in ranking order; a column no point has a value in is left out
    (`budget` in a sweep without a best-first tree)."""
    rows = [point_row(point) for point in ranked(points)]
    columns = list(dict.fromkeys(column for row in rows for column in row))
    return [{column: "" if row.get(column) is None else row.get(column, "") for column in columns} for row in rows]


def rank_key(points: list[PointResult]) -> str:
    """speedup_vs_ar where every point has it, else tokens_per_s."""
    return "speedup_vs_ar" if all(not math.isnan(figure(p, "speedup_vs_ar").value) for p in points) else "tokens_per_s"


def ranked(points: list[PointResult]) -> list[PointResult]:
    key = rank_key(points)
    return sorted(points, key=lambda p: -v if not math.isnan(v := figure(p, key).value) else math.inf)


def verdict(points: list[PointResult]) -> SweepVerdict:
    """The leader alone when its interval is clear of every other point's; else all that reach its lower
    end (a point without an interval cannot be told apart, so it ties)."""
    key = rank_key(points)
    leader, *rest = ranked(points)
    low = figure(leader, key).low

    def reaches(point: PointResult) -> bool:
        return not figure(point, key).high < low  # NaN on either side: not clear

    return SweepVerdict(key, [leader, *(p for p in rest if reaches(p))])


def _parts(points: list[PointResult]) -> tuple[list[list[str]], set[int]]:
    """Each point name's ` · `-separated parts, and the positions where every point has the same part."""
    parts = [p.shape.name.split(" · ") for p in points]
    return parts, {i for i in range(min(map(len, parts))) if len({p[i] for p in parts}) == 1}


def labels(points: list[PointResult]) -> dict[str, str]:
    """Point name -> the parts of it that not every point shares."""
    parts, shared = _parts(points)
    kept = [" · ".join(x for i, x in enumerate(p) if i not in shared) for p in parts]
    return {p.shape.name: label or p.shape.name for p, label in zip(points, kept)}


def shared_name(points: list[PointResult]) -> str:
    """The parts of the point names that every point shares (` · `-joined)."""
    parts, shared = _parts(points)
    return " · ".join(parts[0][i] for i in sorted(shared))


def cell(point: PointResult, key: str) -> str:
    return f"{figure(point, key):.3g}"


def sweep_markdown(points: list[PointResult]) -> str:
    """Every point in ranking order: its name and shape, each headline figure with its interval,
    generate's speedup over the engine's loop and which points an earlier launch finished."""
    rows = table_rows(points)
    shape = [c for c in ("point", "algorithm", "K", "L", "budget", "T", "drafter") if c in rows[0]]
    figures = [key for key in HEADLINE if any(key in p.figures for p in points)]
    columns = [*shape, *figures, *(c for c in (HF_SPEEDUP, RESUMED) if c in rows[0])]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for point, row in zip(ranked(points), rows):
        cells = [cell(point, c) if c in HEADLINE else str(row[c]) for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def sweep_csv(points: list[PointResult]) -> str:
    rows = table_rows(points)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def ranking_table(points: list[PointResult], title: str) -> Table:
    """The console's end of a sweep: the top points with their intervals, named by what sets them apart
    (what they share is the caption)."""
    key = rank_key(points)
    shared = f"every point: {shared_name(points)}" if shared_name(points) else ""
    rest = (
        f"top {TOP} of {len(points)} points; all of them: the parent run's sweep_table.md" if len(points) > TOP else ""
    )
    table = Table(title=title, caption="\n".join(filter(None, (rest, shared))) or None)
    other = "tokens_per_s" if key != "tokens_per_s" else "speedup_vs_hf"
    for column in ("#", "point", key, other, "block eff."):
        table.add_column(column, justify="left" if column == "point" else "right")
    short = labels(points)
    for place, point in enumerate(ranked(points)[:TOP], start=1):
        cells = (cell(point, key), cell(point, other), f"{figure(point, 'block_efficiency').value:.3g}")
        table.add_row(str(place), short[point.shape.name], *cells)
    return table


def verdict_line(found: SweepVerdict, short: dict[str, str] | None = None) -> str:
    """One sentence: the best point, or which points tie (named by `short` where given)."""

    def name(point: PointResult) -> str:
        return (short or {}).get(point.shape.name, point.shape.name)

    if found.best is not None:
        shown = f"{found.key} {cell(found.best, found.key)}"
        return f"Best: **{name(found.best)}**, {shown}: its 95% interval lies above every other point's."
    return (
        f"No single best: {len(found.tied)} points tie on {found.key} within their 95% intervals "
        f"(the leader's lower end is inside the others'): {'; '.join(map(name, found.tied))}."
    )


def sweep_figure(points: list[PointResult]) -> Figure:
    """The ranking key per point (best on top) with its 95% interval, each point labelled with its
    block efficiency; on the speedup axis, reference lines at 1 (autoregressive) and at
    transformers' generate, the legend below the axes so that it hides no bar."""
    key = rank_key(points)
    ordered = ranked(points)[::-1]
    figure_, axes = plt.subplots(figsize=(9, 2.2 + 0.45 * len(ordered)))
    shown = [figure(p, key) for p in ordered]
    values = [e.value for e in shown]
    errors = [
        [max(e.value - e.low, 0.0) if e.has_interval else 0.0 for e in shown],
        [max(e.high - e.value, 0.0) if e.has_interval else 0.0 for e in shown],
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
        axes.set_xlabel("speedup over the engine's autoregressive loop (median of paired ratios, 95% interval)")
    else:
        axes.set_xlabel("tokens/s (median over prompts, 95% interval)")
    axes.set_xlim(0, right * 1.1)
    axes.grid(axis="x", alpha=0.3)
    shared = shared_name(points)
    axes.set_title("sweep points, best on top" + (f"\nevery point: {shared}" if shared else ""), fontsize=10)
    figure_.tight_layout()
    return figure_


def best_metrics(found: SweepVerdict) -> dict[str, float]:
    """The best point's headline figures as `best/<name>` (none when points tie), and how many tie."""
    metrics = {"sweep/tied_points": float(len(found.tied))}
    if found.best is not None:
        best = found.best.figures
        metrics |= {f"best/{mlflow_name(key)}": best[key].value for key in HEADLINE if key in best}
    return metrics


def ranking_markdown(points: list[PointResult]) -> str:
    """Every point in ranking order, named by what sets it apart, each figure with its interval."""
    short, shown = labels(points), ("speedup_vs_ar", "tokens_per_s", "speedup_vs_hf", "block_efficiency")
    lines = ["| # | point | " + " | ".join(shown) + " |", "|" + "---|" * (len(shown) + 2)]
    for place, point in enumerate(ranked(points), start=1):
        lines.append(f"| {place} | {short[point.shape.name]} | " + " | ".join(cell(point, f) for f in shown) + " |")
    return "\n".join(lines) + "\n"


def sweep_description(overrides: str, points: list[PointResult]) -> str:
    answer = verdict_line(verdict(points), labels(points))
    shared = f" Every point: {shared_name(points)}." if shared_name(points) else ""
    resumed = sum(point.resumed for point in points)
    earlier = (
        f" {resumed} of these points finished in an earlier launch of this sweep (`resume=true`, column `{RESUMED}`): "
        "their runs stay nested under that launch's parent."
        if resumed
        else ""
    )
    # The verdict and the ranking first: MLflow shows a description's first lines only, until "Show more".
    return (
        f"{answer} {ranking_line(points)}\n\nSweep `{overrides}`: {len(points)} finished point(s), ranked by "
        f"{rank_key(points)} (medians of paired, interleaved measurements; 95% intervals over prompts).{shared}"
        f"{earlier} Every column: `sweep_table.md`, `sweep_table.csv`; the plot: `sweep_points.png`; acceptance "
        f"by draft depth: `acceptance_by_depth.png`, `.md`, `.csv`.\n\n{ranking_markdown(points)}"
    )


def ranking_line(points: list[PointResult]) -> str:
    """Every point in ranking order on one line, each with its ranking figure and interval."""
    key, short = rank_key(points), labels(points)
    return f"Ranked by {key}: " + "; ".join(
        f"{place}. {short[p.shape.name]} {cell(p, key)}" for place, p in enumerate(ranked(points), start=1)
    )
