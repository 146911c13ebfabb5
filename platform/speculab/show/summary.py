"""What the console shows of a finished point: its figures beside its baselines', a sentence per
speedup with its verdict (`results.verdicts`: faster, slower or inconclusive), and the paired
comparison's table."""

from __future__ import annotations

import math
from pathlib import Path

from rich import box
from rich.table import Table

from speculab.config.sampling import GENERATE_FORMS
from speculab.results.names import BRIEF, HEADLINE, Figures, compare_key, compared_verifiers, is_acceptance, lookup
from speculab.results.point import PointResult
from speculab.results.verdicts import OVER, RatioVerdict, run_verdicts
from speculab.show.answers import baseline_sentence, call_words, headline_note, with_level
from speculab.show.console import plain, show
from speculab.stats import MIN_CLUSTERS, MIN_UNITS, ratio_text

NO_DRAFT = ("kv_peak_mb_draft",)  # a baseline has no draft: its column stays empty there
# A baseline's own speedup over the engine's loop is no figure of the point's: its column stays empty there too
NOT_THE_BASELINES = (*NO_DRAFT, "speedup_vs_ar")
SUMMARY_FILE = "summary.txt"  # the whole table, in the job's directory and as the run's artifact


def summary_table(
    title: str, figures: Figures, baselines: dict[str, Figures], caption: str = "", meanings: bool = False
) -> Table:
    """Every figure, the headline rows first, beside each baseline's (column name -> its figures) where
    it has one, each with its interval where it has one; ``caption``: the conditions the figures were
    measured under; ``meanings``: a last column saying what each row is (`results.names`). Acceptance by
    depth shows as a few compact rows under `accepted_mean` (`acceptance_rows`), its intervals in MLflow."""
    table = Table(title=title, caption=caption or None)
    table.add_column("metric", no_wrap=True)  # a name cut short is a name nobody can look up
    table.add_column("speculative", justify="right", no_wrap=True)
    for name in baselines:
        table.add_column(name, justify="right", no_wrap=True)
    if meanings:
        table.add_column("what it is")
    head, rest = summary_rows(figures)
    for keys in (head, rest):
        for key in keys:
            shown = [b.get(key) if key not in NOT_THE_BASELINES else None for b in baselines.values()]
            cells = [f"{figures[key]}", *("" if e is None or math.isnan(e.value) else f"{e}" for e in shown)]
            table.add_row(key, *cells, *([lookup(key)[0].meaning] if meanings else []))
            if key == "accepted_mean":
                for name, line in acceptance_rows(figures):
                    table.add_row(name, line)
        table.add_section()
    return table


def headline_table(title: str, result: PointResult, caption: str = "") -> Table:
    """The headline rows as the console's last screen shows them, 80 columns wide: each figure with its
    interval (a speedup with the digits that keep its side of 1), and beside it what its name means in a
    few words (`results.names.BRIEF`), the baselines' own throughputs beside the point's."""
    shown = compact_conditions(caption) or None
    table = Table(title=title, caption=shown, box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for column in ("metric", "speculative", "what it is"):
        table.add_column(column, justify="right" if column == "speculative" else "left", no_wrap=column == "metric")
    baselines = {"AR": result.autoregressive, "generate": result.generate}
    for key in (k for k in HEADLINE if k in result.figures):
        figure = result.figures[key]
        shown = ratio_text(figure) if key.startswith(("speedup", "typical")) else f"{figure:.3g}"
        meaning = BRIEF[key]
        if key == "tokens_per_s":
            rates = [f"{name} {b.value(key):.3g}" for name, b in baselines.items() if b is not None and key in b]
            meaning = " · ".join(rates) if rates else meaning
        table.add_row(key, shown, meaning)
    return table


def compact_conditions(caption: str) -> str:
    """The conditions caption in a line where every role ran alike: `target and generate, draft, loop:
    this process, 1 torch thread` for three parts that end the same."""
    parts = [part.partition(": ") for part in caption.split(" · ")] if caption else []
    if len(parts) < 2 or len({where for _, _, where in parts}) > 1 or not all(colon for _, colon, _ in parts):
        return caption
    return f"{', '.join(role for role, _, _ in parts)}: {parts[0][2]}"


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
        ("accepted-length share (", "hist", 0),
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


def print_summary(title: str, result: PointResult, out: Path, caption: str = "", generate_form: str = "eager") -> str:
    """Print the point's headline figures with what their names mean, its baselines' throughputs and the
    verdicts, so that the console's last screen holds the answer; write the whole table (every figure
    beside the engine's autoregressive loop's and transformers' generate's, its column named with its form,
    a resolved `measure.generate`; each row with its meaning) to SUMMARY_FILE in `out`, the job's directory,
    and return it."""
    columns = {"autoregressive": result.autoregressive} if result.autoregressive is not None else {}
    if result.generate is not None:
        columns[f"generate, {generate_form}"] = result.generate
    verdicts = speedup_verdicts(result, generate_form)
    whole = plain(summary_table(title, result.figures, columns, caption, meanings=True), *verdicts)
    out.mkdir(parents=True, exist_ok=True)
    (out / SUMMARY_FILE).write_text(whole + "\n")
    where = out / SUMMARY_FILE
    shown = where.relative_to(Path.cwd()) if where.is_relative_to(Path.cwd()) else where  # a short line
    intervals = " · 95% intervals" if any(result.figures[k].has_interval for k in result.figures.only(HEADLINE)) else ""
    show(
        headline_table(result.shape.name + intervals, result, caption),
        *verdicts,
        f"every figure, each explained: {shown}",
    )
    return whole


def paired_table(figures: Figures, configured: str, repeats: int, verdicts: dict[str, RatioVerdict]) -> Table:
    """The console's side-by-side table of `paired_figures`, each compared verifier's ratio to the
    configured one with its verdict (`results.verdicts.compared`: one family)."""
    names = compared_verifiers(figures)
    family = next(iter(verdicts.values())).family if verdicts else None
    table = Table(
        title=f"paired comparison on the same drafts ({repeats} verifications each; 95% intervals over prompts)",
        caption=f"over {configured}: the ratio with its interval at its test's level; higher, lower or inconclusive "
        f"(Holm; {family})"
        if family
        else None,
    )
    for column in ("verifier", "acceptance length", "accepted", f"over {configured}", "verdict"):
        table.add_column(column, justify="left" if column in ("verifier", "verdict") else "right")
    for name in names:
        ratio = "-" if name == configured else with_level(verdicts[name])
        verdict = "-" if name == configured else call_words(verdicts[name], "higher", "lower")
        table.add_row(
            name,
            f"{figures[compare_key(name, 'acceptance_length')]:.4f}",
            f"{figures[compare_key(name, 'accepted_mean')]:.4f}",
            ratio,
            verdict,
        )
    return table
