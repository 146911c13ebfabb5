"""What the console shows of a finished point: its figures beside its baselines', a sentence per
speedup with its verdict (`results.verdicts`: faster, slower or inconclusive), and the paired
comparison's table."""

from __future__ import annotations

import math
from pathlib import Path

from rich.table import Table

from speculab.config.sampling import GENERATE_FORMS
from speculab.results.names import HEADLINE, Figures, compare_key, compared_verifiers, is_acceptance
from speculab.results.point import PointResult
from speculab.results.verdicts import OVER, Verdict, baseline_sentence, call_words, headline_note, run_verdicts
from speculab.show.console import plain, show
from speculab.stats import MIN_CLUSTERS, MIN_UNITS

GLOSSARY = "docs/architecture.md#tracking"  # the metrics table: every row's name explained, once
NO_DRAFT = ("kv_peak_mb_draft",)  # a baseline has no draft: its column stays empty there
# A baseline's own speedup over the engine's loop is no figure of the point's: its column stays empty there too
NOT_THE_BASELINES = (*NO_DRAFT, "speedup_vs_ar")
SUMMARY_FILE = "summary.txt"  # the whole table, in the job's directory and as the run's artifact


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
            shown = [b.get(key) if key not in NOT_THE_BASELINES else None for b in baselines.values()]
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
    head = [key for key in HEADLINE if key in rows]
    return head, [key for key in rows if key not in head]


def generate_name(form: str) -> str:
    """transformers' generate named with its form (a resolved `measure.generate`)."""
    return f"{OVER['speedup_vs_hf']} ({GENERATE_FORMS[form]})"


def speedup_verdicts(result: PointResult, generate_form: str = "eager") -> list[str]:
    """One sentence per speedup: faster than, slower than or inconclusive against its baseline
    (`results.verdicts.run_verdicts`), or too few units to tell."""
    over = OVER | {"speedup_vs_hf": generate_name(generate_form)}
    verdicts = run_verdicts(result)
    lines = [baseline_sentence(key, v, over[key], result.shape.batch_size) for key, v in verdicts.items()]
    return [note, *lines] if (note := headline_note([result])) else lines


def summary_title(result: PointResult, repeats: int) -> str:
    """The table's title: the point, how it was timed and what its intervals are over, where it has any."""
    units = result.figures.value("units")
    spread = (
        f", 95% intervals over {int(units)} {'prompts' if result.shape.batch_size == 1 else 'units'}"
        if units >= min(MIN_CLUSTERS, MIN_UNITS)
        else ""
    )
    return f"{result.shape.name} · totals of {repeats} interleaved repetition(s){spread}"


def acceptance_rows(figures: Figures) -> list[tuple[str, str]]:
    """The acceptance line (`alpha 0.81 0.74 0.69 0.62`, depth 1 first), the per-position rate (vLLM's),
    the overlap beside it, the accepted-length histogram and, for a tree, the share of rounds off its
    chain; none without a draft.
    A line stops where no round reached (alpha NaN) or none accepted (share 0): `of L` says so."""
    lines = (
        ("alpha (depth ", "alpha", 1),
        ("per position (", "position", 1),
        ("overlap (depth ", "overlap", 1),
        ("tau share (", "hist", 0),
    )
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


def print_summary(
    title: str, result: PointResult, caption: str = "", generate_form: str = "eager", brief_in: Path | None = None
) -> str:
    """Print the point's figures beside the engine's autoregressive loop's and transformers' generate's
    (its column named with its form, a resolved `measure.generate`), and the verdicts; return the whole
    table as text. ``brief_in`` (a sweep's point): print the headline rows alone and write the whole
    table to SUMMARY_FILE there, so that a sweep's console reads point by point and ends on its ranking."""
    columns = {"autoregressive": result.autoregressive} if result.autoregressive is not None else {}
    if result.generate is not None:
        columns[f"generate, {generate_form}"] = result.generate
    table = summary_table(title, result.figures, columns, caption)
    verdicts = speedup_verdicts(result, generate_form)
    whole = plain(table, *verdicts, f"every row explained: {GLOSSARY}")
    if brief_in is None:
        show(table, *verdicts, f"every row explained: {GLOSSARY}")
        return whole
    brief_in.mkdir(parents=True, exist_ok=True)
    (brief_in / SUMMARY_FILE).write_text(whole + "\n")
    headline = summary_table(title, result.figures.only(HEADLINE), columns, caption)
    show(headline, *verdicts, f"every figure: {brief_in / SUMMARY_FILE} (and the run's {SUMMARY_FILE})")
    return whole


def paired_table(figures: Figures, configured: str, repeats: int, verdicts: dict[str, Verdict]) -> Table:
    """The console's side-by-side table of `paired_figures`, each compared verifier's ratio to the
    configured one with its verdict (`results.verdicts.compared`: one family)."""
    names = compared_verifiers(figures)
    table = Table(
        title=f"paired comparison on the same drafts ({repeats} verifications each; 95% intervals over prompts)",
        caption=f"over {configured}: higher, lower or inconclusive, Holm over {len(verdicts)} tests, 5% family-wise",
    )
    for column in ("verifier", "acceptance length", "accepted", f"over {configured}", "verdict"):
        table.add_column(column, justify="left" if column in ("verifier", "verdict") else "right")
    for name in names:
        ratio = "-" if name == configured else f"{figures[compare_key(name, 'relative')]:.4f}"
        verdict = "-" if name == configured else call_words(verdicts[name], "higher", "lower")
        table.add_row(
            name,
            f"{figures[compare_key(name, 'acceptance_length')]:.4f}",
            f"{figures[compare_key(name, 'accepted_mean')]:.4f}",
            ratio,
            verdict,
        )
    return table
