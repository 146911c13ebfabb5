"""Fault injection through the `speculab` command: a tracking server killed mid-sweep, Ctrl-C
mid-sweep then `resume=true`, an unwritable tracking path. After sync or resume every decoded
point is in MLflow exactly once, FINISHED, under its sweep's parent; nothing stays RUNNING."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from support.cli import speculab
from support.mlflow_server import mlflow_server

POINTS = ["algorithm=gbv", "algorithm.K=1,2,3"]


def sweep_args(pair: tuple[Path, Path], uri: str, sweep_dir: Path) -> list[str]:
    return [
        "-m",
        *POINTS,
        f"model.target_path={pair[0]}",
        f"model.draft_path={pair[1]}",
        "runtime=inline",
        "dataset.num_prompts=4",
        "sampling.max_new_tokens=24",
        f"tracking.uri={uri}",
        f"hydra.sweep.dir={sweep_dir}",
    ]


@pytest.fixture
def sweeps() -> Iterator[Callable[[list[str], Path], subprocess.Popen]]:
    """Starts sweeps in children whose SIGINT is the default even when this suite runs with it ignored
    (as a shell's `&` does without job control), so that Python there turns it into KeyboardInterrupt;
    whatever of them still runs when the test ends, passed or failed, is killed."""
    started: list[subprocess.Popen] = []

    def launch(args: list[str], cwd: Path) -> subprocess.Popen:
        sweep = subprocess.Popen(
            [sys.executable, "-m", "speculab.cli", *args],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        started.append(sweep)
        return sweep

    yield launch
    for sweep in started:
        if sweep.poll() is None:
            sweep.kill()
            sweep.communicate()


def finished_children(uri: str) -> list:
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("speculab")
    if experiment is None:
        return []
    runs = client.search_runs([experiment.experiment_id], "tags.`speculab.kind` = 'point'")
    return [r for r in runs if r.info.status == "FINISHED"]


def wait_for_finished_child(uri: str, sweep: subprocess.Popen) -> None:
    deadline = time.monotonic() + 300
    while not finished_children(uri):
        assert sweep.poll() is None and time.monotonic() < deadline, "the sweep ended before any point finished"
        time.sleep(0.1)


def runs_by_kind(uri: str) -> dict[str, list]:
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("speculab")
    runs = client.search_runs([experiment.experiment_id])
    kinds: dict[str, list] = {}
    for run in runs:
        kinds.setdefault(run.data.tags["speculab.kind"], []).append(run)
    return kinds


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
    _, err = sweep.communicate(timeout=600)
    assert sweep.returncode == 0, err
    assert "speculab: MLflow at" in err and "speculab-sync" in err
    with mlflow_server(store, tmp_path) as uri:
        synced = subprocess.run(
            [sys.executable, "-m", "speculab.tracking.sync", str(tmp_path / "sweep"), "--uri", uri],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert synced.returncode == 0, synced.stderr
        assert_each_point_once(uri, parents=1)
        again = subprocess.run(
            [sys.executable, "-m", "speculab.tracking.sync", str(tmp_path / "sweep"), "--uri", uri],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert again.returncode == 0
        assert_each_point_once(uri, parents=1)
        assert all(r.info.status == "FINISHED" for r in runs_by_kind(uri)["sweep"])


@pytest.mark.slow
def test_ctrl_c_mid_sweep_then_resume(random_llama_pair, tmp_path: Path, sweeps) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sweep = sweeps(sweep_args(random_llama_pair, uri, tmp_path / "first"), tmp_path)
    wait_for_finished_child(uri, sweep)
    sweep.send_signal(signal.SIGINT)
    _, err = sweep.communicate(timeout=300)
    assert sweep.returncode == 130, err
    kinds = runs_by_kind(uri)
    assert [r.info.status for r in kinds["sweep"]] == ["KILLED"]
    done_before = {r.data.tags["speculab.point_id"] for r in kinds["point"] if r.info.status == "FINISHED"}
    assert 1 <= len(done_before) < 3 and all(r.info.status in ("FINISHED", "KILLED") for r in kinds["point"])
    resumed = speculab([*sweep_args(random_llama_pair, uri, tmp_path / "second"), "resume=true"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.count("already finished") == len(done_before)
    assert_each_point_once(uri, parents=2)


@pytest.mark.slow
def test_unwritable_tracking_path_keeps_the_run(random_llama_pair, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    args = [
        f"model.target_path={random_llama_pair[0]}",
        f"model.draft_path={random_llama_pair[1]}",
        "runtime=inline",
        "dataset.num_prompts=2",
        "sampling.max_new_tokens=8",
        f"tracking.uri=sqlite:///{blocker / 'mlflow.db'}",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    result = speculab(args, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "speculab: MLflow at" in result.stderr and "spooled" in result.stdout
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    subprocess.run(
        [sys.executable, "-m", "speculab.tracking.sync", str(tmp_path / "run"), "--uri", uri],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (point,) = runs_by_kind(uri)["point"]
    assert point.info.status == "FINISHED" and "block_efficiency" in point.data.metrics
