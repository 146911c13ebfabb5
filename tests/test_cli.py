"""The `speculab` command end to end: Hydra, the engine, MLflow, in both runtimes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import mlflow
import pytest

from speculab.tracking.metrics import METRIC_KEYS


def speculab(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "speculab.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def small_run(pair: tuple[Path, Path], store: Path) -> list[str]:
    return [
        f"model.target_path={pair[0]}",
        f"model.draft_path={pair[1]}",
        "dataset.num_prompts=2",
        "sampling.max_new_tokens=8",
        f"tracking.uri=sqlite:///{store}",
    ]


def runs(store: Path) -> list[mlflow.entities.Run]:
    mlflow.set_tracking_uri(f"sqlite:///{store}")
    return mlflow.search_runs(experiment_names=["speculab"], output_format="list")


@pytest.mark.slow
def test_single_run_logs_every_metric_and_artifact(random_llama_pair, tmp_path: Path) -> None:
    store = tmp_path / "mlflow.db"
    result = speculab([*small_run(random_llama_pair, store), "runtime=inline"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "block_efficiency" in result.stdout and "autoregressive" in result.stdout
    (run,) = runs(store)
    assert set(METRIC_KEYS) <= set(run.data.metrics)
    assert run.data.params["algorithm.name"] == "block"
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
    assert {"records.jsonl", "acceptance_histogram.png", "time_split.png"} <= artifacts


@pytest.mark.slow
def test_multirun_sweep_nests_points_under_a_parent(random_llama_pair, tmp_path: Path) -> None:
    store = tmp_path / "mlflow.db"
    sweep = ["-m", "algorithm.K=1,2", "algorithm.L=2,4", "sampling.temperature=0,1", "baseline=false"]
    result = speculab([*sweep, *small_run(random_llama_pair, store), "runtime=inline"], tmp_path)
    assert result.returncode == 0, result.stderr
    found = runs(store)
    parents = [r for r in found if r.data.tags.get("speculab.kind") == "sweep"]
    children = [r for r in found if r.data.tags.get("mlflow.parentRunId")]
    assert len(parents) == 1 and len(children) == 8
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parents[0].info.run_id}
    points = {(c.data.params["algorithm.K"], c.data.params["algorithm.L"], c.data.params["sampling.temperature"]) for c in children}
    assert len(points) == 8


@pytest.mark.slow
def test_ray_runtime_equals_inline(random_llama_pair, tmp_path: Path) -> None:
    outputs = []
    for runtime in ("inline", "ray"):
        store = tmp_path / f"{runtime}.db"
        result = speculab([*small_run(random_llama_pair, store), f"runtime={runtime}", "sampling.temperature=1", "baseline=false"], tmp_path)
        assert result.returncode == 0, result.stderr
        (run,) = runs(store)
        outputs.append(mlflow.artifacts.load_text(run.info.artifact_uri + "/records.jsonl"))
    assert outputs[0] == outputs[1]


def test_bad_input_exits_with_a_message(tmp_path: Path) -> None:
    result = speculab(["algorithm.K=0", "sampling.temperature=-1", "runtime=inline"], tmp_path)
    assert result.returncode != 0
    assert "algorithm.K=0" in result.stderr and "sampling.temperature=-1" in result.stderr
