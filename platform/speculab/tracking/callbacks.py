"""Hydra callback: a parent MLflow run around a multirun sweep.

`on_multirun_start` first resolves every point of the sweep (`sweep_plans`: the preset's
sweep params and the command line, expanded as Hydra's basic sweeper expands them) and refuses
the whole sweep, before any run exists or any point starts, when one is invalid; each point's job
takes its plan from there (`planned`), so a point is resolved once. It then opens
the parent run (spooled like every run, see `tracking.spool`) and
leaves its spool id and run id in the sweep directory, in a file keyed by this process's sweep id
(`tracking.runs.PARENT_FILE`), where each sweep point (same process, Hydra's serial launcher)
finds it and nests its own run under it; a second sweep, even one in the same directory, has its
own file and parent. `on_multirun_end` ends it FINISHED, or FAILED when a point failed mid-run (that
point's run is FAILED with the units it finished, and the sweep went on: the parent says which and
why). A sweep that stops early (Ctrl-C, SIGTERM, an error outside a point) never reaches
`on_multirun_end`: the `speculab` entry point ends the parent FAILED or KILLED instead.
`on_job_end` collects each finished point's result (with `resume=true`, also those of the points
skipped as finished earlier, read back from their runs); `on_multirun_end` gives the parent the
sweep's table (markdown, CSV, an MLflow table), a chart, the best point's metrics and a description.
"""

from __future__ import annotations

import bisect
import os
import sys
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from speculab.config import ConfigError, RunPlan, TrackingConfig, resolve, tracking_uri, unknown_keys
from speculab.config.overrides import composition_problem, with_range
from speculab.config.replicas import sweep_wide_errors
from speculab.config.schema import job_config
from speculab.jobs import ReplicaLost
from speculab.results.point import FailedPoint, PointResult, PointShape
from speculab.results.verdicts import SweepAnswer, baselines_sentence, headline_note, leader_sentence, sweep_answer
from speculab.tracking.acceptance import depth_csv, depth_figure, depth_markdown
from speculab.tracking.console import console
from speculab.tracking.provenance import launch_label, provenance_tags
from speculab.tracking.resume import point_id
from speculab.tracking.runs import SWEEP_ID, spool_dir, write_parent_file
from speculab.tracking.spool import KIND_TAG, NOTE_TAG, SpooledRun
from speculab.tracking.sweep import best_metrics, labels, shared_name, sweep_name
from speculab.tracking.sweep_page import (
    failure_line,
    ranking_table,
    sweep_csv,
    sweep_description,
    sweep_figure,
    sweep_markdown,
    table_rows,
    within_limit,
)
from speculab.tracking.ui import experiment_tags, point_link, run_page, ui_port, where

DESCRIPTION = "sweep_description.md"  # the parent's whole description, which MLflow cuts past NOTE_LIMIT
FAILED_METRIC = "sweep/failed_points"  # a parent's count of the points that failed mid-run

# This process's sweep points, resolved when the sweep starts, by their overrides: Hydra's serial launcher
# calls each point's job with its composed config only, so this is how a job gets its plan (`planned`)
# rather than resolving its config a second time. Filled by `on_multirun_start`, emptied at the end;
# a single run's plan is left here by `speculab.cli.precheck`, which resolves it before Hydra starts.
PLANS: dict[tuple[str, ...], RunPlan] = {}


def planned(overrides: list[str]) -> RunPlan:
    """The plan of this process's sweep point with these overrides (Hydra's `overrides.task`)."""
    try:
        return PLANS[tuple(overrides)]
    except KeyError:
        raise RuntimeError(
            f"sweep point {' '.join(overrides)!r} was not resolved when its sweep started: is "
            "speculab.tracking.callbacks.MlflowSweepCallback among hydra.callbacks?"
        ) from None


def sweep_points(config: DictConfig) -> list[list[str]]:
    """Every point's overrides, in launch order: the preset's `hydra.sweeper.params`, then the
    command line, split as Hydra's basic sweeper splits them (a cartesian product of the lists)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = config.hydra.sweeper.get("params") or {}
    arguments = [f"{key}={value}" for key, value in params.items()] + list(config.hydra.overrides.task)
    batches = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(arguments), None)
    return [list(job) for batch in batches for job in batch]


def values(points: list[list[str]], key: str) -> set[str]:
    """The values ``key`` takes over the points' overrides."""
    return {o.split("=", 1)[1] for job in points for o in job if o.split("=", 1)[0] == key}


