"""A tracked point's MLflow run around its decode: skipped where `resume=true` finds it finished,
else created RUNNING before the first unit and ended FINISHED, FAILED or KILLED (`tracking.spool`).

`experiment.run` hands a point here only when it is tracked, so an untracked run imports no MLflow.
"""

from __future__ import annotations

from collections.abc import Callable

from speculab import interrupts, jobs
from speculab.config import RunPlan
from speculab.config.prompts import PointPrompts, point_prompts
from speculab.results.point import PointResult, PointShape
from speculab.tracking.console import say
from speculab.tracking.resume import finished_point, point_id
from speculab.tracking.run_page import ended_tags
from speculab.tracking.runs import join_sweep, start_point_run
from speculab.tracking.spool import tracked
from speculab.tracking.tracker import Tracker
from speculab.tracking.ui import where

Decode = Callable[[RunPlan, PointShape, Tracker, PointPrompts], PointResult]  # `experiment.decode_point`


def tracked_point(plan: RunPlan, shape: PointShape, decode: Decode) -> PointResult:
    """The point decoded inside its run; with `resume=true` and a finished run of the same point in the
    store (same id: same resolved config), what that run logged, without decoding."""
    point = point_id(plan.cfg)
    if plan.cfg.resume and (found := finished_point(plan.cfg, point)):
        join_sweep(plan.cfg, found)
        say(f"speculab: resume: {shape.name} (point {point}) already finished: {found.where}; skipped")
        return PointResult.from_logged(shape, found.metrics, found.units, resumed=True)
    loaded = point_prompts(plan)  # what loading refuses, before the point's run exists
    run = start_point_run(plan, point, shape, [p.id for p in loaded.prompts])
    run.early_end = lambda status, err: ended_tags(shape, plan.cfg.runtime.kind, status, err)
    try:
        with tracked(run):
            result = decode(plan, shape, run, loaded)
    except jobs.ReplicaLost as lost:
        lost.run_id = run.run_id  # the sweep's parent links the lost attempt
        raise
    with interrupts.held(raise_after=False):  # recorded: its result reaches the sweep's parent before a stop
        say(f"speculab: {where(run, plan.cfg.tracking.ui_port)}")
    return result
