"""A tracked sweep's parent MLflow run: opened when the sweep starts, given each point's outcome as its
job ends, and at the end the sweep's answer.

The parent is spooled like every run (`tracking.spool`); its spool id and run id are left in the sweep
directory, in a file keyed by this process's sweep id (`tracking.runs.PARENT_FILE`), where each point
finds it and nests its own run under it; a second sweep, even one in the same directory, has its own file
and parent. At the end the parent gets the sweep's table (markdown, CSV, an MLflow table), a chart, the
best point's metrics and a description, and ends FINISHED, or FAILED when a point failed mid-run (that
point's run is FAILED with the units it finished, and the sweep went on: the parent says which and why).
A sweep that stops early (Ctrl-C, SIGTERM, an error outside a point) never reaches `end`: the
`speculab` entry point ends the parent FAILED or KILLED, with `stopped_tags` as its description.
"""

from __future__ import annotations

import bisect
import os
import sys
from pathlib import Path

from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig

from speculab.config import RunPlan, TrackingConfig, tracking_uri
from speculab.config.sweep import race_stages
from speculab.process.jobs import ReplicaLost, replica_lost
from speculab.results.point import FailedPoint, PointResult, PointShape
from speculab.results.race import pooled, race_name, read_race, stage_share
from speculab.results.sweep import best_metrics, contrast_cells, labels, shared_name, sweep_name
from speculab.results.verdicts import OVER, SweepAnswer, sweep_answer
from speculab.show.acceptance import depth_csv, depth_figure, depth_markdown
from speculab.show.answers import (
    baselines_sentence,
    headline_note,
    leader_headline,
    race_lines,
    sweep_section,
    sweep_verdict_words,
)
from speculab.show.console import console
from speculab.show.requests import FILE as REQUESTS_FIGURE
from speculab.show.requests import sweep_request_figure
from speculab.show.sweep import contrast_markdown, contrast_table, ranking_table, sweep_figure
from speculab.tracking.provenance import launch_label, provenance_tags
from speculab.tracking.resume import point_id
from speculab.tracking.run_page import with_sweep_section
from speculab.tracking.runs import SWEEP_ID, spool_dir, write_parent_file
from speculab.tracking.spool import KIND_TAG, NOTE_TAG, VERDICT_TAG, SpooledRun
from speculab.tracking.store import store_client
from speculab.tracking.sweep_page import (
    failure_line,
    sweep_csv,
    sweep_description,
    sweep_markdown,
    table_rows,
    within_limit,
)
from speculab.tracking.tracker import Tracker
from speculab.tracking.ui import experiment_tags, point_link, point_runs, run_page, ui_port, where

DESCRIPTION = "sweep_description.md"  # the parent's whole description, which MLflow cuts past NOTE_LIMIT
FAILED_METRIC = "sweep/failed_points"  # a parent's count of the points that failed mid-run


