"""A run left RUNNING by a process that died without ending it (`kill -9`, the OOM killer) is ended KILLED
by the next speculab command that writes to the same store, which says so (`tracking.orphans`)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from speculab.tracking import orphans
from speculab.tracking.orphans import OWNER_TAG, owner, process_start
from speculab.tracking.spool import SpooledRun
from support.waits import awaited


def dead_pid() -> int:
    """The id of a process that has ended."""
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


def test_a_process_is_told_from_a_later_one_with_its_id() -> None:
    host = socket.gethostname()
    me = os.getpid()
    assert not orphans.dead_owner(owner(host, me, process_start(me)), host)
    assert orphans.dead_owner(f"{host} {dead_pid()} 1", host)
    assert orphans.dead_owner(f"{host} {os.getpid()} {int(process_start(os.getpid()) or 0) + 1}", host)  # id reused
    assert not orphans.dead_owner(f"other-host {dead_pid()} 1", host)  # cannot be checked from here
    assert not orphans.dead_owner("", host)


def test_the_next_command_ends_killed_what_a_killed_process_left_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(orphans, "CHECKED", set())
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("speculab")
    host, gone = socket.gethostname(), dead_pid()
    alive = owner(host, os.getpid(), process_start(os.getpid()))
    owners = {"killed": f"{host} {gone} 1", "alive": alive, "elsewhere": f"other-host {gone} 1"}
    for name, tag in owners.items():
        client.create_run(experiment, tags={OWNER_TAG: tag}, run_name=name)
    SpooledRun(tmp_path / "spool", uri, "speculab", "next command", {}).end("FINISHED")
    status = {run.info.run_name: run.info.status for run in client.search_runs([experiment])}
    assert status == {"killed": "KILLED", "alive": "RUNNING", "elsewhere": "RUNNING", "next command": "FINISHED"}
    err = capsys.readouterr().err
    assert "ended KILLED 1 run(s) left RUNNING by a process on this host that died without ending them: killed" in err
    (killed,) = client.search_runs([experiment], "attributes.run_name = 'killed'")
    assert killed.data.tags["mlflow.note.content"].startswith(
        f"Ended KILLED by a later speculab command: process {gone}"
    )


@pytest.mark.slow
def test_a_sweep_killed_with_sigkill_is_closed_by_the_next_run(random_llama_pair, tmp_path: Path) -> None:
    """The case itself: `kill -9` of a sweep once its first point's run exists, then another command."""
    from support.cli import small_run, speculab

    store = tmp_path / "mlflow.db"
    args = [*small_run(random_llama_pair, store), "runtime=inline", "baseline_hf=false"]
    sweep = subprocess.Popen(
        [sys.executable, "-m", "speculab.launch.cli", "-m", "algorithm.K=1,2", "algorithm=gbv", *args],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    awaited(lambda: len(running(store)) >= 2, "the sweep's parent and first point were running", sweep, 180)
    os.kill(sweep.pid, signal.SIGKILL)
    sweep.wait()
    assert len(running(store)) == 2  # nothing ended them
    after = speculab([*args, "dataset.num_prompts=1"], tmp_path)
    assert after.returncode == 0, after.stderr
    assert "ended KILLED 2 run(s) left RUNNING" in after.stderr and running(store) == []


def running(store: Path) -> list[str]:
    """The store's RUNNING runs, read as speculab opens a store (its tables created under its lock)."""
    from speculab.tracking.store import retrying_busy, store_client

    if not store.exists():
        return []
    client = retrying_busy(lambda: store_client(f"sqlite:///{store}"))
    experiment = client.get_experiment_by_name("speculab")
    if experiment is None:
        return []
    return [r.info.run_id for r in client.search_runs([experiment.experiment_id], "attributes.status = 'RUNNING'")]
