"""Fault injection through the `speculab` command: a tracking server killed mid-sweep, Ctrl-C
mid-sweep then `resume=true`, an unwritable tracking path, a resume into another store, two
sweeps sharing a directory. After sync or resume every decoded point is in MLflow exactly once,
FINISHED, under its sweep's parent; nothing stays RUNNING; a resumed sweep's parent reports every
point; a point finished elsewhere is run again; two sweeps never share a parent."""

from __future__ import annotations

import csv
import io
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.artifacts import load_text
from mlflow.tracking import MlflowClient

from speculab.report.cli import main as report_main
from speculab.tracking.spool import NOTE_TAG
from speculab.tracking.sync import main as sync_main
from support.cli import runs_by_kind, speculab
from support.mlflow_server import mlflow_server
from support.waits import awaited

# A signal or a killed server lands when the sweep's first point has FINISHED in the store
# (`wait_for_finished_child`), not on a timer: a busy machine moves when it lands, not what it hits. Store
# writes hold a signal until they end (`speculab.process.interrupts.held`), so these run beside the rest of the suite.

POINTS = ["algorithm=gbv", "algorithm.K=1,2,3"]


def sweep_args(pair: tuple[Path, Path], uri: str, sweep_dir: Path) -> list[str]:
    return [
        "-m",
        *POINTS,
        f"model.target_path={pair[0]}",
        f"model.draft_path={pair[1]}",
        "runtime=inline",
        "dataset.num_prompts=2",
        "sampling.max_new_tokens=16",
        "measure.repeats=1",  # a point of seconds still lasts long past the poll that lands the fault after the first
        "baseline_hf=false",
        f"tracking.uri={uri}",
        f"hydra.sweep.dir={sweep_dir}",
    ]


def finished_children(uri: str) -> list:
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("speculab")
    if experiment is None:
        return []
    runs = client.search_runs([experiment.experiment_id], "tags.`speculab.kind` = 'point'")
    return [r for r in runs if r.info.status == "FINISHED"]


def wait_for_finished_child(uri: str, sweep: subprocess.Popen) -> None:
    awaited(lambda: finished_children(uri), "a point of the sweep finished", sweep, 300)


def assert_each_point_once(uri: str, parents: int) -> None:
    kinds = runs_by_kind(uri)
    finished = [r for r in kinds["point"] if r.info.status == "FINISHED"]
    points = [r.data.tags["speculab.point_id"] for r in finished]
    assert len(points) == len(set(points)) == 3 and {r.data.params["algorithm.K"] for r in finished} == {"1", "2", "3"}
    assert len(kinds["sweep"]) == parents
    assert all(r.info.status != "RUNNING" for rs in kinds.values() for r in rs)
    assert {r.data.tags["mlflow.parentRunId"] for r in finished} <= {p.info.run_id for p in kinds["sweep"]}


