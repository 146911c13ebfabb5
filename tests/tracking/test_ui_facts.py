"""What the MLflow UI shows a researcher after a sweep, checked through MLflow's REST API (CI has
no browser; `make ui-check` checks the same facts on the rendered pages): the experiment's kind,
description and saved view of headline columns, point names and descriptions, grouped metric
names, the per-prompt table, and the parent run's summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests

from speculab.results.names import HEADLINE, mlflow_name
from speculab.tracking.spool import NOTE_TAG, VERDICT_TAG
from speculab.tracking.ui import VIEW_KEY, VIEW_NAME, table_metrics
from support.cli import speculab
from support.mlflow_server import mlflow_server


def api(uri: str, path: str, **params: str) -> dict:
    answer = requests.get(f"{uri}/api/2.0/mlflow/{path}", params=params, timeout=30)
    answer.raise_for_status()
    return answer.json()


def metric(run: dict, key: str) -> float:
    return next(m["value"] for m in run["data"]["metrics"] if m["key"] == key)


def tags(entity: dict) -> dict[str, str]:
    return {t["key"]: t["value"] for t in entity.get("tags", [])}


@pytest.mark.slow
def test_a_sweep_reads_at_a_glance_in_the_ui(random_llama_pair, tmp_path: Path) -> None:
    with mlflow_server(tmp_path / "mlflow.db", tmp_path) as uri:
        args = [
            "-m",
            "algorithm=gbv",
            "algorithm.K=1,2",
            "sampling.temperature=0,1",
            "runtime=inline",
            f"model.target_path={random_llama_pair[0]}",
            f"model.draft_path={random_llama_pair[1]}",
            "dataset.num_prompts=2",
            "sampling.max_new_tokens=8",
            "measure.repeats=1",  # what the UI shows, not the figures: one timed repetition
            f"tracking.uri={uri}",
        ]
        result = speculab(args, tmp_path)
        assert result.returncode == 0, result.stderr
        assert "viewStateShareKey=speculab" in result.stdout and "workflowType=machine_learning" in result.stdout

        experiment = api(uri, "experiments/get-by-name", experiment_name="speculab")["experiment"]
        experiment_tags = tags(experiment)
        assert experiment_tags["mlflow.experimentKind"] == "custom_model_development"
        assert "block_efficiency" in experiment_tags[NOTE_TAG]
        envelope = json.loads(experiment_tags[f"mlflow.sharedViewState.{VIEW_KEY}"])  # what the "Views" menu lists
        assert envelope["name"] == VIEW_NAME and isinstance(envelope["createdAt"], int)
        view = json.loads(envelope["state"])
        assert view["orderByKey"] == "metrics.`speedup_vs_ar`" and not view["orderByAsc"]

        found = requests.post(
            f"{uri}/api/2.0/mlflow/runs/search", json={"experiment_ids": [experiment["experiment_id"]]}, timeout=30
        ).json()["runs"]
        points = [r for r in found if tags(r["data"])["speculab.kind"] == "point"]
        (parent,) = [r for r in found if tags(r["data"])["speculab.kind"] == "sweep"]
        assert len(points) == 4
        for run in points:
            name, run_tags = run["info"]["run_name"], tags(run["data"])
            metrics = {m["key"] for m in run["data"]["metrics"]}
            params = {p["key"] for p in run["data"]["params"]}
            assert name.startswith("gbv K=") and " L=4 T=" in name and "iid · humaneval×2 · " in name
            assert "block efficiency" in run_tags[NOTE_TAG] and "gbv" in run_tags[NOTE_TAG]
            # the sweep's verdicts on it, before its headline, and in the runs table's verdict column (two
            # prompts: too few for any)
            section, headline, *_ = run_tags[NOTE_TAG].split("\n\n")
            assert "speedup vs ar" in headline and section.startswith("In the sweep: **too few units**")
            assert "the sweep's verdicts, " in section
            assert run_tags[VERDICT_TAG] == "too few units"  # where it stands on the fastest
            assert f"tags.`{VERDICT_TAG}`" in view["selectedColumns"]
            assert run_tags["mlflow.parentRunId"] == parent["info"]["run_id"]
            assert {f"metrics.`{name}`" for name in table_metrics()} <= set(view["selectedColumns"])
            interval = {"metrics.`speedup_vs_ar_ci_low`", "metrics.`speedup_vs_ar_ci_high`"}  # none from 2 prompts
            assert {c for c in view["selectedColumns"] if c.startswith("metrics.")} - interval <= {
                f"metrics.`{m}`" for m in metrics
            }
            assert {c for c in view["selectedColumns"] if c.startswith("params.")} <= {f"params.`{p}`" for p in params}
            unprefixed = {m for m in metrics if "/" not in m}
            # two prompts: no speed interval; the acceptance figures' standard errors are in figures.json, not
            # metrics (a chart each would fill the Model metrics tab)
            # vLLM's and SGLang's figure beside the headline, per step and per request (specdec_bench's both)
            field = {"acceptance_length", "acceptance_length_per_request"}
            headline = {mlflow_name(key) for key in HEADLINE} - {"typical/speedup_vs_ar"}
            assert unprefixed == {*headline, "ms_per_token", "speedup_vs_ar_cpu", *field}, unprefixed
            assert {"typical/speedup_vs_ar", "typical/speedup_vs_hf", "count/units"} <= metrics
            assert {"baseline_ar/tokens_per_s", "baseline_hf/tokens_per_s", "baseline_hf/speedup_vs_ar"} <= metrics
            artifacts = {f["path"] for f in api(uri, "artifacts/list", run_id=run["info"]["run_id"]).get("files", [])}
            assert {"records_table.json", "records.jsonl", "acceptance_histogram.png", "time_split.png"} <= artifacts
            assert {"figures.json", "units.json", "summary.txt"} <= artifacts
            assert "acceptance_by_depth.png" in artifacts
            by_depth = {f"accept/{stem}_{j}" for stem in ("alpha", "overlap") for j in range(1, 5)}
            assert by_depth | {f"accept/hist_{n}" for n in range(5)} <= metrics  # L = 4: one per depth

        parent_tags = tags(parent["data"])
        assert parent["info"]["run_name"].startswith(  # then the launch (job id or start time)
            "sweep algorithm.K=1,2 sampling.temperature=0,1 · gbv L=4 · iid · humaneval×2 · target_draft · "
        )
        note = parent_tags[NOTE_TAG]
        # two prompts: no speed interval, so no leader is named (stats.MIN_CLUSTERS)
        assert note.startswith("No verdict on speedup_vs_ar: too few to tell: 2 prompts, needs at least 12;")
        assert "4 finished point(s), ranked by" in note and "Fastest: **" not in note
        best = {m["key"]: m["value"] for m in parent["data"]["metrics"]}
        speedups = {r["info"]["run_id"]: metric(r, "speedup_vs_ar") for r in points}
        assert len(speedups) == 4 and not any(key.startswith("best/") for key in best)  # no leader: no best/*
        assert "speculab: No verdict on speedup_vs_ar: too few to tell" in result.stdout
        assert "sweep ranking by speedup_vs_ar" in result.stdout
        parent_files = {f["path"] for f in api(uri, "artifacts/list", run_id=parent["info"]["run_id"])["files"]}
        assert {"sweep_table.md", "sweep_table.csv", "sweep_points.png", "sweep_points.json"} <= parent_files
        assert {"acceptance_by_depth.png", "acceptance_by_depth.md", "acceptance_by_depth.csv"} <= parent_files
