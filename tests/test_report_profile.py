"""`speculab-report --profile FILE`: a speculation profile another tool wrote (a fixture written from
specdec_bench's schema 1.0), laid beside the speculab runs of the same pair and method; and the report's table
by prompt category. The runs are hand-made in a temporary SQLite store from a toy decode's figures, as
speculab logs them (`results.names.flatten`)."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import pytest
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from speculab.core.engine import decode
from speculab.registry import get_verifier
from speculab.report.cli import main
from speculab.results.figures import category_figures, run_figures
from speculab.results.names import flatten
from speculab.tracking.spool import KIND_TAG, POINT_TAG
from support.engine import TOY_PROMPTS, settings, toy_roles

FIXTURE = Path(__file__).parent / "fixtures" / "speculation_profile_tiny.json"
PAIR = "/somewhere/assets/tiny-pycode"


def log_token_point(client: MlflowClient, experiment: str, L: int) -> str:
    """A finished token-verification point of the tiny pair with L = ``L``, whose prompts carry categories."""
    target, drafter = toy_roles(3)
    run = decode(target, drafter, get_verifier("token"), TOY_PROMPTS * 4, settings(T=1.0, K=1, L=L, max_new=20))
    categories = ["coding" if i % 2 else "writing" for i in range(len(run.prompts))]
    figures = run_figures(run) | category_figures(run, categories)
    params = {
        "algorithm.name": "token", "algorithm.K": 1, "algorithm.L": L, "drafter.name": "iid",
        "sampling.temperature": 1.0, "model.name": "tiny-pycode", "model.target_dir": f"{PAIR}/target",
        "model.draft_dir": f"{PAIR}/draft", "dataset.name": "jsonl", "dataset.num_prompts": 16,
        "sampling.top_k": 0, "sampling.max_new_tokens": 20, "sampling.batch_size": 1, "sampling.seed": 0,
    }  # fmt: skip
    made = client.create_run(experiment, run_name=f"token L={L}", tags={KIND_TAG: "point", POINT_TAG: str(L)})
    now = int(time.time() * 1000)
    metrics = [Metric(k, v, now, 0) for k, v in flatten(figures).items()]
    client.log_batch(made.info.run_id, metrics=metrics, params=[Param(k, str(v)) for k, v in params.items()])
    client.set_terminated(made.info.run_id)
    return made.info.run_id


@pytest.fixture
def store(tmp_path: Path) -> str:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("speculab")
    for L in (3, 4):
        log_token_point(client, experiment, L)
    return uri


def test_a_profile_is_laid_beside_the_runs_of_its_pair_and_method(store: str, tmp_path: Path) -> None:
    out = tmp_path / "report"
    main(["--experiment", "speculab", "--uri", store, "--profile", str(FIXTURE), "--out", str(out), "--no-log"])
    tables = (out / "tables.md").read_text()
    assert "### Speculation profile speculation_profile_tiny.json beside speculab's runs" in tables
    assert "The profile passes its schema's checks" in tables
    rows = list(csv.DictReader((out / "profile_speculation_profile_tiny.csv").open()))
    assert rows[0]["source"] == "profile speculation_profile_tiny.json"
    assert len(rows) == 3 and all(r["source"].startswith("speculab token K=1") for r in rows[1:])
    assert float(rows[0]["acceptance length"]) == 2.14 and float(rows[0]["position 1"]) == 0.58
    assert float(rows[0]["coding"]) == 2.31 and rows[1]["coding"]  # the profile's per_category beside the runs'
    assert rows[1]["acceptance length low"] and not rows[0]["acceptance length low"]  # 16 prompts: an interval
    by_category = list(csv.DictReader((out / "by_category.csv").open()))
    assert len(by_category) == 2 and {"coding · per step", "writing · per request"} <= set(by_category[0])


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"method": "dflash"}, "no run of its pair and method"),
        ({"target_model": {"id": "Qwen/Qwen3-8B"}}, "no run of its pair and method"),
        ({"marginal_accept_rates": "0.5"}, "`marginal_accept_rates` must be a non-empty list"),
    ],
)
def test_a_profile_of_another_pair_or_a_bad_one_is_refused_in_one_line(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict, said: str
) -> None:
    other = tmp_path / "other.json"
    other.write_text(json.dumps(json.loads(FIXTURE.read_text()) | change))
    with pytest.raises(SystemExit) as exit_:
        main(["--experiment", "speculab", "--uri", store, "--profile", str(other), "--no-log", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and said in err and err.count("\n") == 1 and err.startswith("speculab-report: ")