@pytest.mark.slow
def test_server_killed_mid_sweep_then_sync(random_llama_pair, tmp_path: Path, sweeps) -> None:
    store = tmp_path / "server.db"
    with mlflow_server(store, tmp_path) as uri:
        sweep = sweeps(sweep_args(random_llama_pair, uri, tmp_path / "sweep"), tmp_path)
        wait_for_finished_child(uri, sweep)
    _, err = sweep.communicate(timeout=240)
    assert sweep.returncode == 0, err
    assert "speculab: MLflow at" in err and "speculab-sync" in err
    with mlflow_server(store, tmp_path) as uri:
        synced = subprocess.run(
            [sys.executable, "-m", "speculab.tracking.sync", str(tmp_path / "sweep"), "--uri", uri],
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert synced.returncode == 0, synced.stderr
        assert_each_point_once(uri, parents=1)
        sync_main([str(tmp_path / "sweep"), "--uri", uri])  # the command's own function: a second sync adds nothing
        assert_each_point_once(uri, parents=1)
        assert all(r.info.status == "FINISHED" for r in runs_by_kind(uri)["sweep"])


@pytest.mark.slow
def test_ctrl_c_mid_sweep_then_resume(random_llama_pair, tmp_path: Path, sweeps) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sweep = sweeps(sweep_args(random_llama_pair, uri, tmp_path / "first"), tmp_path)
    wait_for_finished_child(uri, sweep)
    sweep.send_signal(signal.SIGINT)
    _, err = sweep.communicate(timeout=240)
    assert sweep.returncode == 130, err
    kinds = runs_by_kind(uri)
    assert [r.info.status for r in kinds["sweep"]] == ["KILLED"], err
    done_before = {r.data.tags["speculab.point_id"] for r in kinds["point"] if r.info.status == "FINISHED"}
    assert 1 <= len(done_before) < 3 and all(r.info.status in ("FINISHED", "KILLED") for r in kinds["point"])
    # each page says what happened: the parent how far the sweep got, a cut-short point that it was interrupted
    said = kinds["sweep"][0].data.tags[NOTE_TAG]
    assert said.startswith(f"**Interrupted after {len(done_before)} of 3 points** (Ctrl-C or SIGTERM)"), said
    for run in (r for r in kinds["point"] if r.info.status == "KILLED"):
        assert run.data.tags[NOTE_TAG].startswith("**Interrupted**") and "Decoding" not in run.data.tags[NOTE_TAG]
    resumed = speculab([*sweep_args(random_llama_pair, uri, tmp_path / "second"), "resume=true"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.count("already finished") == len(done_before)
    assert_each_point_once(uri, parents=2)  # the interrupted parent (KILLED) keeps the points it ran
    (parent,) = [r for r in runs_by_kind(uri)["sweep"] if r.info.status == "FINISHED"]
    table = sweep_table(parent)  # the resumed launch's parent reports the whole sweep
    assert sorted(row["K"] for row in table) == ["1", "2", "3"]
    assert sum(row["resumed"] == "yes" for row in table) == len(done_before)
    curves = csv.DictReader(io.StringIO(load_text(f"{parent.info.artifact_uri}/acceptance_by_depth.csv")))
    assert len({row["point"] for row in curves}) == 3  # a resumed point's alpha_j comes from its earlier run


def sweep_table(parent) -> list[dict[str, str]]:
    """The rows of a sweep parent's sweep_table.csv."""
    return list(csv.DictReader(io.StringIO(load_text(f"{parent.info.artifact_uri}/sweep_table.csv"))))


def small_sweep(pair: tuple[Path, Path], uri: str, experiment: str, *extra: str) -> list[str]:
    return [
        "-m",
        "algorithm=gbv",
        "algorithm.K=1,2",
        f"model.target_path={pair[0]}",
        f"model.draft_path={pair[1]}",
        "runtime=inline",
        "dataset.num_prompts=2",
        "sampling.max_new_tokens=8",
        "measure.repeats=1",
        "baseline_hf=false",
        f"tracking.uri={uri}",
        f"tracking.experiment={experiment}",
        *extra,
    ]


@pytest.mark.slow
def test_resume_skips_only_points_finished_in_the_same_store_and_experiment(random_llama_pair, tmp_path: Path) -> None:
    a, b = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    first = speculab(small_sweep(random_llama_pair, a, "X"), tmp_path)
    assert first.returncode == 0, first.stderr
    elsewhere = speculab([*small_sweep(random_llama_pair, b, "Y"), "resume=true"], tmp_path)
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert "already finished" not in elsewhere.stdout  # a.db's runs are no proof for b.db
    kinds = runs_by_kind(b, "Y")
    assert sorted(r.data.params["algorithm.K"] for r in kinds["point"] if r.info.status == "FINISHED") == ["1", "2"]
    again = speculab([*small_sweep(random_llama_pair, b, "Y"), "resume=true"], tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("already finished") == 2
    kinds = runs_by_kind(b, "Y")
    assert len(kinds["point"]) == 2 and len(kinds["sweep"]) == 2
    newest = max(kinds["sweep"], key=lambda run: run.info.start_time)
    assert newest.info.status == "FINISHED" and [row["resumed"] for row in sweep_table(newest)] == ["yes", "yes"]
    assert len(runs_by_kind(a, "X")["point"]) == 2  # and nothing was added to the first store


@pytest.mark.slow
def test_a_sweep_resumed_with_a_point_added_links_and_reports_all_its_points(random_llama_pair, tmp_path: Path) -> None:
    """The resumed launch's parent is the whole sweep: its runs-table link searches every point (those
    found finished keep their first parent and carry this launch's tag too), and `speculab-report
    --run` lays out all of them."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = speculab(small_sweep(random_llama_pair, uri, "X"), tmp_path)
    assert first.returncode == 0, first.stderr
    more = [arg.replace("algorithm.K=1,2", "algorithm.K=1,2,3") for arg in small_sweep(random_llama_pair, uri, "X")]
    resumed = speculab([*more, "resume=true"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.count("already finished") == 2
    newest = max(runs_by_kind(uri, "X")["sweep"], key=lambda run: run.info.start_time)
    client = MlflowClient(uri)
    view = json.loads(
        client.get_experiment(newest.info.experiment_id).tags[
            f"mlflow.sharedViewState.speculab-{newest.info.run_id[:12]}"
        ]
    )
    found = client.search_runs([newest.info.experiment_id], view["searchFilter"])
    assert sorted(r.data.params["algorithm.K"] for r in found) == ["1", "2", "3"]  # what the printed link shows
    out = tmp_path / "report"
    report_main(["--run", newest.info.run_id, "--uri", uri, "--out", str(out)])
    rows = list(csv.DictReader((out / "points.csv").open()))
    assert sorted(row["K"] for row in rows) == ["1", "2", "3"]


@pytest.mark.slow
def test_two_sweeps_at_once_in_one_directory_keep_their_own_parents(random_llama_pair, tmp_path: Path, sweeps) -> None:
    """Two sweeps started together (in the same second, or given the same `hydra.sweep.dir`) each
    nest their points under their own parent."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(uri).create_experiment("speculab")  # created once, not raced for by the two sweeps
    shared = f"hydra.sweep.dir={tmp_path / 'shared'}"
    started = [
        sweeps(small_sweep(random_llama_pair, uri, "speculab", f"sampling.seed={seed}", shared), tmp_path)
        for seed in (1, 2)
    ]
    for sweep in started:
        _, err = sweep.communicate(timeout=240)
        assert sweep.returncode == 0, err
    kinds = runs_by_kind(uri)
    assert len(kinds["sweep"]) == 2 and len(kinds["point"]) == 4
    for parent in kinds["sweep"]:
        children = [r for r in kinds["point"] if r.data.tags["mlflow.parentRunId"] == parent.info.run_id]
        seeds = {r.data.params["sampling.seed"] for r in children}
        assert len(children) == 2 and len(seeds) == 1, (parent.info.run_name, seeds)
        assert parent.data.params["sweep.overrides"].count(f"sampling.seed={seeds.pop()}") == 1
