"""Which points a resumed sweep (`resume=true`) skips: a point's identity, and where it already
finished.

A point's identity (``speculab.point_id``) is a hash of its resolved config without what changes no
token it decodes (the tracking settings, `resume`, the report's layout), so the same point gets the
same id in every sweep. A point is skipped when a
FINISHED run with its id exists in the configured store and experiment (MLflow), or in a spool
under the Hydra output roots that was written for that same store and experiment (a run finished
while MLflow was down); a run of the same point in another store or experiment does not count.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from mlflow.environment_variables import MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR
from mlflow.tracking import MlflowClient

from speculab.config import NOT_IDENTITY, Config, tracking_uri
from speculab.results.names import FIGURES_ARTIFACT
from speculab.results.point import UNITS_ARTIFACT, PointUnits
from speculab.tracking.spool import DEFAULT_ROOTS, POINT_TAG, fail_fast, read_spool, spool_files
from speculab.tracking.store import store_client

PROGRESS_BAR = MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR.name


def point_id(cfg: Config) -> str:
    """Stable identity of an experiment point: its resolved config but what changes no token it decodes
    (`config.NOT_IDENTITY`, `cluster.replicas`)."""
    fields = {key: value for key, value in asdict(cfg).items() if key not in NOT_IDENTITY}
    fields["cluster"].pop("replicas")  # how many copies ran the sweep changes no point's tokens or speed
    return hashlib.sha1(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Finished:
    """Where a point already finished, that run's final metrics (MLflow names) and what it measured unit
    by unit (None: a run logged before units were kept)."""

    where: str  # an MLflow run id, or the path of a spool
    metrics: dict[str, float]
    units: PointUnits | None = None
    run_id: str | None = None  # where it is a run in the store (not a spool's)


def artifact_text(client: MlflowClient, run_id: str, name: str) -> str | None:
    """A text artifact of a run (None where it has none)."""
    os.environ.setdefault(PROGRESS_BAR, "false")  # a resumed sweep's console is no place for download bars
    if name not in {a.path for a in client.list_artifacts(run_id)}:
        return None
    with tempfile.TemporaryDirectory() as folder:
        return Path(client.download_artifacts(run_id, name, folder)).read_text()


def logged_units(client: MlflowClient, run_id: str) -> PointUnits | None:
    """A run's UNITS_ARTIFACT, None where it has none."""
    text = artifact_text(client, run_id, UNITS_ARTIFACT)
    return None if text is None else PointUnits.from_json(text)


def logged_metrics(client: MlflowClient, run_id: str, metrics: dict[str, float]) -> dict[str, float]:
    """A run's figures as it logged them: its MLflow metrics and, where it wrote one, FIGURES_ARTIFACT (every
    spread too: the metrics carry only values and the ranking figure's interval)."""
    text = artifact_text(client, run_id, FIGURES_ARTIFACT)
    return metrics | (json.loads(text) if text is not None else {})


def store_key(uri: str) -> str:
    """A tracking URI in a form two spellings of one store share: database and file paths made
    absolute (relative ones against the current directory), no trailing slash."""
    for scheme in ("sqlite:///", "file://"):
        if uri.startswith(scheme):
            return scheme + str(Path(uri.removeprefix(scheme)).resolve())
    if "://" not in uri:  # a bare path: MLflow's file store
        return "file://" + str(Path(uri).resolve())
    return uri.rstrip("/")


def finished_in_store(cfg: Config, point: str) -> Finished | None:
    """A FINISHED run of this point in the configured store and experiment (None if none or unreachable)."""
    fail_fast()
    try:
        client = store_client(tracking_uri(cfg.tracking))
        experiment = client.get_experiment_by_name(cfg.tracking.experiment)
        if experiment is None:
            return None
        query = f"tags.`{POINT_TAG}` = '{point}' and attributes.status = 'FINISHED'"
        runs = client.search_runs([experiment.experiment_id], query, max_results=1)
        if not runs:
            return None
        run_id = runs[0].info.run_id
        found = Finished(
            run_id, logged_metrics(client, run_id, runs[0].data.metrics), logged_units(client, run_id), run_id
        )
    except Exception:  # store down: the spools still answer
        return None
    return found


def finished_in_spools(point: str, roots: list[Path], uri: str, experiment: str) -> Finished | None:
    """A spool under ``roots``, written for the store ``uri`` and ``experiment``, whose run of this
    point ended FINISHED; its metrics are the last value of each."""
    store = store_key(uri)
    for path in spool_files(roots):
        records = read_spool(path)
        if not records or records[-1].get("status") != "FINISHED":
            continue
        start = records[0]
        if start.get("tags", {}).get(POINT_TAG) != point or start.get("experiment") != experiment:
            continue
        if store_key(str(start.get("uri", ""))) != store:
            continue
        metrics: dict[str, float] = {}
        units = None
        for record in records:
            if record.get("op") == "metrics":
                metrics |= record["metrics"]
            if record.get("op") == "text" and record.get("artifact") == UNITS_ARTIFACT:
                units = PointUnits.from_json(record["text"])
            if record.get("op") == "text" and record.get("artifact") == FIGURES_ARTIFACT:
                metrics |= json.loads(record["text"])
        return Finished(str(path), metrics, units)
    return None


def finished_point(cfg: Config, point: str) -> Finished | None:
    """Where this point (same id: same resolved config) already finished in the configured store and
    experiment, for `resume=true`: a run there, or a spool meant for it."""
    roots = [Path(root).resolve() for root in DEFAULT_ROOTS]
    if cfg.tracking.spool_dir:
        roots.append(Path(cfg.tracking.spool_dir).resolve())
    uri, experiment = tracking_uri(cfg.tracking), cfg.tracking.experiment
    return finished_in_store(cfg, point) or finished_in_spools(point, roots, uri, experiment)
