"""The `speculab` command in a subprocess, and the MLflow runs it wrote."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mlflow
from mlflow.tracking import MlflowClient


def speculab(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "speculab.launch.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=240
    )


def file_store(tmp_path: Path) -> str:
    """A file store's URI (MLflow allows one only with MLFLOW_ALLOW_FILE_STORE=true): the GPU machine's
    packages (`../shared/gpu/wheelhouse.sh --ray --mlflow`) have no SQLAlchemy for an sqlite store."""
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # the subprocess inherits it
    return f"file:{tmp_path / 'mlruns'}"


def small_run(pair: tuple[Path, Path], store: Path) -> list[str]:
    return [
        f"model.target_path={pair[0]}",
        f"model.draft_path={pair[1]}",
        "dataset.num_prompts=2",
        "sampling.max_new_tokens=8",
        "measure.repeats=1",  # what these runs check is decoded in repetition 0; more repetitions only time
        f"tracking.uri=sqlite:///{store}",
    ]


def runs(store: Path) -> list[mlflow.entities.Run]:
    mlflow.set_tracking_uri(f"sqlite:///{store}")
    return mlflow.search_runs(experiment_names=["speculab"], output_format="list")


def runs_by_kind(uri: str, experiment_name: str = "speculab") -> dict[str, list]:
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(experiment_name)
    assert experiment is not None, f"no experiment {experiment_name!r} in {uri}"
    runs = client.search_runs([experiment.experiment_id])
    kinds: dict[str, list] = {}
    for run in runs:
        kinds.setdefault(run.data.tags["speculab.kind"], []).append(run)
    return kinds


def points_logged(uri: str) -> list:
    """The point runs of ``uri`` so far (none before the experiment exists)."""
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("speculab")
    return [] if experiment is None else client.search_runs([experiment.experiment_id])
