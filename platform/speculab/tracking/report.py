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
from speculab.tracking.metrics import acceptance_histogram, summarize


def summary_table(title: str, metrics: dict[str, float], baseline: dict[str, float] | None) -> Table:
    """Every metric, beside the autoregressive baseline's where it has one."""
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("speculative", justify="right")
    if baseline:
        table.add_column("autoregressive", justify="right")
    for key, value in metrics.items():
        row = [key, _fmt(value)]
        if baseline:
            row.append(
                _fmt(baseline[key]) if key in baseline and not key.startswith(("speedup", "kv_peak_mb_draft")) else ""
            )
        table.add_row(*row)
    return table


def _fmt(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.4g}"


def print_summary(title: str, run: RunResult, baseline: RunResult | None) -> dict[str, float]:
    metrics = summarize(run, baseline)
    Console().print(summary_table(title, metrics, summarize(baseline) if baseline else None))
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


def time_split_figure(metrics: dict[str, float]) -> Figure:
    phases = ["draft", "target", "verify", "other"]
    figure, axes = plt.subplots(figsize=(8, 2.6))
    left = 0.0
    for phase, color in zip(phases, ["#4477aa", "#ee6677", "#228833", "#bbbbbb"]):
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
