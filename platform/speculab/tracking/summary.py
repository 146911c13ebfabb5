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

from speculab.algorithms import get_algorithm
from speculab.config import Config
from speculab.paired import PREFIX as COMPARE
from speculab.records import RunResult
from speculab.results.figures import PHASES, acceptance_histogram
from speculab.results.names import HEADLINE, Figures, is_acceptance
from speculab.results.point import PointResult, PointShape
from speculab.stats import Estimate
from speculab.tracking.console import show

# The rows a summary opens with, in this order; the rest follow under a rule, as the point gives them.
HEADLINE_ROWS = ("tokens_per_s", "speedup_vs_ar", "speedup_vs_hf", "block_efficiency", "accepted_mean")
GLOSSARY = "docs/architecture.md#tracking"  # the metrics table: every row's name explained, once
# What a speedup is over, for the sentence that says whether its interval lies above, below or around 1.
SPEEDUP_OVER = {"speedup_vs_ar": "the autoregressive baseline", "speedup_vs_hf": "transformers' generate"}
NO_DRAFT = ("kv_peak_mb_draft",)  # a baseline has no draft: its column stays empty there


def summary_table(title: str, figures: Figures, baselines: dict[str, Figures], caption: str = "") -> Table:
    """Every figure, the headline rows first, beside each baseline's (column name -> its figures) where
    it has one, each with its interval where it has one; ``caption``: the conditions the figures were
    measured under. Acceptance by depth shows as a few compact rows under `accepted_mean`
    (`acceptance_rows`), its intervals in MLflow."""
    table = Table(title=title, caption=caption or None)
    table.add_column("metric", no_wrap=True)  # a name cut short is a name nobody can look up
    table.add_column("speculative", justify="right", no_wrap=True)
    for name in baselines:
        table.add_column(name, justify="right", no_wrap=True)
    head, rest = summary_rows(figures)
    for keys in (head, rest):
        for key in keys:
            shown = [b.get(key) if key not in NO_DRAFT else None for b in baselines.values()]
            table.add_row(key, f"{figures[key]}", *("" if e is None or math.isnan(e.value) else f"{e}" for e in shown))
            if key == "accepted_mean":
                for name, line in acceptance_rows(figures):
                    table.add_row(name, line)
        table.add_section()
    return table


def summary_rows(figures: Figures) -> tuple[list[str], list[str]]:
    """(the headline rows present, every other row in the table's order); acceptance by depth
    (`acceptance_rows`) has no rows of its own."""
    rows = [key for key in figures if not is_acceptance(key)]
    head = [key for key in HEADLINE_ROWS if key in rows]
    return head, [key for key in rows if key not in head]


def speedup_verdicts(figures: Figures) -> list[str]:
    """One sentence per speedup with an interval: faster than, slower than, or not distinguishable
    from its baseline, as the interval lies above 1, below 1 or around it."""
    lines = []
    for key, baseline in SPEEDUP_OVER.items():
        speedup = figures.get(key)
        if speedup is None or not speedup.has_interval:
            continue
        verdict = (
            f"faster than {baseline}"
            if speedup.low > 1
            else f"slower than {baseline}"
            if speedup.high < 1
            else f"not distinguishable from {baseline} (the interval includes 1)"
        )
        lines.append(f"{key} {speedup}: {verdict}")
    return lines


def acceptance_rows(figures: Figures) -> list[tuple[str, str]]:
    """The acceptance line (`alpha 0.81 0.74 0.69 0.62`, depth 1 first), the overlap beside it, the
    accepted-length histogram and, for a tree, the share of rounds off its chain; none without a draft.
    A line stops where no round reached (alpha NaN) or none accepted (share 0): `of L` says so."""
    lines = (("alpha (depth ", "alpha", 1), ("overlap (depth ", "overlap", 1), ("tau share (", "hist", 0))
    rows = []
    for name, stem, first in lines:
        values = [e.value for e in figures.series(stem, first)]
        shown = len(values)
        while shown and (math.isnan(values[shown - 1]) or (first == 0 and values[shown - 1] == 0)):
            shown -= 1
        last = first + len(values) - 1
        span = f"{first}..{first + shown - 1}" + (f" of {last}" if shown < len(values) else "")
        if values:
            rows.append((f"{name}{span})", " ".join(f"{v:.2f}" for v in values[:shown])))
    if "left_chain" in figures:
        rows.append(("left_chain", f"{figures['left_chain']}"))
    return rows


def print_summary(title: str, result: PointResult, caption: str = "") -> None:
    """Print the point's figures beside the engine's autoregressive loop's and transformers' generate's."""
    columns = {"autoregressive": result.autoregressive} if result.autoregressive is not None else {}
    if result.generate is not None:
        columns["transformers generate"] = result.generate
    table = summary_table(title, result.figures, columns, caption)
    show(table, *speedup_verdicts(result.figures), f"every row explained: {GLOSSARY}")


def point_description(cfg: Config, result: PointResult | None = None) -> str:
    """A run's markdown description: its configuration in words, then (when done) its headline figures
    (`cfg` resolved: `RunPlan.cfg`)."""
    a, s, spec, shape = cfg.algorithm, cfg.sampling, get_algorithm(cfg.algorithm.name), PointShape.of(cfg)
    drafted = (
        f"a {a.tree} tree of {a.budget} nodes, depth {a.L}"
        if spec.tree_builder
        else f"K={a.K} i.i.d. path{'s' if a.K > 1 else ''} of L={a.L} tokens"
    )
    rule = f", node rule `{a.node_rule}`" if spec.node_rules else ""
    lossy = "" if spec.lossless(a.K) else f" **Not lossless** at K={a.K} (`algorithm.allow_lossy=true`)."
    text = (
        f"**{a.name}** verification ({spec.paper}{rule}) of {drafted} from drafter `{cfg.drafter.name}`, "
        f"temperature {s.temperature}, on {shape.prompt_count} `{cfg.dataset.name}` prompts × {s.max_new_tokens} "
        f"new tokens (batch {s.batch_size}), model pair `{cfg.model.name}`, runtime `{cfg.runtime.kind}`.{lossy}"
    )
    if result is None:
        return text + "\n\nDecoding…"
    header = " | ".join(key.replace("_", " ") for key in HEADLINE)
    values = " | ".join(f"{result.figures.get(key, Estimate(math.nan)).value:.4g}" for key in HEADLINE)
    return f"{text}\n\n| {header} |\n|{'---|' * len(HEADLINE)}\n| {values} |"


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


def paired_table(figures: Figures, configured: str, repeats: int) -> Table:
    """The console's side-by-side table of `paired_figures`."""
    names = dict.fromkeys(key.removeprefix(COMPARE).split("/")[0] for key in figures if key.startswith(COMPARE))
    table = Table(title=f"paired comparison on the same drafts ({repeats} verifications each, ± standard error)")
    for column in ("verifier", "block efficiency", "accepted", f"minus {configured}"):
        table.add_column(column, justify="left" if column == "verifier" else "right")
    for name in names:
        diff = "-" if name == configured else f"{figures[f'{COMPARE}{name}/diff_block_efficiency']:+.4f}"
        table.add_row(
            name,
            f"{figures[f'{COMPARE}{name}/block_efficiency']:.4f}",
            f"{figures[f'{COMPARE}{name}/accepted_mean']:.4f}",
            diff,
        )
    return table
