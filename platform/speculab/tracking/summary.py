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
from rich.table import Table

from speculab.records import RunResult
from speculab.tracking.console import show
from speculab.tracking.metrics import acceptance_histogram, depth_series, is_acceptance

# The rows a summary opens with, in this order; the rest follow under a rule, as the point gives them.
HEADLINE_ROWS = ("tokens_per_s", "speedup_vs_ar", "speedup_vs_hf", "block_efficiency", "accepted_mean")
GLOSSARY = "docs/architecture.md#tracking"  # the metrics table: every row's name explained, once
# What a speedup is over, for the sentence that says whether its interval lies above, below or around 1.
SPEEDUP_OVER = {"speedup_vs_ar": "the autoregressive baseline", "speedup_vs_hf": "transformers' generate"}


def summary_table(
    title: str, metrics: dict[str, float], baselines: dict[str, dict[str, float]], caption: str = ""
) -> Table:
    """Every metric, the headline rows first, beside each baseline's (column name -> its metrics) where
    it has one; a measured figure with its interval (`<key>_ci_low`, `<key>_ci_high`) shows it in
    brackets; ``caption``: the conditions the figures were measured under. Acceptance by depth shows
    as a few compact rows under `accepted_mean` (`acceptance_rows`), its intervals in MLflow."""
    table = Table(title=title, caption=caption or None)
    table.add_column("metric", no_wrap=True)  # a name cut short is a name nobody can look up
    table.add_column("speculative", justify="right", no_wrap=True)
    for name in baselines:
        table.add_column(name, justify="right", no_wrap=True)
    head, rest = summary_rows(metrics)
    for keys in (head, rest):
        for key in keys:
            shown = [b.get(key) if key != "kv_peak_mb_draft" else None for b in baselines.values()]  # no draft
            cell = _fmt(metrics[key]) + _bracket(metrics.get(f"{key}_ci_low"), metrics.get(f"{key}_ci_high"))
            table.add_row(key, cell, *("" if v is None or math.isnan(v) else _fmt(v) for v in shown))
            if key == "accepted_mean":
                for name, line in acceptance_rows(metrics):
                    table.add_row(name, line)
        table.add_section()
    return table


def summary_rows(metrics: dict[str, float]) -> tuple[list[str], list[str]]:
    """(the headline rows present, every other row in the point's order); intervals and acceptance by
    depth (`acceptance_rows`) are not rows of their own."""
    rows = [key for key in metrics if not (key.endswith(("_ci_low", "_ci_high")) or is_acceptance(key))]
    head = [key for key in HEADLINE_ROWS if key in rows]
    return head, [key for key in rows if key not in head]


def speedup_verdicts(metrics: dict[str, float]) -> list[str]:
    """One sentence per speedup with an interval: faster than, slower than, or not distinguishable
    from its baseline, as the interval lies above 1, below 1 or around it."""
    lines = []
    for key, baseline in SPEEDUP_OVER.items():
        low, high = metrics.get(f"{key}_ci_low", math.nan), metrics.get(f"{key}_ci_high", math.nan)
        if math.isnan(low) or math.isnan(high):
            continue
        verdict = (
            f"faster than {baseline}"
            if low > 1
            else f"slower than {baseline}"
            if high < 1
            else f"not distinguishable from {baseline} (the interval includes 1)"
        )
        lines.append(f"{key} {_fmt(metrics[key])}{_bracket(low, high)}: {verdict}")
    return lines


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
    show(
        summary_table(title, metrics, columns, caption), *speedup_verdicts(metrics), f"every row explained: {GLOSSARY}"
    )
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
