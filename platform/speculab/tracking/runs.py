"""The tracked runs of an experiment point and of a sweep: where they spool, how they are named
and identified, and how a resumed sweep finds the points that already finished.

A point's identity (``speculab.point_id``) is a hash of its resolved config without the
tracking settings and `resume`, so the same point gets the same id in every sweep. With
`resume=true` a point is skipped when a FINISHED run with its id exists in the experiment
(MLflow) or in a spool under the Hydra output roots (a run finished while MLflow was down).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

from hydra.core.hydra_config import HydraConfig
from matplotlib.figure import Figure
from mlflow.tracking import MlflowClient

from speculab.config import Config, tracking_uri
from speculab.tracking.spool import FAST_FAIL_ENV, RunRef, SpooledRun, open_run, read_spool
from speculab.tracking.sync import DEFAULT_ROOTS, spool_files

POINT_TAG = "speculab.point_id"
KIND_TAG = "speculab.kind"
PARENT_FILE = "mlflow_parent.json"  # in a sweep's directory: the parent run's spool id and run id


class Tracker(Protocol):
    def log_params(self, params: dict[str, Any]) -> None: ...
    def log_metrics(self, metrics: dict[str, float], step: int = 0) -> None: ...
    def log_text(self, text: str, artifact: str) -> None: ...
    def log_figure(self, figure: Figure, artifact: str) -> None: ...


class NoopTracker:
    """`tracking.enabled=false`: every call does nothing."""

    def log_params(self, params: dict[str, Any]) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int = 0) -> None:
        pass

    def log_text(self, text: str, artifact: str) -> None:
        pass

    def log_figure(self, figure: Figure, artifact: str) -> None:
        pass


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config -> {"a.b.c": value}, the form MLflow params take."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def point_id(cfg: Config) -> str:
    """Stable identity of an experiment point: its resolved config minus tracking and resume."""
    fields = {key: value for key, value in asdict(cfg).items() if key not in ("tracking", "resume")}
    return hashlib.sha1(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:16]


def output_dir() -> Path:
    """This job's Hydra output directory (outside Hydra: ./outputs)."""
    return Path(HydraConfig.get().runtime.output_dir) if HydraConfig.initialized() else Path("outputs").resolve()


def spool_dir(cfg: Config) -> Path:
    return Path(cfg.tracking.spool_dir).resolve() if cfg.tracking.spool_dir else output_dir() / "spool"


def sweep_parent() -> RunRef | None:
    """The sweep's parent run inside a multirun job (written by `MlflowSweepCallback`), else None."""
    if not HydraConfig.initialized():
        return None
    hydra = HydraConfig.get()
    parent = Path(hydra.sweep.dir) / PARENT_FILE
    if hydra.mode is None or hydra.mode.name != "MULTIRUN" or not parent.is_file():
        return None
    return RunRef(**json.loads(parent.read_text()))


def start_point_run(cfg: Config, name: str, point: str) -> SpooledRun:
    """Create the point's run now (RUNNING, params and tags), nested under the sweep's parent."""
    tags = {POINT_TAG: point, KIND_TAG: "point", "algorithm": cfg.algorithm.name, "model": cfg.model.name}
    run = open_run(spool_dir(cfg), tracking_uri(cfg.tracking), cfg.tracking.experiment, name, tags, sweep_parent())
    run.log_params(flatten(asdict(cfg)))
    return run


def finished_in_store(cfg: Config, point: str) -> str | None:
    """Run id of a FINISHED run of this point in the MLflow experiment (None if none or unreachable)."""
    for key, value in FAST_FAIL_ENV.items():
        os.environ.setdefault(key, value)
    try:
        client = MlflowClient(tracking_uri(cfg.tracking))
        experiment = client.get_experiment_by_name(cfg.tracking.experiment)
        if experiment is None:
            return None
        query = f"tags.`{POINT_TAG}` = '{point}' and attributes.status = 'FINISHED'"
        runs = client.search_runs([experiment.experiment_id], query, max_results=1)
    except Exception:  # store down: the spools still answer
        return None
    return runs[0].info.run_id if runs else None


def finished_in_spools(point: str, roots: list[Path]) -> Path | None:
    """A spool under ``roots`` whose run of this point ended FINISHED."""
    for path in spool_files(roots):
        records = read_spool(path)
        if records and records[0]["tags"].get(POINT_TAG) == point and records[-1].get("status") == "FINISHED":
            return path
    return None


def finished_point(cfg: Config, point: str) -> str | None:
    """Where this point already finished (a run id or a spool path), for `resume=true`."""
    roots = [Path(root).resolve() for root in DEFAULT_ROOTS]
    if cfg.tracking.spool_dir:
        roots.append(Path(cfg.tracking.spool_dir).resolve())
    found = finished_in_store(cfg, point) or finished_in_spools(point, roots)
    return str(found) if found else None


def where(run: SpooledRun) -> str:
    """One line telling the user which run was written and how to see it."""
    if run.online:  # no store call here: the store may have gone since the run's last record
        page = f"#/experiments/{run.experiment_id}/runs/{run.run_id}"
        if run.uri.startswith("http"):
            return f"MLflow run {run.run_id}: {run.uri.rstrip('/')}/{page}"
        return (
            f"MLflow run {run.run_id} in {run.uri}; browse it with `mlflow ui --backend-store-uri {run.uri}` "
            f"at http://127.0.0.1:5000/{page}"
        )
    return f"MLflow was unreachable: the run is spooled in {run.path}; replay it with `speculab-sync {run.spool_dir}`"