def sweep_plans(config: DictConfig) -> tuple[list[RunPlan], list[str]]:
    """(each valid point's plan, in launch order; what `resolve` and the unknown-key check say of the
    invalid ones, each line prefixed by its point)."""
    from hydra.core.global_hydra import GlobalHydra

    loader = GlobalHydra.instance().config_loader()
    points = sweep_points(config)
    varied = {key for key in {o.split("=", 1)[0] for job in points for o in job} if len(values(points, key)) > 1}
    plans: list[RunPlan] = []
    errors: list[str] = []
    for number, overrides in enumerate(points, start=1):
        label = " ".join(o for o in overrides if o.split("=", 1)[0] in varied)
        try:
            job = loader.load_sweep_config(config, overrides)
        except Exception as err:  # Hydra's: an unknown group option, a value of the wrong type
            if (line := composition_problem(err, overrides)) is None:
                raise
            line = with_range(line, overrides, lambda changed: loader.load_sweep_config(config, changed))
            errors.append(f"point {number} of {len(points)} ({label}): {line}")
            continue
        try:
            if unknown := unknown_keys(job):
                raise ConfigError.listing(unknown)
            plans.append(resolve(job_config(job)))
            PLANS[tuple(overrides)] = plans[-1]
        except ConfigError as err:
            lines = str(err).splitlines()[1:]  # after "invalid config:"
            errors += [f"point {number} of {len(points)} ({label}): {line.strip()}" for line in lines]
    return plans, [*sweep_wide_errors([plan.cfg for plan in plans]), *errors]


class MlflowSweepCallback(Callback):
    def __init__(self) -> None:
        self.parent: SpooledRun | None = None
        self.points: list[PointResult] = []  # one per finished point, in launch order, for the parent's summary
        self.point_ids: list[str] = []  # the same points' ids
        self.numbers: list[int] = []  # the same points' job numbers (side by side, they end in any order)
        self.failed: list[FailedPoint] = []  # the points that failed mid-run; the sweep went on
        self.lost: list[ReplicaLost] = []  # attempts whose replica was lost (each point ran again on another)
        self.total = 0  # the sweep's points
        self.overrides = ""
        self.ui_port: int | None = TrackingConfig.ui_port

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        plans, errors = sweep_plans(config)
        if errors:
            print("speculab: invalid sweep:\n  " + "\n  ".join(errors), file=sys.stderr)
            raise SystemExit(2)
        tracking = TrackingConfig(**config.tracking)
        self.ui_port, self.total = tracking.ui_port, len(plans)
        if not tracking.enabled:
            return
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

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        if self.parent is None:
            return
        if job_return.status == JobStatus.FAILED and isinstance(job_return._return_value, ReplicaLost):
            self.lost.append(job_return._return_value)  # the launcher runs the point again on another replica
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
        assert self.parent is not None
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

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        PLANS.clear()
        if self.parent is None:
            return
        found = sweep_answer(self.points) if self.points else None
        if found is not None:
            self.parent.log_table(table_rows(self.points), "sweep_points.json")
            self.parent.log_text(sweep_markdown(self.points), "sweep_table.md")
            self.parent.log_text(sweep_csv(self.points), "sweep_table.csv")
            self.parent.log_figure(sweep_figure(found), "sweep_points.png")
            self.log_acceptance()
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

    def log_acceptance(self) -> None:
        """Every point's alpha_j as one plot and a table (`tracking.acceptance`), named by what sets them apart."""
        assert self.parent is not None
        short = labels(self.points)
        curves = {short[p.shape.name]: p.figures for p in self.points if p.figures.series("alpha")}
        shared = shared_name(self.points)
        if (figure := depth_figure(curves, f"every point: {shared}" if shared else "")) is not None:
            self.parent.log_figure(figure, "acceptance_by_depth.png")
            self.parent.log_text(depth_markdown(curves), "acceptance_by_depth.md")
            self.parent.log_text(depth_csv(curves), "acceptance_by_depth.csv")

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
        if self.parent is not None and best is not None and (link := point_link(self.parent, best, self.ui_port)):
            print(f"speculab: best point's run: {link}")
