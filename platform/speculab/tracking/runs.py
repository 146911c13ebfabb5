"""The tracked runs of an experiment point and of a sweep: where they spool, how a point finds its
sweep's parent run, and a tracked point's decode inside its run (`tracked_point`: skipped where
`resume=true` finds it finished; `point.experiment.run` hands a point here only when it is tracked, so an
untracked run imports no MLflow).

Each `speculab` process that runs a sweep has its own id (`SWEEP_ID`; its replicas' processes share
it): it ends the default sweep directory's name (conf/config.yaml, `${sweep_id:}`) and names the file
in which the sweep's parent run is left for its points, so two sweeps started in the same second, or
given the same `hydra.sweep.dir`, never share a parent.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from speculab.config import NOT_PARAMS, Config, RunPlan, TrackingConfig, describe_device, tracking_uri
from speculab.config.prompts import PointPrompts, point_prompts
from speculab.process import interrupts, jobs
from speculab.registry import get_algorithm
from speculab.results.point import PointResult, PointShape
from speculab.show.console import say
from speculab.tracking.provenance import provenance_tags
from speculab.tracking.resume import Finished, finished_point, point_id
from speculab.tracking.run_page import ended_tags, point_description
from speculab.tracking.spool import (
    DECODING_TAG,
    HEADLINE_TAG,
    KIND_TAG,
    LOSSLESS_TAG,
    MEMBER,
    NOTE_TAG,
    POINT_TAG,
    VERDICT_TAG,
    RunRef,
    SpooledRun,
    member_tag,
    tracked,
)
from speculab.tracking.store import store_client
from speculab.tracking.tracker import Tracker, flat_params
from speculab.tracking.ui import experiment_tags, where

SWEEP_ID_ENV = (
    "SPECULAB_SWEEP_ID"  # a replica's process (`speculab.launch.replica_process`) takes its launcher's sweep id
)
# the end of the sweep directory's name, and its parent file's key
SWEEP_ID = os.environ.get(SWEEP_ID_ENV) or uuid.uuid4().hex[:8]
PARENT_FILE = f"mlflow_parent.{SWEEP_ID}.json"  # in a sweep's directory: the parent run's spool id and run id
REPLICA_TAG = "speculab.replica"  # a point run on one of several replicas: "2 of 3" (`cluster.replicas`)


def output_dir() -> Path:
    """This job's Hydra output directory (outside Hydra: ./outputs)."""
    return jobs.current().output_dir


def spool_dir(tracking: TrackingConfig, default: Path) -> Path:
    """`tracking.spool_dir` if set, else ``default`` (a spool/ folder in Hydra's output dir)."""
    return Path(tracking.spool_dir).resolve() if tracking.spool_dir else default


def sweep_id() -> str:
    """The `${sweep_id:}` resolver (registered by `speculab.launch.cli`): this process's `SWEEP_ID`."""
    return SWEEP_ID


def write_parent_file(sweep_dir: Path, parent: RunRef) -> Path:
    """Leave this sweep's parent run for its points; created exclusively, so that a file of the same
    name (another sweep with this id, which cannot happen by chance) is never overwritten."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    path = sweep_dir / PARENT_FILE
    with path.open("x") as out:
        out.write(json.dumps(asdict(parent)))
    return path


def sweep_parent() -> RunRef | None:
    """This sweep's parent run inside a multirun job (written by `MlflowSweepCallback` of this
    process, `PARENT_FILE`), else None."""
    job = jobs.current()
    if job.sweep_dir is None or not (parent := job.sweep_dir / PARENT_FILE).is_file():
        return None
    return RunRef(**json.loads(parent.read_text()))


PARAM_LIMIT = 6000  # characters of a param's value MLflow keeps
PROMPT_IDS = "dataset.prompt_ids"  # which prompts the point decodes (a sample: `dataset.sample_seed`)


def prompt_ids_param(ids: list[str]) -> str:
    """The prompts' ids, comma-separated, cut at a whole id within MLflow's limit saying how many there are."""
    text = ",".join(ids)
    if len(text) <= PARAM_LIMIT:
        return text
    return f"{text[: text.rfind(',', 0, PARAM_LIMIT - 80)]},… ({len(ids)} in all; units.json lists every one)"


def join_sweep(cfg: Config, found: Finished) -> None:
    """Tag a run a resumed sweep found finished as a point of this launch too (its parent's `member_tag`;
    it stays nested under the parent it ran under), so that the launch's link and `speculab-report --run`
    show every point of the sweep; nothing for a spool's run or a store that does not answer."""
    parent = sweep_parent()
    if parent is None or parent.run_id is None or found.run_id is None:
        return
    try:
        store_client(tracking_uri(cfg.tracking)).set_tag(found.run_id, member_tag(parent.run_id), MEMBER)
    except Exception:  # the parent's table still lists the point; only the link misses it
        return


def start_point_run(plan: RunPlan, point: str, shape: PointShape, prompt_ids: list[str]) -> SpooledRun:
    """Create the point's run now (RUNNING, params with the ids of the prompts it decodes, tags,
    description), nested under the sweep's parent."""
    cfg, job = plan.cfg, jobs.current()
    beside = {REPLICA_TAG: f"{job.replica + 1} of {job.replicas}"} if job.replicas > 1 else {}
    tags = {
        HEADLINE_TAG: DECODING_TAG,  # made first: a point's page lists its tags in that order (tracking.spool)
        VERDICT_TAG: DECODING_TAG,
        **beside,
        POINT_TAG: point,
        KIND_TAG: "point",
        "algorithm": cfg.algorithm.name,
        "model": cfg.model.name,
        LOSSLESS_TAG: str(get_algorithm(cfg.algorithm.name).lossless(cfg.algorithm.K)).lower(),
        NOTE_TAG: point_description(shape, cfg.runtime.kind),
        "device": describe_device(cfg, plan.target_device),
        "draft_device": describe_device(cfg, plan.draft_device),
        **provenance_tags(output_dir()),
    }
    run = SpooledRun(
        spool_dir(cfg.tracking, output_dir() / "spool"),
        tracking_uri(cfg.tracking),
        cfg.tracking.experiment,
        shape.name,
        tags,
        sweep_parent(),
        experiment_tags(),
    )
    params = flat_params({key: value for key, value in asdict(cfg).items() if key not in NOT_PARAMS})
    loaded = {
        "model.target_dir": str(plan.target_dir),
        "model.draft_dir": str(plan.draft_dir),
        "model.target_digest": plan.target_digest,
        "model.draft_digest": plan.draft_digest,
    }  # what the pair named `model.name` holds (`config.pair`)
    run.log_params(params | loaded | {PROMPT_IDS: prompt_ids_param(prompt_ids)})
    return run


Decode = Callable[[RunPlan, PointShape, Tracker, PointPrompts], PointResult]  # `point.experiment.decode_point`


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
