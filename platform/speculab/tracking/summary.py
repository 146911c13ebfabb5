"""What a person sees of a run: the summary table, the plots, the per-prompt records."""

from __future__ import annotations

import json
import math
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from rich.console import Console
from rich.table import Table

from speculab.engine import RunResult
from speculab.tracking.metrics import acceptance_histogram, depth_series, is_acceptance


def summary_table(
    title: str, metrics: dict[str, float], baselines: dict[str, dict[str, float]], caption: str = ""
) -> Table:
    """Every metric, beside each baseline's (column name -> its metrics) where it has one; a
    measured figure with its interval (`<key>_ci_low`, `<key>_ci_high`) shows it in brackets;
    ``caption``: the conditions the figures were measured under. Acceptance by depth shows as a few
    compact rows under `accepted_mean` (`acceptance_rows`), its intervals in MLflow."""
    table = Table(title=title, caption=caption or None)
    table.add_column("metric")
    table.add_column("speculative", justify="right")
    for name in baselines:
        table.add_column(name, justify="right")
    for key, value in metrics.items():
        if key.endswith(("_ci_low", "_ci_high")) or is_acceptance(key):
            continue
        shown = [b.get(key) if key != "kv_peak_mb_draft" else None for b in baselines.values()]  # no draft there
        cell = _fmt(value) + _bracket(metrics.get(f"{key}_ci_low"), metrics.get(f"{key}_ci_high"))
        table.add_row(key, cell, *("" if v is None or math.isnan(v) else _fmt(v) for v in shown))
        if key == "accepted_mean":
            for name, line in acceptance_rows(metrics):
                table.add_row(name, line)
    return table


def acceptance_rows(metrics: dict[str, float]) -> list[tuple[str, str]]:
    """The acceptance line (`alpha 0.81 0.74 0.69 0.62`, depth 1 first), the overlap beside it, the
    accepted-length histogram and, for a tree, the share of rounds off its chain; none without a draft.
    A line stops where no round reached (alpha NaN) or none accepted (share 0): `of L` says so."""
    lines = (("alpha (depth ", "alpha", 1), ("overlap (depth ", "overlap", 1), ("tau share (", "hist", 0))
    rows = []
    for name, stem, first in lines:
        values = depth_series(metrics, stem, first)
        shown = len(values)
        while shown and (math.isnan(values[shown - 1]) or (first == 0 and values[shown - 1] == 0)):
            shown -= 1
        last = first + len(values) - 1
        span = f"{first}..{first + shown - 1}" + (f" of {last}" if shown < len(values) else "")
        if values:
            rows.append((f"{name}{span})", " ".join(f"{v:.2f}" for v in values[:shown])))
    if "left_chain" in metrics:
        rows.append(("left_chain", _fmt(metrics["left_chain"])))
    return rows


def _fmt(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.4g}"


def _bracket(low: float | None, high: float | None) -> str:
    if low is None or high is None or math.isnan(low) or math.isnan(high):
        return ""
    return f" [{low:.4g}, {high:.4g}]"


def print_summary(
    title: str,
    metrics: dict[str, float],
    ar: dict[str, float] | None,
    hf: dict[str, float] | None,
    caption: str = "",
) -> dict[str, float]:
    """Print the point's metrics beside the engine's autoregressive loop's and transformers' generate's."""
    columns = {"autoregressive": ar} if ar else {}
    if hf:
        columns["transformers generate"] = hf
    Console().print(summary_table(title, metrics, columns, caption))
    return metrics


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


PHASE_COLORS = {"draft": "#4477aa", "target": "#ee6677", "verify": "#228833", "other": "#bbbbbb"}  # share_<phase>


def time_split_figure(metrics: dict[str, float]) -> Figure:
    figure, axes = plt.subplots(figsize=(8, 2.6))
    left = 0.0
    for phase, color in PHASE_COLORS.items():
        share = metrics[f"share_{phase}"]
        axes.barh([0], [share], left=left, color=color, label=f"{phase} {share:.0%}")
        left += share
    axes.set_xlim(0, 1)
    axes.set_yticks([])
    axes.legend(ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.25), fontsize=11, frameon=False)
    axes.set_title("wall-time split")
    figure.tight_layout()
    return figure


def prompt_records(run: RunResult, prompt_ids: list[str], texts: list[str]) -> list[dict[str, Any]]:
    """One record per prompt: id, token counts, tau per round, stop reason, generated tokens and text."""
    return [
        {
            "id": prompt_ids[p.index],
            "prompt_tokens": p.prompt_tokens,
            "generated_tokens": len(p.tokens),
            "rounds": len(p.accepted),
            "accepted": p.accepted,
            "stop": p.stop,
            "tokens": p.tokens,
            "text": texts[p.index],
        }
        for p in run.prompts
    ]


def records_jsonl(records: list[dict[str, Any]]) -> str:
    """records.jsonl: one JSON object per prompt, token ids included."""
    return "".join(json.dumps(record) + "\n" for record in records)


TABLE_COLUMNS = ("id", "text", "accepted", "stop", "generated_tokens", "rounds", "prompt_tokens")


def records_table(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of the table the MLflow UI shows, text first (it is the widest): tau per round as
    space-separated numbers, no token ids."""
    return [
        {key: " ".join(map(str, r[key])) if key == "accepted" else r[key] for key in TABLE_COLUMNS} for r in records
    ]
