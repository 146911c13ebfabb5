"""Replicas lost for good (`speculab.launch.launcher`): a replica process killed mid-point, and every replica's
process gone. The launcher decides for a dead process as a replica decides for itself (`jobs.Seat.give_up`),
ends the dead process's run FAILED and tagged as the lost replica's, and fails the points no replica is
left to run, naming them, so that nothing is left RUNNING and no point vanishes."""

from __future__ import annotations

import multiprocessing
import os
import signal
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from speculab.config import resolve
from speculab.config.sweep import PLANS
from speculab.launch.launcher import Pending, SideBySide
from speculab.process import jobs
from speculab.results.point import FailedPoint
from speculab.tracking.run_page import REPLICA_LOST_TAG
from speculab.tracking.spool import NOTE_TAG
from support.configs import load
from support.replicas import BOTH_DECODING_S, BOTH_DECODING_TIMEOUT_S, both_decoding
from support.waits import awaited


class Dead:
    """A replica whose process has ended: it answers no point."""

    def __init__(self) -> None:
        self.process = SimpleNamespace(join=lambda timeout: None, exitcode=-9, pid=None)

    def run(self, config: Any) -> None:
        return None


def test_a_sweep_whose_every_replica_process_died_fails_the_points_not_run_naming_them(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs, "FAILED_POINTS", [])
    points = []
    for index, L in enumerate((2, 3, 4)):
        overrides = ("runtime=inline", "tracking=none", f"algorithm.L={L}")
        PLANS[overrides] = resolve(load(list(overrides)))
        points.append(Pending(index, overrides, OmegaConf.create({})))
    context = SimpleNamespace(callbacks=SimpleNamespace(callbacks=[]))
    flags = multiprocessing.get_context("spawn").Array("b", 2)
    try:
        results = SideBySide(context, points, 2, flags).run([Dead(), Dead()])  # type: ignore[arg-type, list-item]
    finally:
        for point in points:
            PLANS.pop(point.overrides)
    values = [jobs.returned(done) for done in results]
    assert len(results) == 3 and all(isinstance(v, FailedPoint) for v in values)  # none vanished
    reasons = sorted(v.reason for v in values)
    assert reasons[:2] == ["RuntimeError: not run: every replica was lost"] * 2
    assert reasons[2].startswith("RuntimeError: replica ") and "its process ended (exit code -9)" in reasons[2]
    assert len(jobs.FAILED_POINTS) == 3 and list(flags) == [1, 1]
    err = capsys.readouterr().err
    assert "speculab: every replica of the sweep was lost; 2 point(s) not run: " in err, err


@pytest.mark.slow
@pytest.mark.timeout(BOTH_DECODING_TIMEOUT_S)
def test_a_replica_process_killed_mid_point_leaves_its_attempt_failed_and_tagged(tmp_path: Path, sweeps) -> None:
    """SIGKILL to one replica's process while both decode: its point runs again on the other replica, and
    the attempt the dead process left RUNNING is ended FAILED by the launcher, tagged and described as a
    lost replica's, linked from the parent; every point finishes, nothing is left RUNNING, exit 0."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = [
        "-m",
        "algorithm=block,token",
        "sampling.temperature=0,1",
        "dataset.num_prompts=4",
        "sampling.max_new_tokens=24",
        "measure.repeats=1",
        "baseline=false",
        "baseline_hf=false",
        "runtime=ray",
        "runtime.torch_threads=1",
        "cluster.num_cpus=2",
        "cluster.replicas=2",
        f"tracking.uri={uri}",
    ]
    sweep = sweeps(args, tmp_path)
    found = awaited(partial(both_decoding, tmp_path), "both replicas decoded at once", sweep, BOTH_DECODING_S)
    victim, pid = sorted(found.items())[0]
    os.kill(pid, signal.SIGKILL)
    out, err = sweep.communicate(timeout=240)
    assert sweep.returncode == 0, err[-3000:]
    assert f"speculab: replica {victim[0]} lost (its process ended (exit code -9)); " in out, out[-3000:]
    assert "Traceback" not in err and "Error executing job" not in err, err[-3000:]

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("speculab")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    (parent,) = [r for r in runs if r.data.tags["speculab.kind"] == "sweep"]
    points = [r for r in runs if r.data.tags["speculab.kind"] == "point"]
    assert sorted(r.info.status for r in points) == ["FAILED", "FINISHED", "FINISHED", "FINISHED", "FINISHED"]
    assert parent.info.status == "FINISHED"
    (attempt,) = [p for p in points if p.info.status == "FAILED"]
    assert attempt.data.tags["speculab.replica"] == victim and attempt.data.tags[REPLICA_LOST_TAG] == victim[0]
    assert attempt.data.tags[NOTE_TAG].startswith(f"**Replica {victim[0]} lost**: its process ended")
    said = parent.data.tags[NOTE_TAG]
    assert "1 attempt(s) cut short by a lost replica" in said and f"/runs/{attempt.info.run_id}" in said, said


@pytest.mark.slow
def test_sigterm_while_the_replicas_start_ends_the_sweep_without_a_replicas_traceback(tmp_path: Path, sweeps) -> None:
    """SIGTERM as soon as the launcher has started its replicas' processes, which are importing: each stops
    where it is (the launcher passes the signal on as SIGINT), with no traceback, and nothing is left
    RUNNING."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = [
        "-m",
        "algorithm=block,token",
        "dataset.num_prompts=2",
        "sampling.max_new_tokens=12",
        "measure.repeats=1",
        "baseline_hf=false",
        "runtime=ray",
        "runtime.torch_threads=1",
        "cluster.num_cpus=2",
        "cluster.replicas=2",
        f"tracking.uri={uri}",
    ]
    sweep = sweeps(args, tmp_path)
    assert sweep.stdout is not None
    for line in sweep.stdout:  # the launcher's first line, once it has started the replicas' processes
        if "replicas of their model groups" in line:
            break
    sweep.send_signal(signal.SIGTERM)
    _, err = sweep.communicate(timeout=120)
    assert sweep.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("speculab")
    assert experiment is None or not client.search_runs([experiment.experiment_id], "attributes.status = 'RUNNING'")


@pytest.mark.slow
def test_replicas_started_before_the_embedded_cluster_join_it_where_the_user_set_no_ray_auth(tmp_path: Path) -> None:
    """The suite sets Ray's auth for itself (`support.ray_auth`), which would hide this: with none set, the
    replicas' processes, started before the launcher's embedded cluster, inherit its token and its mode."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")} | {"HOME": str(tmp_path)}
    args = [
        "-m",
        "algorithm=block,token",
        "dataset.num_prompts=2",
        "sampling.max_new_tokens=8",
        "measure.repeats=1",
        "baseline_hf=false",
        "runtime=ray",
        "runtime.torch_threads=1",
        "cluster.num_cpus=2",
        "cluster.replicas=2",
        "tracking=none",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "speculab.launch.cli", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "sweep on 2 replicas: 2 done · 0 running · 0 queued" in done.stdout
    assert not (tmp_path / ".ray").exists()  # nothing written to the user's ~/.ray
