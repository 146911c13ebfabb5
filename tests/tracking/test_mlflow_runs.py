"""MLflow tracking through the `speculab` command: every metric and artifact of a run, sweeps nested under a parent."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import pytest
from mlflow.artifacts import load_text

from speculab.results.names import METRICS
from support.cli import runs, small_run, speculab


@pytest.mark.slow
def test_single_run_logs_every_metric_and_artifact(random_llama_pair, tmp_path: Path) -> None:
    store = tmp_path / "mlflow.db"
    result = speculab([*small_run(random_llama_pair, store), "runtime=inline"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "block_efficiency" in result.stdout and "autoregressive" in result.stdout
    (run,) = runs(store)
    assert {m.mlflow for m in METRICS} <= set(run.data.metrics)  # every figure of a point, nothing left out
    spreads = json.loads(load_text(f"{run.info.artifact_uri}/figures.json"))  # every figure, its spread too
    assert {"block_efficiency_se", "accept/alpha_1_se"} <= set(spreads) - set(run.data.metrics)
    assert run.data.params["dataset.prompt_ids"].count(",") == 1  # the two prompts it drew
    assert "units.json" in {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
    assert not any(name.endswith(("_ci_low", "_ci_high")) for name in run.data.metrics)  # two prompts: no interval
    assert run.data.params["algorithm.name"] == "block" and run.data.tags["lossless"] == "true"
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
    assert {"records.jsonl", "records_table.json", "acceptance_histogram.png", "time_split.png"} <= artifacts


@pytest.mark.slow
def test_a_lossy_run_says_so_and_logs_its_paired_comparison(random_llama_pair, tmp_path: Path) -> None:
    store = tmp_path / "mlflow.db"
    lossy = ["algorithm=spectr_gbv", "algorithm.K=2", "algorithm.allow_lossy=true", "algorithm.compare=[gbv]"]
    result = speculab([*lossy, *small_run(random_llama_pair, store), "runtime=inline", "baseline_hf=false"], tmp_path)
    assert result.returncode == 0, result.stderr
    (run,) = runs(store)
    assert run.data.tags["lossless"] == "false" and run.data.params["algorithm.allow_lossy"] == "True"
    assert "**Not lossless** at K=2" in run.data.tags["mlflow.note.content"]
    figures = json.loads(load_text(f"{run.info.artifact_uri}/figures.json"))
    assert {"compare/spectr_gbv/acceptance_length_se", "compare/gbv/relative", "time/paired_s"} <= set(figures)
    assert "paired comparison on the same drafts" in result.stdout


@pytest.mark.slow
def test_multirun_sweep_nests_points_under_a_parent(random_llama_pair, tmp_path: Path) -> None:
    store = tmp_path / "mlflow.db"
    sweep = ["-m", "algorithm=gbv", "algorithm.K=1,2", "algorithm.L=2,4", "sampling.temperature=0,1", "baseline=false"]
    result = speculab([*sweep, *small_run(random_llama_pair, store), "runtime=inline"], tmp_path)
    assert result.returncode == 0, result.stderr
    found = runs(store)
    parents = [r for r in found if r.data.tags.get("speculab.kind") == "sweep"]
    children = [r for r in found if r.data.tags.get("mlflow.parentRunId")]
    assert len(parents) == 1 and len(children) == 8
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parents[0].info.run_id}
    points = {
        (c.data.params["algorithm.K"], c.data.params["algorithm.L"], c.data.params["sampling.temperature"])
        for c in children
    }
    assert len(points) == 8
