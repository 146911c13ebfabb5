"""What a sweep's parent run shows: one row per finished point, ranked, the table in markdown
and CSV, a chart of the points, the best point (or the points that tie for it) and a
description of what was swept.

Points are ranked by `speedup_vs_ar`, a median of paired ratios (`speculab.measure`), which a
busy machine moves far less than raw tokens/s; a sweep without the autoregressive baseline
ranks by tokens/s. The leader is named the best only when its 95% interval lies wholly above
the runner-up's; otherwise every point whose interval reaches the leader's lower end ties.
Rows come from the points' own return values in this process (`MlflowSweepCallback`), so the
summary is written (or spooled) even when MLflow was down during the sweep. A point that a resumed
sweep (`resume=true`) skipped returns the metrics its earlier run logged (`resumed_metrics`), so
the parent of the resumed launch still reports every point of the sweep, those rows marked
`resumed`.
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

from speculab.algorithms import get_algorithm
from speculab.config import Config
from speculab.tracking.metrics import (
    ENDS,
    HEADLINE,
    HF_PREFIX,
    INTERVALS,
    acceptance_logged,
    is_acceptance,
    mlflow_name,
    read_metric,
)
from speculab.tracking.runs import run_name

HF_SPEEDUP = f"{HF_PREFIX}speedup_vs_ar"  # generate's own paired speedup over the engine's loop
TOP = 10  # rows of the ranking the console shows; beyond, it says how many more and where they are
RESUMED = "resumed"  # in a point's return value: it finished in an earlier launch (`resume=true`)


@dataclass(frozen=True)
class SweepVerdict:
    """The sweep's answer: its best point, or the points tied for first."""

    key: str  # what the points are ranked by
    tied: list[dict[str, Any]]  # the best point alone, or every point tied with the leader

    @property
    def best(self) -> dict[str, Any] | None:
        return self.tied[0] if len(self.tied) == 1 else None


def swept_keys(overrides: list[str]) -> list[str]:
    """The keys (or config groups) an override list sweeps: those given several values."""
    return [o.split("=", 1)[0].lstrip("+~") for o in overrides if "," in o]


def sweep_name(cfg: Config, overrides: list[str]) -> str:
    """The parent run's name: what is swept, then the settings every point shares (algorithm, K,
    L, T, drafter, dataset, model: those no swept key or group touches); `cfg` is a point's resolved
    config (`RunPlan.cfg`)."""
    swept = swept_keys(overrides)

    def held(*keys: str) -> bool:
        return not any(k == s or k.startswith(f"{s}.") for k in keys for s in swept)

    a = cfg.algorithm
    lengths = (("K", "K", a.K), ("L", "L", a.L))
    shape = [f"{name}={value}" for name, key, value in lengths if held(f"algorithm.{key}")]
    if held("sampling.temperature"):
        shape.append(f"T={cfg.sampling.temperature}")
    if held("algorithm.name"):
        shape.insert(0, a.name)
    fixed = [" ".join(shape)] if shape else []
    if held("drafter.name"):
        fixed.append(cfg.drafter.name)
    if held("dataset.name", "dataset.num_prompts"):
        prompts = cfg.dataset.num_prompts if cfg.dataset.num_prompts is not None else "all"
        fixed.append(f"{cfg.dataset.name}×{prompts}")
    if held("model.name"):
        fixed.append(cfg.model.name)
    varied = " ".join(o for o in overrides if "," in o) or " ".join(overrides)
    return " · ".join([f"sweep {varied}".strip(), *fixed])


def resumed_metrics(logged: dict[str, float]) -> dict[str, float]:
    """What a skipped point returns: its earlier run's final metrics (MLflow names) under the keys
    a row reads (`point_row`) and acceptance by depth reads (`acceptance_curve`), and `RESUMED`."""
    keys = [*HEADLINE, *(f"{key}_{end}" for key in INTERVALS for end in ENDS), HF_SPEEDUP]
    found = {key: value for key in keys if (value := read_metric(logged, key)) is not None}
    return found | acceptance_logged(logged) | {RESUMED: 1.0}


def acceptance_curve(metrics: dict[str, float]) -> dict[str, float]:
    """A point's acceptance by depth (`tracking.acceptance`), of its metrics by key."""
    return {key: value for key, value in metrics.items() if is_acceptance(key)}


