"""Durable tracking: the spool holds every record, MLflow gets them live while it answers, and
`speculab-sync` replays the rest exactly once (parents before children, crashed runs FAILED)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from mlflow.tracking import MlflowClient

from speculab.tracking import spool as spool_module
from speculab.tracking.spool import SpooledRun, find_spooled_run, read_spool, tracked
from speculab.tracking.sync import main as sync_main
from speculab.tracking.sync import sync


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fill(run, steps: int = 3) -> None:
    run.log_params({"algorithm.name": "block", "algorithm.K": 1})
    for step in range(1, steps + 1):
        run.log_metrics({"prompt/block_efficiency": 1.5 + step}, step=step)
    run.log_metrics({"block_efficiency": 2.5, "tokens_per_s": 100.0})
    run.log_text('{"id": 1}\n', "records.jsonl")
    figure, axes = plt.subplots()
    axes.plot([0, 1])
    run.log_figure(figure, "acceptance_histogram.png")
    plt.close(figure)


def snapshot(uri: str) -> dict[str, tuple]:
    """{run name: (status, params, {metric: history length}, artifacts, parent)} of every run."""
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("speculab")
    out = {}
    for run in client.search_runs([experiment.experiment_id]) if experiment else []:
        rid = run.info.run_id
        history = {key: len(client.get_metric_history(rid, key)) for key in run.data.metrics}
        artifacts = tuple(sorted(a.path for a in client.list_artifacts(rid)))
        parent = run.data.tags.get("mlflow.parentRunId")
        out[run.info.run_name] = (run.info.status, dict(run.data.params), history, artifacts, parent)
    return out


def test_online_run_is_in_mlflow_live_and_a_sync_adds_nothing(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run = SpooledRun(tmp_path / "spool", uri, "speculab", "point", {"speculab.kind": "point"})
    fill(run)
    live = MlflowClient(uri).get_run(run.run_id)
    assert live.info.status == "RUNNING" and live.data.metrics["block_efficiency"] == 2.5
    run.end("FINISHED")
    before = snapshot(uri)
    ((status, params, history, artifacts, _),) = before.values()
    assert status == "FINISHED" and params["algorithm.K"] == "1" and history["prompt/block_efficiency"] == 3
    assert artifacts == ("acceptance_histogram.png", "records.jsonl")
    assert [r["op"] for r in read_spool(run.path)] == ["start", "params", *["metrics"] * 4, "text", "figure", "end"]
    sync([tmp_path / "spool"])
    assert snapshot(uri) == before


class HangingUp:
    """A server on the loopback that takes each connection and hangs up at once, counting them: a tracking
    server that answers no request. A connection is counted before its client sees the hang-up."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.connections = 0
        threading.Thread(target=self.serve, name="hanging-up", daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:  # closed
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept
        self.listener.close()


@pytest.fixture
def hanging_up() -> Iterator[HangingUp]:
    server = HangingUp()
    yield server
    server.close()


def test_a_server_that_answers_nothing_is_tried_once_warned_of_once_and_synced_exactly_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], hanging_up: HangingUp
) -> None:
    """The run's first call tries the server with one retry (`spool.FAST_FAIL_ENV`: MLflow's own default
    retries with a growing backoff for minutes), and no later record tries it again: the run spools."""
    run = SpooledRun(tmp_path / "spool", hanging_up.url, "speculab", "point", {})
    assert hanging_up.connections == 2  # one request and its one retry
    fill(run)
    run.end("FINISHED")
    assert hanging_up.connections == 2 and run.run_id is None
    assert capsys.readouterr().err.count("speculab: MLflow at") == 1
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sync_main([str(tmp_path / "spool"), "--uri", uri])
    first = snapshot(uri)
    assert first["point"][0] == "FINISHED" and first["point"][2] == {
        "prompt/block_efficiency": 3,
        "block_efficiency": 1,
        "tokens_per_s": 1,
    }
    assert first["point"][3] == ("acceptance_histogram.png", "records.jsonl")
    sync_main([str(tmp_path / "spool"), "--uri", uri])
    assert snapshot(uri) == first


