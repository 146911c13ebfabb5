"""What a sweep's parent run shows: one row per finished point, the table in markdown and CSV,
a chart of the points, the best point's headline metrics and a description of what was swept.

Rows come from the points' own return values in this process (`MlflowSweepCallback`), so the
summary is written (or spooled) even when MLflow was down during the sweep.
"""

from __future__ import annotations

import csv
import io
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from speculab.algorithms import get_algorithm
from speculab.config import Config
from speculab.tracking.metrics import HEADLINE, mlflow_name
from speculab.tracking.runs import run_name


def point_row(cfg: Config, metrics: dict[str, float]) -> dict[str, Any]:
    """A point's row: its name and shape, then its headline metrics."""
    a = cfg.algorithm
    budget = a.budget if get_algorithm(a.name).tree_builder else ""
    shape = {
        "algorithm": a.name,
        "K": a.K,
        "L": a.L,
        "budget": budget,
        "T": cfg.sampling.temperature,
        "drafter": cfg.drafter.name,
    }
    return {"point": run_name(cfg), **shape, **{key: round(metrics[key], 4) for key in HEADLINE if key in metrics}}


def fastest_first(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda row: -row.get("tokens_per_s", 0.0))


def sweep_markdown(rows: list[dict[str, Any]]) -> str:
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(row[c]) for c in columns) + " |" for row in fastest_first(rows)]
    return "\n".join(lines) + "\n"


def sweep_csv(rows: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(fastest_first(rows))
    return out.getvalue()


def sweep_figure(rows: list[dict[str, Any]]) -> Figure:
    """Tokens/s per point (fastest on top), each bar labelled with its block efficiency."""
    ordered = fastest_first(rows)[::-1]
    figure, axes = plt.subplots(figsize=(9, 1.2 + 0.45 * len(ordered)))
    speeds = [row.get("tokens_per_s", 0.0) for row in ordered]
    bars = axes.barh(range(len(ordered)), speeds, color="#4477aa")
    axes.set_yticks(range(len(ordered)), [row["point"].split(" · ")[0] for row in ordered], fontsize=9)
    axes.bar_label(
        bars, [f"block eff. {row.get('block_efficiency', float('nan')):.2f}" for row in ordered], padding=3, fontsize=8
    )
    axes.set_xlabel("tokens/s")
    axes.set_xlim(0, max(speeds, default=1.0) * 1.3)
    axes.set_title("sweep points, fastest on top")
    figure.tight_layout()
    return figure


def best_metrics(rows: list[dict[str, Any]]) -> dict[str, float]:
    """The fastest point's headline metrics, as `best/<name>`."""
    best = fastest_first(rows)[0]
    return {f"best/{mlflow_name(key)}": best[key] for key in HEADLINE if key in best}


def sweep_description(overrides: str, rows: list[dict[str, Any]]) -> str:
    best = fastest_first(rows)[0]
    return (
        f"Sweep `{overrides}`: {len(rows)} finished point(s). Fastest: **{best['point']}** at "
        f"{best.get('tokens_per_s', float('nan')):.4g} tokens/s, block efficiency "
        f"{best.get('block_efficiency', float('nan')):.4g}. Artifacts: `sweep_table.md`, `sweep_table.csv`, "
        f"`sweep_points.png`.\n\n{sweep_markdown(rows)}"
    )