def point_row(cfg: Config, metrics: dict[str, float]) -> dict[str, Any]:
    """A point's row: its name and shape, then its headline metrics, each measured one with its
    interval, and for a point finished in an earlier launch, `resumed: yes` (`cfg` resolved)."""
    a = cfg.algorithm
    shape: dict[str, Any] = {"algorithm": a.name, "K": a.K, "L": a.L}
    if get_algorithm(a.name).tree_builder:
        shape["budget"] = a.budget
    shape |= {"T": cfg.sampling.temperature, "drafter": cfg.drafter.name}
    figures: dict[str, float] = {}
    for key in HEADLINE:
        if key in metrics:
            figures[key] = round(metrics[key], 4)
        if key in INTERVALS and f"{key}_ci_low" in metrics:
            figures |= {f"{key}_{end}": round(metrics[f"{key}_{end}"], 4) for end in ENDS}
    reference = {HF_SPEEDUP: round(metrics[HF_SPEEDUP], 4)} if HF_SPEEDUP in metrics else {}
    resumed = {RESUMED: "yes"} if RESUMED in metrics else {}
    return {"point": run_name(cfg), **shape, **figures, **reference, **resumed}


def table_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with the same columns, in ranking order; a column no point has a value in is left out
    (`budget` in a sweep without DDTree)."""
    columns = list(dict.fromkeys(column for row in rows for column in row))
    return [{column: row.get(column, "") for column in columns} for row in ranked(rows)]


def _number(row: dict[str, Any], key: str) -> float:
    value = row.get(key)
    return float(value) if isinstance(value, int | float) else math.nan


def rank_key(rows: list[dict[str, Any]]) -> str:
    """speedup_vs_ar where every point has it, else tokens_per_s."""
    return "speedup_vs_ar" if all(not math.isnan(_number(row, "speedup_vs_ar")) for row in rows) else "tokens_per_s"


def ranked(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    key = rank_key(rows)
    return sorted(rows, key=lambda row: -_number(row, key) if not math.isnan(_number(row, key)) else math.inf)


def verdict(rows: list[dict[str, Any]]) -> SweepVerdict:
    """The leader alone when its interval is clear of the runner-up's; else all that reach its lower end
    (a point without an interval cannot be told apart, so it ties)."""
    key = rank_key(rows)
    leader, *rest = ranked(rows)
    low = _number(leader, f"{key}_ci_low")

    def reaches(row: dict[str, Any]) -> bool:
        return not _number(row, f"{key}_ci_high") < low  # NaN on either side: not clear

    return SweepVerdict(key, [leader, *(row for row in rest if reaches(row))])


def _parts(rows: list[dict[str, Any]]) -> tuple[list[list[str]], set[int]]:
    """Each point name's ` · `-separated parts, and the positions where every point has the same part."""
    parts = [row["point"].split(" · ") for row in rows]
    return parts, {i for i in range(min(map(len, parts))) if len({p[i] for p in parts}) == 1}