class SweepRun:
    """A tracked sweep's parent run, opened when the sweep starts, and what it gathers as points end."""

    def __init__(self, config: DictConfig, plans: list[RunPlan], tracking: TrackingConfig) -> None:
        self.points: list[PointResult] = []  # one per finished point, in launch order, for the parent's summary
        self.point_ids: list[str] = []  # the same points' ids
        self.point_overrides: list[list[str]] = []  # the same points' overrides (what a contrast reads)
        self.contrast: str | None = config.sweep.contrast
        self.race = race_stages(config)  # a racing sweep's stages (None: flat)
        self.baselines = bool(config.baseline or config.baseline_hf)
        self.numbers: list[int] = []  # the same points' job numbers (side by side, they end in any order)
        self.failed: list[FailedPoint] = []  # the points that failed mid-run; the sweep went on
        self.lost: list[ReplicaLost] = []  # attempts whose replica was lost (each point ran again on another)
        self.total, self.ui_port = len(plans), tracking.ui_port
        self.sweep_dir = sweep_dir = Path(config.hydra.sweep.dir)
        self.overrides = overrides = " ".join(config.hydra.overrides.task)
        tags = {KIND_TAG: "sweep", NOTE_TAG: f"Sweep `{overrides}`: running.", **provenance_tags(sweep_dir)}
        name = sweep_name(PointShape.of(plans[0].cfg), list(config.hydra.overrides.task))
        self.parent = SpooledRun(
            spool_dir(tracking, sweep_dir / "spool"),
            tracking_uri(tracking),
            tracking.experiment,
            f"{name} · {launch_label(dict(os.environ), SWEEP_ID)}",  # two launches of one sweep get two names
            tags,
            experiment_tags=experiment_tags(),
        )
        self.parent.log_params({"sweep.overrides": overrides})
        self.parent.early_end = self.stopped_tags  # Ctrl-C, SIGTERM or an error outside a point
        write_parent_file(sweep_dir, self.parent.ref)

    def job_ended(self, config: DictConfig, job_return: JobReturn) -> None:
        """A point's job ended: finished, failed mid-run (the sweep goes on), or lost with its replica."""
        if (lost := replica_lost(job_return)) is not None:
            self.lost.append(lost)  # the launcher runs the point again on another replica
        elif job_return.status != JobStatus.COMPLETED or not job_return.return_value:
            return
        elif isinstance(outcome := job_return.return_value, FailedPoint):
            self.failed.append(outcome)
        else:  # `point.experiment.PointOutcome` of a finished point
            at = bisect.bisect(self.numbers, number := int(config.hydra.job.num))
            self.numbers.insert(at, number)
            self.points.insert(at, outcome.result)
            self.point_ids.insert(at, point_id(outcome.plan.cfg))
            self.point_overrides.insert(at, list(config.hydra.overrides.task))
        if self.ended < self.total:  # the parent's page says how far the sweep is, as its points end
            lead = f"**Running: {self.ended} of {self.total} points ended.**"
            self.parent.set_tags({NOTE_TAG: within_limit(self.described(lead), DESCRIPTION)})

    def answered(self) -> dict[str, PointResult]:
        """Point id -> the point as the sweep's answer sees it: every finished point; a race's, those of its
        last stage so far, each pooled with its earlier stages (`results.race.pooled`)."""
        if self.race is None:
            return dict(zip(self.point_ids, self.points))
        stages = read_race(self.sweep_dir)
        last = f"dataset.slice=[{stages[-1].start},{stages[-1].stop}]" if stages else ""
        history: dict[str, list[PointResult]] = {}
        for point in self.points:  # in the launch's order: stage by stage
            history.setdefault(race_name(point), []).append(point)
        found = zip(self.point_ids, self.points, self.point_overrides)
        return {i: pooled(history[race_name(p)]) for i, p, o in found if last in o}

    def answer(self, answered: dict[str, PointResult] | None = None) -> SweepAnswer | None:
        """The sweep's verdicts on the points finished so far (None: none), its contrast where it names one;
        a race's, on its last stage's points so far pooled over their stages, with what the earlier stages
        spent. ``answered``: `answered()`, where the caller keeps its points (the answer ranks those)."""
        if not self.points:
            return None
        if self.race is not None:
            stages = read_race(self.sweep_dir)
            points = list((answered if answered is not None else self.answered()).values()) or self.points
            share = stage_share(len(self.race), len(stages[0].points) if stages else len(points), self.baselines)
            out = sum(len(stage.out) for stage in stages)
            return sweep_answer(points, spent=share * (len(self.race) - 1), ruled_out_before=out)
        if self.contrast is None:
            return sweep_answer(self.points)
        cells, order = contrast_cells(self.point_overrides, self.contrast)
        return sweep_answer(self.points, cells, order)

    @property
    def ended(self) -> int:
        return len(self.points) + len(self.failed)

    def described(self, lead: str = "") -> str:
        """The parent's whole description, after `lead` where given (MLflow keeps `within_limit` of it)."""
        port = ui_port(self.parent.uri, self.ui_port)
        links = [
            run_page(self.parent.uri, self.parent.experiment_id, lost.run_id, port) if lost.run_id else None
            for lost in self.lost
        ]
        race = race_lines(read_race(self.sweep_dir)) if self.race is not None else []
        text = sweep_description(self.overrides, self.answer(), self.failed, list(zip(self.lost, links)), race)
        return f"{lead}\n\n{text}" if lead else text

    def stopped_tags(self, status: str, err: BaseException | None) -> dict[str, str]:
        """The parent's description when the sweep stops before its end: how far it got, then what it has."""
        rest = "the finished points are recorded; the same command with `resume=true` runs the rest"
        if status == "KILLED":
            lead = f"**Interrupted after {self.ended} of {self.total} points** (Ctrl-C or SIGTERM): {rest}."
        else:
            why = f": {' '.join(str(err).split())}" if err is not None else ""
            lead = f"**Stopped by an error after {self.ended} of {self.total} points**{why}; {rest}."
        return {NOTE_TAG: within_limit(self.described(lead), DESCRIPTION)}

    def end(self) -> None:
        """The sweep reached its end: the parent gets its tables, plots, best point and description, and
        ends FINISHED (FAILED where a point failed); the console gets the ranking."""
        answered = self.answered()
        found = self.answer(answered)
        if found is not None:
            self.parent.log_table(table_rows(self.points), "sweep_points.json")
            self.parent.log_text(sweep_markdown(self.points), "sweep_table.md")
            self.parent.log_text(sweep_csv(self.points), "sweep_table.csv")
            self.parent.log_figure(sweep_figure(found), "sweep_points.png")
            if found.contrasts:
                self.parent.log_text(contrast_markdown(found), "sweep_contrasts.md")
            log_acceptance(self.parent, self.points)
        if found is not None:
            self.parent.log_metrics(best_metrics(found))
        if self.failed:
            self.parent.log_metrics({FAILED_METRIC: float(len(self.failed))})
        if found is not None:  # a race's earlier stages are not its answer: its last stage's runs are told
            tell_points(self.parent, found, answered)
        description = self.described() if self.points or self.failed else ""
        if description:
            self.parent.log_text(description, DESCRIPTION)
            self.parent.set_tags({NOTE_TAG: within_limit(description, DESCRIPTION)})
        self.parent.early_end = None  # it reached its end: the description above says how
        self.parent.end("FAILED" if self.failed else "FINISHED")  # not every point it was asked for finished
        if found is not None:
            self.print_ranking(found, description)
        if self.failed:
            total = len(self.points) + len(self.failed)
            print(f"speculab: {failure_line(self.failed, total).replace('**', '')}", file=sys.stderr)
        print(f"speculab: sweep summary in the parent {where(self.parent, self.ui_port, sweep=True)}")

    def print_ranking(self, found: SweepAnswer, description: str) -> None:
        """The console's last screen: the top points with their intervals, the contrasts asked for, the
        verdict in a few words and the points against each baseline, and where the whole answer is (the
        parent's description, also written to the sweep's directory)."""
        title = f"sweep ranking by {found.key}"
        console().print(ranking_table(found, title))
        if found.contrasts:
            console().print(contrast_table(found, found.key))
        short = labels(found.ranked)
        for line in race_lines(read_race(self.sweep_dir)) if self.race else []:
            print(f"speculab: race: {line}")
        print(f"speculab: {leader_headline(found, lambda point: short[point.shape.name]).replace('**', '')}")
        if counts := baselines_sentence(found, OVER):
            print(f"speculab: {counts}")
        if note := headline_note(self.points):
            print(f"speculab: note: {note}")
        whole = self.sweep_dir / DESCRIPTION
        whole.write_text(description)
        print(f"speculab: the whole answer, every point and what each verdict rests on: {whole}")
        best = next((i for p, i in zip(self.points, self.point_ids) if p is found.best), None)
        if best is not None and (link := point_link(self.parent, best, self.ui_port)):
            print(f"speculab: best point's run: {link}")


