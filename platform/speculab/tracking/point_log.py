"""What a tracked point's run holds when it ends: its figures as metrics, its description, its console
summary, its prompts' records and plots; and of a point that failed, what its finished units tell.

`point.experiment.decode_point` calls these with the point's `Tracker` (a spooled MLflow run) only when the
point is tracked: an untracked run builds no figure and imports no matplotlib.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import cast

import matplotlib.pyplot as plt
from transformers import PreTrainedTokenizerBase

from speculab.core.records import RunResult, concat_runs
from speculab.results.figures import run_figures
from speculab.results.names import FIGURES_ARTIFACT, UNTIMED, Figures, flatten, is_acceptance, split_spreads
from speculab.results.point import UNITS_ARTIFACT, PointResult
from speculab.results.verdicts import run_verdicts
from speculab.show.acceptance import depth_figure
from speculab.show.answers import run_verdict_words
from speculab.show.plots import acceptance_figure, time_split_figure
from speculab.show.summary import SUMMARY_FILE
from speculab.tracking.run_page import headline_tag, point_description, prompt_records, records_jsonl, records_table
from speculab.tracking.spool import HEADLINE_TAG, NOTE_TAG, VERDICT_TAG
from speculab.tracking.tracker import Tracker

CONDITIONS_TAG = "speculab.conditions"


@dataclass(frozen=True)
class Decoded:
    """What the speculative decode gave, prompt by prompt: its runs, the ids of the prompts they
    decoded (in order) and the tokenizer that reads their tokens back."""

    runs: list[RunResult]
    prompt_ids: list[str]
    tokenizer: PreTrainedTokenizerBase


def log_figures(tracker: Tracker, logged: dict[str, float]) -> None:
    """Figures (`flatten`ed) as metrics, values only, and whole, spreads included, as FIGURES_ARTIFACT."""
    tracker.log_metrics(split_spreads(logged))
    tracker.log_text(json.dumps(logged, indent=1), FIGURES_ARTIFACT)


def log_point(
    tracker: Tracker, result: PointResult, summary: str, runtime: str, conditions: str, decoded: Decoded
) -> None:
    """The point's final figures (and its baselines'), its description and where it was measured
    (`conditions`, on `runtime`), its whole console summary, its per-prompt records and plots."""
    tracker.set_tags({CONDITIONS_TAG: conditions})
    log_figures(tracker, result.logged())
    verdicts = run_verdict_words(run_verdicts(result))
    headline = headline_tag(result)
    tracker.set_tags(
        {NOTE_TAG: point_description(result.shape, runtime, result), VERDICT_TAG: verdicts, HEADLINE_TAG: headline}
    )
    if result.units is not None:
        tracker.log_text(result.units.to_json(), UNITS_ARTIFACT)
    tracker.log_text(summary + "\n", SUMMARY_FILE)
    log_records(tracker, decoded)
    if (by_depth := depth_figure({result.shape.name: result.figures})) is not None:
        tracker.log_figure(by_depth, "acceptance_by_depth.png")
    tracker.log_figure(time_split_figure(result.figures), "time_split.png")
    plt.close("all")  # a sweep runs many points in this process


def log_records(tracker: Tracker, decoded: Decoded) -> None:
    """The speculative decode's per-prompt records (JSONL and a table) and its acceptance histogram."""
    spec = concat_runs(decoded.runs)
    texts = [cast(str, decoded.tokenizer.decode(p.tokens)) for p in spec.prompts]  # one sequence decodes to a str
    records = prompt_records(spec, decoded.prompt_ids[: len(spec.prompts)], texts)
    tracker.log_text(records_jsonl(records), "records.jsonl")
    tracker.log_table(records_table(records), "records_table.json")
    tracker.log_figure(acceptance_figure(spec), "acceptance_histogram.png")


def log_units_finished(tracker: Tracker, units: int) -> None:
    """How many units a point that failed had finished (0: it failed before its first)."""
    tracker.log_metrics(flatten(Figures({"units_finished": float(units)})))


def log_finished(tracker: Tracker, decoded: Decoded) -> None:
    """What a point that failed had finished: the speculative decode of its first units (their records
    and the figures that need no timing: block efficiency, acceptance by depth, tree and KV sizes)."""
    log_units_finished(tracker, len(decoded.runs))
    if not decoded.runs:
        return
    figures = run_figures(concat_runs(decoded.runs))
    logged = flatten(figures.only(UNTIMED) | {k: v for k, v in figures.items() if is_acceptance(k)})
    log_figures(tracker, logged)
    log_records(tracker, decoded)
    plt.close("all")
