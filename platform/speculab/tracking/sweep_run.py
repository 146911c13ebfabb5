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
from speculab.jobs import ReplicaLost, replica_lost
from speculab.results.point import FailedPoint, PointResult, PointShape
from speculab.results.sweep import best_metrics, labels, shared_name, sweep_name
from speculab.results.verdicts import SweepAnswer, baselines_sentence, headline_note, leader_sentence, sweep_answer
from speculab.show.acceptance import depth_csv, depth_figure, depth_markdown
from speculab.show.console import console
from speculab.show.sweep import ranking_table, sweep_figure
from speculab.tracking.provenance import launch_label, provenance_tags
from speculab.tracking.resume import point_id
from speculab.tracking.runs import SWEEP_ID, spool_dir, write_parent_file
from speculab.tracking.spool import KIND_TAG, NOTE_TAG, SpooledRun
from speculab.tracking.sweep_page import (
    failure_line,
    sweep_csv,
    sweep_description,
    sweep_markdown,
    table_rows,
    within_limit,
)
from speculab.tracking.tracker import Tracker
from speculab.tracking.ui import experiment_tags, point_link, run_page, ui_port, where

DESCRIPTION = "sweep_description.md"  # the parent's whole description, which MLflow cuts past NOTE_LIMIT
FAILED_METRIC = "sweep/failed_points"  # a parent's count of the points that failed mid-run


class SweepRun:
    """A tracked sweep's parent run, opened when the sweep starts, and what it gathers as points end."""

    def __init__(self, config: DictConfig, plans: list[RunPlan], tracking: TrackingConfig) -> None:
        self.points: list[PointResult] = []  # one per finished point, in launch order, for the parent's summary
        self.point_ids: list[str] = []  # the same points' ids
        self.numbers: list[int] = []  # the same points' job numbers (side by side, they end in any order)
        self.failed: list[FailedPoint] = []  # the points that failed mid-run; the sweep went on
        self.lost: list[ReplicaLost] = []  # attempts whose replica was lost (each point ran again on another)
        self.total, self.ui_port = len(plans), tracking.ui_port
        sweep_dir = Path(config.hydra.sweep.dir)
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
        else:  # `experiment.PointOutcome` of a finished point
            at = bisect.bisect(self.numbers, number := int(config.hydra.job.num))
            self.numbers.insert(at, number)
            self.points.insert(at, outcome.result)
            self.point_ids.insert(at, point_id(outcome.plan.cfg))
        if self.ended < self.total:  # the parent's page says how far the sweep is, as its points end
            lead = f"**Running: {self.ended} of {self.total} points ended.**"
            self.parent.set_tags({NOTE_TAG: within_limit(self.described(lead), DESCRIPTION)})

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
        text = sweep_description(self.overrides, self.points, self.failed, list(zip(self.lost, links)))
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
        found = sweep_answer(self.points) if self.points else None
        if found is not None:
            self.parent.log_table(table_rows(self.points), "sweep_points.json")
            self.parent.log_text(sweep_markdown(self.points), "sweep_table.md")
            self.parent.log_text(sweep_csv(self.points), "sweep_table.csv")
            self.parent.log_figure(sweep_figure(found), "sweep_points.png")
            log_acceptance(self.parent, self.points)
        if found is not None:
            self.parent.log_metrics(best_metrics(found))
        if self.failed:
            self.parent.log_metrics({FAILED_METRIC: float(len(self.failed))})
        if self.points or self.failed:
            description = self.described()
            self.parent.log_text(description, DESCRIPTION)
            self.parent.set_tags({NOTE_TAG: within_limit(description, DESCRIPTION)})
        self.parent.early_end = None  # it reached its end: the description above says how
        self.parent.end("FAILED" if self.failed else "FINISHED")  # not every point it was asked for finished
        if found is not None:
            self.print_ranking(found)
        if self.failed:
            total = len(self.points) + len(self.failed)
            print(f"speculab: {failure_line(self.failed, total).replace('**', '')}", file=sys.stderr)
        print(f"speculab: sweep summary in the parent {where(self.parent, self.ui_port, sweep=True)}")

    def print_ranking(self, found: SweepAnswer) -> None:
        """The top points with their intervals, the verdict in one line (the fastest point's run, or the
        points not separated from the leader) and the points against each baseline."""
        title = f"sweep ranking by {found.key} (totals over units, 95% intervals)"
        console().print(ranking_table(found, title))
        short = labels(self.points)
        print(f"speculab: {leader_sentence(found, lambda point: short[point.shape.name]).replace('**', '')}")
        if counts := baselines_sentence(found):
            print(f"speculab: {counts}")
        if note := headline_note(self.points):
            print(f"speculab: note: {note}")
        best = next((i for p, i in zip(self.points, self.point_ids) if p is found.best), None)
        if best is not None and (link := point_link(self.parent, best, self.ui_port)):
            print(f"speculab: best point's run: {link}")


def log_acceptance(parent: Tracker, points: list[PointResult]) -> None:
    """Every point's alpha_j as one plot and a table (`show.acceptance`), named by what sets them apart."""
    short = labels(points)
    curves = {short[p.shape.name]: p.figures for p in points if p.figures.series("alpha")}
    shared = shared_name(points)
    if (figure := depth_figure(curves, f"every point: {shared}" if shared else "")) is not None:
        parent.log_figure(figure, "acceptance_by_depth.png")
        parent.log_text(depth_markdown(curves), "acceptance_by_depth.md")
        parent.log_text(depth_csv(curves), "acceptance_by_depth.csv")