def log_acceptance(parent: Tracker, points: list[PointResult]) -> None:
    """Every point's alpha_j as one plot and a table (`show.acceptance`), and its prompts' acceptance lengths
    side by side (`show.requests`), named by what sets them apart."""
    short = labels(points)
    curves = {short[p.shape.name]: p.figures for p in points if p.figures.series("alpha")}
    shared = shared_name(points)
    if (figure := depth_figure(curves, f"every point: {shared}" if shared else "")) is not None:
        parent.log_figure(figure, "acceptance_by_depth.png")
        parent.log_text(depth_markdown(curves), "acceptance_by_depth.md")
        parent.log_text(depth_csv(curves), "acceptance_by_depth.csv")
    lengths = {short[p.shape.name]: list(p.units.acceptance_lengths) for p in points if p.units is not None}
    if (spread := sweep_request_figure(lengths, f"every point: {shared}" if shared else "")) is not None:
        parent.log_figure(spread, REQUESTS_FIGURE)


def tell_points(parent: SpooledRun, answer: SweepAnswer, points: dict[str, PointResult]) -> None:
    """Each point's run learns its sweep's verdicts on it: its description opens on the sweep's section
    (`show.answers.sweep_section`), its verdict column gets the sweep's words (`sweep_verdict_words`),
    so that its page, the runs table and the parent say the same; where the store cannot be reached, the
    parent's answer stands alone and the console says so."""
    runs = point_runs(parent)
    short = labels(answer.ranked)
    try:
        client = store_client(parent.uri) if runs else None
        for identity, point in points.items():
            if client is None or (run_id := runs.get(identity)) is None:
                continue
            section = sweep_section(answer, point, lambda p: short[p.shape.name])
            note = client.get_run(run_id).data.tags.get(NOTE_TAG, "")
            client.set_tag(run_id, NOTE_TAG, with_sweep_section(note, section))
            client.set_tag(run_id, VERDICT_TAG, sweep_verdict_words(answer, point))
    except Exception as err:  # the store went away at the end: the parent's answer is written (or spooled)
        print(
            f"speculab: the points' pages were not given the sweep's verdicts ({type(err).__name__})", file=sys.stderr
        )