def test_store_failing_mid_run_is_completed_by_sync_without_duplicates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run = SpooledRun(tmp_path / "spool", uri, "speculab", "point", {})
    run.log_params({"a": 1})
    run.log_metrics({"prompt/block_efficiency": 2.0}, step=1)

    def down(*args, **kwargs):
        raise ConnectionError("tracking server went away")

    monkeypatch.setattr(MlflowClient, "log_batch", down)
    fill(run)
    run.end("FINISHED")
    assert not run.online
    monkeypatch.undo()
    assert MlflowClient(uri).get_run(run.run_id).info.status == "RUNNING"
    sync([tmp_path / "spool"])
    status, _, history, _, _ = snapshot(uri)["point"]
    assert status == "FINISHED" and history == {"prompt/block_efficiency": 4, "block_efficiency": 1, "tokens_per_s": 1}


def test_offline_parent_and_children_are_nested_by_sync(tmp_path: Path) -> None:
    down = f"http://127.0.0.1:{closed_port()}"
    parent = SpooledRun(tmp_path / "sweep" / "spool", down, "speculab", "sweep", {"speculab.kind": "sweep"})
    for index in range(2):
        with tracked(
            SpooledRun(tmp_path / str(index) / "spool", down, "speculab", f"point {index}", {}, parent.ref)
        ) as child:
            fill(child, steps=1)
    parent.end("FINISHED")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = sync([tmp_path], uri)
    assert len(done) == 3
    runs = snapshot(uri)
    parent_id = find_spooled_run(MlflowClient(uri), "speculab", parent.spool_id)
    assert runs["point 0"][4] == runs["point 1"][4] == parent_id
    assert {name: r[0] for name, r in runs.items()} == dict.fromkeys(("sweep", "point 0", "point 1"), "FINISHED")


def test_interrupted_and_failed_runs_end_killed_and_failed(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with pytest.raises(KeyboardInterrupt), tracked(SpooledRun(tmp_path / "spool", uri, "speculab", "killed", {})):
        raise KeyboardInterrupt
    with pytest.raises(RuntimeError), tracked(SpooledRun(tmp_path / "spool", uri, "speculab", "failed", {})):
        raise RuntimeError("boom")
    SpooledRun(tmp_path / "spool", uri, "speculab", "parent", {})
    spool_module.close_open_runs("KILLED")
    assert {name: r[0] for name, r in snapshot(uri).items()} == {
        "killed": "KILLED",
        "failed": "FAILED",
        "parent": "KILLED",
    }


def test_a_crashed_writer_leaves_a_spool_that_sync_ends_failed(tmp_path: Path) -> None:
    run = SpooledRun(tmp_path / "spool", f"http://127.0.0.1:{closed_port()}", "speculab", "crashed", {})
    run.log_metrics({"prompt/block_efficiency": 2.0}, step=1)
    records = read_spool(run.path)
    records[0]["pid"] = 2**22 + 12345  # no such process: the writer died without an end record
    run.path.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"op": "metr')
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sync([tmp_path / "spool"], uri)
    status, _, history, _, _ = snapshot(uri)["crashed"]
    assert status == "FAILED" and history == {"prompt/block_efficiency": 1}


def test_unwritable_tracking_path_spools_instead(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a regular file where a directory should be")
    run = SpooledRun(tmp_path / "spool", f"sqlite:///{blocker / 'mlflow.db'}", "speculab", "point", {})
    fill(run)
    run.end("FINISHED")
    assert not run.online and [r["op"] for r in read_spool(run.path)][-1] == "end"


def test_a_spool_dir_of_any_name_is_found_by_sync(tmp_path: Path) -> None:
    """`tracking.spool_dir` need not be called spool/: a directory named directly is searched too."""
    run = SpooledRun(tmp_path / "my_records", f"http://127.0.0.1:{closed_port()}", "speculab", "point", {})
    run.end("FINISHED")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert list(sync([tmp_path / "my_records"], uri)) == [run.path]
    assert snapshot(uri)["point"][0] == "FINISHED"
