"""A tiny-pair run on MT-Bench-style prompts with categories writes its acceptance in the field's formats: a
`speculation_profile.json` that passes specdec_bench's own checks and holds the figures the run logged, the
per-request figure and records, and figures by category."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.artifacts import load_text
from mlflow.tracking import MlflowClient

from speculab.results.profile_read import read_profile
from support.cli import runs, speculab
from support.models import TINY_PAIR

PROMPTS = Path(__file__).parents[1] / "fixtures" / "mt_bench_style.jsonl"


@pytest.mark.slow
def test_a_tiny_pair_run_writes_a_profile_that_passes_the_schemas_checks(tmp_path: Path) -> None:
    store = tmp_path / "mlflow.db"
    args = [
        f"model.target_path={TINY_PAIR / 'target'}", f"model.draft_path={TINY_PAIR / 'draft'}", "algorithm=token",
        "dataset=jsonl", f"dataset.path={PROMPTS}", "sampling.max_new_tokens=16", "measure.repeats=2",
        "runtime=inline", "baseline_hf=false", f"tracking.uri=sqlite:///{store}",
    ]  # fmt: skip
    result = speculab(args, tmp_path)
    assert result.returncode == 0, result.stderr
    (run,) = runs(store)
    artifacts = {a.path for a in MlflowClient().list_artifacts(run.info.run_id)}
    assert {"speculation_profile.json", "requests.jsonl", "acceptance_per_request.png"} <= artifacts
    (tmp_path / "profile.json").write_text(load_text(f"{run.info.artifact_uri}/speculation_profile.json"))
    profile = read_profile(tmp_path / "profile.json")
    assert profile.checks.passed
    figures = json.loads(load_text(f"{run.info.artifact_uri}/figures.json"))  # what the run logged
    assert profile.mean_accept_length == pytest.approx(figures["acceptance_length"], rel=1e-4)
    assert profile.mean_accept_length_per_request == pytest.approx(figures["acceptance_length_per_request"], rel=1e-4)
    assert profile.marginal_accept_rates == pytest.approx([figures[f"accept/position_{j}"] for j in range(1, 5)], 1e-4)
    # code and prose accept differently, so the prompts' mean is not the rounds' mean
    assert abs(profile.mean_accept_length - (profile.mean_accept_length_per_request or 0)) > 0.01
    assert profile.per_category is not None and set(profile.per_category) == {"coding", "writing"}
    assert {f"category/{c}/acceptance_length" for c in ("coding", "writing")} <= set(run.data.metrics)
    lines = [json.loads(line) for line in load_text(f"{run.info.artifact_uri}/requests.jsonl").splitlines()]
    assert len(lines) == 6 * 2 and {line["metadata"]["repetition"] for line in lines} == {0, 1}
    assert "per request (the mean of its 6 prompts' own)" in run.data.tags["mlflow.note.content"]