def labels(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Point name -> the parts of it that not every point shares."""
    parts, shared = _parts(rows)
    kept = [" · ".join(x for i, x in enumerate(p) if i not in shared) for p in parts]
    return {row["point"]: label or row["point"] for row, label in zip(rows, kept)}


def shared_name(rows: list[dict[str, Any]]) -> str:
    """The parts of the point names that every point shares (` · `-joined)."""
    parts, shared = _parts(rows)
    return " · ".join(parts[0][i] for i in sorted(shared))


def _cell(row: dict[str, Any], key: str) -> str:
    value = _number(row, key)
    if math.isnan(value):
        return "n/a"
    low, high = _number(row, f"{key}_ci_low"), _number(row, f"{key}_ci_high")
    return f"{value:.3g}" + ("" if math.isnan(low) else f" [{low:.3g}, {high:.3g}]")


def sweep_markdown(rows: list[dict[str, Any]]) -> str:
    shown = table_rows(rows)
    columns = list(shown[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(row[c]) for c in columns) + " |" for row in shown]
    return "\n".join(lines) + "\n"


def sweep_csv(rows: list[dict[str, Any]]) -> str:
    shown = table_rows(rows)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(shown[0]))
    writer.writeheader()
    writer.writerows(shown)
    return out.getvalue()


def ranking_table(rows: list[dict[str, Any]], title: str) -> Table:
    """The console's end of a sweep: the top points with their intervals, named by what sets them apart
    (what they share is the caption)."""
    key = rank_key(rows)
    shared = f"every point: {shared_name(rows)}" if shared_name(rows) else ""
    rest = f"top {TOP} of {len(rows)} points; all of them: the parent run's sweep_table.md" if len(rows) > TOP else ""
    table = Table(title=title, caption="\n".join(filter(None, (rest, shared))) or None)
    for column in ("#", "point", key, "tokens_per_s" if key != "tokens_per_s" else "speedup_vs_hf", "block eff."):
        table.add_column(column, justify="left" if column == "point" else "right")
    other = "tokens_per_s" if key != "tokens_per_s" else "speedup_vs_hf"
    short = labels(rows)
    for place, row in enumerate(ranked(rows)[:TOP], start=1):
        table.add_row(
            str(place), short[row["point"]], _cell(row, key), _cell(row, other), _cell(row, "block_efficiency")
        )
    return table


def verdict_line(found: SweepVerdict, short: dict[str, str] | None = None) -> str:
    """One sentence: the best point, or which points tie (named by `short` where given)."""

    def name(row: dict[str, Any]) -> str:
        return (short or {}).get(row["point"], row["point"])

    if found.best is not None:
        figure = f"{found.key} {_cell(found.best, found.key)}"
        return f"Best: **{name(found.best)}**, {figure}: its 95% interval lies above every other point's."
    return (
        f"No single best: {len(found.tied)} points tie on {found.key} within their 95% intervals "
        f"(the leader's lower end is inside the others'): {'; '.join(map(name, found.tied))}."
    )


def sweep_figure(rows: list[dict[str, Any]]) -> Figure:
    """The ranking key per point (best on top) with its 95% interval, each point labelled with its
    block efficiency; on the speedup axis, reference lines at 1 (autoregressive) and at
    transformers' generate, the legend below the axes so that it hides no bar."""
    key = rank_key(rows)
    ordered = ranked(rows)[::-1]
    figure, axes = plt.subplots(figsize=(9, 2.2 + 0.45 * len(ordered)))
    values = [_number(row, key) for row in ordered]
    errors = [
        [max(v - _number(row, f"{key}_ci_low"), 0.0) for v, row in zip(values, ordered)],
        [max(_number(row, f"{key}_ci_high") - v, 0.0) for v, row in zip(values, ordered)],
    ]
    errors = [[0.0 if math.isnan(e) else e for e in side] for side in errors]
    axes.barh(range(len(ordered)), values, xerr=errors, capsize=3, color="#4477aa", ecolor="#222222")
    short = labels(rows)
    names = [f"{short[row['point']]}\nblock eff. {_number(row, 'block_efficiency'):.2f}" for row in ordered]
    axes.set_yticks(range(len(ordered)), names, fontsize=8)
    right = max((v + e for v, e in zip(values, errors[1]) if not math.isnan(v)), default=1.0)
    if key == "speedup_vs_ar":
        axes.axvline(1.0, color="#ee6677", linestyle="--", linewidth=1.2, label="autoregressive (1.0)")
        references = [r for row in rows if not math.isnan(r := _number(row, HF_SPEEDUP))]
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
    shared = shared_name(rows)
    axes.set_title("sweep points, best on top" + (f"\nevery point: {shared}" if shared else ""), fontsize=10)
    figure.tight_layout()
    return figure


def best_metrics(found: SweepVerdict) -> dict[str, float]:
    """The best point's headline metrics as `best/<name>` (none when points tie), and how many tie."""
    metrics = {"sweep/tied_points": float(len(found.tied))}
    if found.best is not None:
        metrics |= {f"best/{mlflow_name(key)}": found.best[key] for key in HEADLINE if key in found.best}
    return metrics


def ranking_markdown(rows: list[dict[str, Any]]) -> str:
    """Every point in ranking order, named by what sets it apart, each figure with its interval."""
    short, figures = labels(rows), ("speedup_vs_ar", "tokens_per_s", "speedup_vs_hf", "block_efficiency")
    lines = ["| # | point | " + " | ".join(figures) + " |", "|" + "---|" * (len(figures) + 2)]
    for place, row in enumerate(ranked(rows), start=1):
        lines.append(f"| {place} | {short[row['point']]} | " + " | ".join(_cell(row, f) for f in figures) + " |")
    return "\n".join(lines) + "\n"


def sweep_description(overrides: str, rows: list[dict[str, Any]]) -> str:
    answer = verdict_line(verdict(rows), labels(rows))
    shared = f" Every point: {shared_name(rows)}." if shared_name(rows) else ""
    resumed = sum(row.get(RESUMED) == "yes" for row in rows)
    earlier = (
        f" {resumed} of these points finished in an earlier launch of this sweep (`resume=true`, column `{RESUMED}`): "
        "their runs stay nested under that launch's parent."
        if resumed
        else ""
    )
    # The verdict and the ranking first: MLflow shows a description's first lines only, until "Show more".
    return (
        f"{answer} {ranking_line(rows)}\n\nSweep `{overrides}`: {len(rows)} finished point(s), ranked by "
        f"{rank_key(rows)} (medians of paired, interleaved measurements; 95% intervals over prompts).{shared}"
        f"{earlier} Every column: `sweep_table.md`, `sweep_table.csv`; the plot: `sweep_points.png`; acceptance "
        f"by draft depth: `acceptance_by_depth.png`, `.md`, `.csv`.\n\n{ranking_markdown(rows)}"
    )


def ranking_line(rows: list[dict[str, Any]]) -> str:
    """Every point in ranking order on one line, each with its ranking figure and interval."""
    key, short = rank_key(rows), labels(rows)
    return f"Ranked by {key}: " + "; ".join(
        f"{place}. {short[row['point']]} {_cell(row, key)}" for place, row in enumerate(ranked(rows), start=1)
    )
