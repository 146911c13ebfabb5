"""What a tracked point's run holds when it ends: its figures as metrics, its description, its console
summary, its prompts' records and plots; and of a point that failed, what its finished units tell.

`point.experiment.decode_point` calls these with the point's `Tracker` (a spooled MLflow run) only when the
point is tracked: an untracked run builds no figure and imports no matplotlib.
"""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass, field
from typing import cast

import matplotlib.pyplot as plt
from transformers import PreTrainedTokenizerBase

from speculab.config import RunPlan
from speculab.core.measure import Sample
from speculab.core.records import RunResult, concat_runs
from speculab.data import Prompt
from speculab.results.figures import acceptance_histogram, histogram_by_draft_length, run_figures
from speculab.results.names import FIGURES_ARTIFACT, UNTIMED, Figures, flatten, is_acceptance, split_spreads
from speculab.results.point import UNITS_ARTIFACT, PointResult
from speculab.results.profile import PROFILE_ARTIFACT, conditions_of, profile_of
from speculab.results.requests import REQUESTS_ARTIFACT, request_records, requests_jsonl, requests_of
from speculab.results.verdicts import run_verdicts
from speculab.show.acceptance import depth_figure
from speculab.show.answers import run_verdict_words
from speculab.show.plots import acceptance_figure, time_split_figure
from speculab.show.requests import FILE as REQUESTS_FIGURE
from speculab.show.requests import request_figure
from speculab.show.summary import SUMMARY_FILE
from speculab.tracking.run_page import headline_tag, point_description, prompt_records, records_jsonl, records_table
from speculab.tracking.spool import HEADLINE_TAG, NOTE_TAG, VERDICT_TAG
from speculab.tracking.tracker import Tracker

CONDITIONS_TAG = "speculab.conditions"


@dataclass(frozen=True)
class Decoded:
    """What the speculative decode gave, prompt by prompt: its runs (one a unit), the prompts they decoded
    (in order), the tokenizer that reads their tokens back, and its timed decodes [unit][repetition] (empty:
    a point that failed before its timings were gathered)."""

    runs: list[RunResult]
    prompts: list[Prompt]
    tokenizer: PreTrainedTokenizerBase
    samples: list[list[Sample]] = field(default_factory=list)

    @property
    def prompt_ids(self) -> list[str]:
        return [p.id for p in self.prompts]


def log_figures(tracker: Tracker, logged: dict[str, float]) -> None:
    """Figures (`flatten`ed) as metrics, values only, and whole, spreads included, as FIGURES_ARTIFACT."""
    tracker.log_metrics(split_spreads(logged))
    tracker.log_text(json.dumps(logged, indent=1), FIGURES_ARTIFACT)


def log_point(
    tracker: Tracker, result: PointResult, summary: str, plan: RunPlan, conditions: str, decoded: Decoded
) -> None:
    """The point's final figures (and its baselines'), its description and where it was measured
    (`conditions`, on the plan's runtime), its whole console summary, its per-prompt records and plots, and
    its speculation profile."""
    runtime = plan.cfg.runtime.kind
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
    log_profile(tracker, result, plan, conditions, concat_runs(decoded.runs))
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
    categories = [p.category for p in decoded.prompts]
    requests = request_records(decoded.runs, decoded.prompt_ids, categories, decoded.samples)
    tracker.log_text(requests_jsonl(requests), REQUESTS_ARTIFACT)


def log_profile(tracker: Tracker, result: PointResult, plan: RunPlan, conditions: str, spec: RunResult) -> None:
    """A drafted point's `speculation_profile.json` (none for a run that drafted nothing) and its per-request
    figure, both from the figures its run logs."""
    if not spec.length or "acceptance_length" not in result.figures:
        return
    machine = f"{conditions} · {platform.platform()} · {platform.processor() or platform.machine()}"
    count = len(spec.prompts)
    measured = conditions_of(
        result.shape, str(plan.target_dir), str(plan.draft_dir), count, plan.cfg.measure.repeats, plan.cfg.runtime.kind,
        machine,
    )  # fmt: skip
    tracker.log_text(profile_of(result, acceptance_histogram(spec), measured).to_json(), PROFILE_ARTIFACT)
    lengths = [r.acceptance_length for r in requests_of(spec)]
    means = {
        key: result.figures[key]
        for key in ("acceptance_length", "acceptance_length_per_request")
        if key in result.figures
    }
    note = f"{result.shape.name} · {len(lengths)} prompts"
    tracker.log_figure(request_figure(lengths, means, histogram_by_draft_length(spec), note), REQUESTS_FIGURE)


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
