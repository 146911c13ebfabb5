"""Where results are filed: `resume=true` counts a point as finished only in the same store,
experiment and configuration; a skipped point still gives its sweep row; every sweep process has
its own directory and parent file; `speculab-sync` replays each spool on its own, lists the ones it
could not replay and replays them, without duplicates, once the cause is fixed."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from mlflow.tracking import MlflowClient

from speculab.config import Config, ModelConfig, TrackingConfig
from speculab.results.point import PointResult, PointShape
from speculab.tracking import runs
from speculab.tracking.resume import finished_point, point_id, store_key
from speculab.tracking.runs import write_parent_file
from speculab.tracking.spool import POINT_TAG, RunRef, SpooledRun
from speculab.tracking.sweep_page import RESUMED, point_row
from speculab.tracking.sync import main as sync_main
from support.configs import CONF


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def with_tracking(uri: str, experiment: str = "X") -> Config:
    return replace(Config(), tracking=TrackingConfig(uri=uri, experiment=experiment))


def finished_spool(root: Path, uri: str, experiment: str, point: str) -> SpooledRun:
    """A point's run that finished while its store was down: only its spool holds it."""
    run = SpooledRun(root / "outputs" / "a" / "spool", uri, experiment, "point", {POINT_TAG: point})
    run.log_metrics({"prompt/block_efficiency": 2.0}, step=1)
    run.log_metrics({"block_efficiency": 2.5, "speed/tokens_per_s": 90.0, "speedup_vs_ar": 1.4})
    run.end("FINISHED")
    return run


def test_a_spooled_point_counts_as_finished_only_for_its_own_store_and_experiment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    down = f"http://127.0.0.1:{closed_port()}"
    cfg = with_tracking(down)
    point = point_id(cfg)
    spooled = finished_spool(tmp_path, down, "X", point)
    found = finished_point(cfg, point)
    assert found is not None and found.where == str(spooled.path) and found.metrics["block_efficiency"] == 2.5
    assert finished_point(with_tracking(down, "Y"), point) is None
    assert finished_point(with_tracking(f"sqlite:///{tmp_path / 'b.db'}"), point) is None
    assert finished_point(cfg, point_id(replace(cfg, sampling=replace(cfg.sampling, seed=1)))) is None


def test_a_point_in_another_store_is_not_finished_in_this_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    a, b = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    cfg = with_tracking(a)
    point = point_id(cfg)
    finished_spool(tmp_path, a, "X", point)  # online: the run is in a.db, and its spool under outputs/
    assert finished_point(cfg, point) is not None
    assert finished_point(with_tracking(b, "Y"), point) is None
    assert finished_point(with_tracking(b, "X"), point) is None
    assert finished_point(with_tracking(a, "Y"), point) is None


def test_store_key_spells_one_store_one_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert store_key("sqlite:///a.db") == store_key(f"sqlite:///{tmp_path / 'a.db'}")
    assert store_key("http://host:5000/") == store_key("http://host:5000")
    assert store_key("sqlite:///a.db") != store_key("sqlite:///b.db")


def test_a_skipped_point_gives_its_row_from_the_run_it_logged() -> None:
    logged = {
        "block_efficiency": 2.5,
        "speedup_vs_ar": 1.4,
        "speedup_vs_ar_ci_low": 1.2,
        "speedup_vs_ar_ci_high": 1.6,
        "prompt/block_efficiency": 3.0,
        "baseline_hf/speedup_vs_ar": 0.9,
    }
    cfg = Config(model=ModelConfig(name="tiny-pycode"))
    cfg.algorithm.L = 4
    point = PointResult.from_logged(PointShape.of(cfg), logged, resumed=True)
    assert point.resumed and point.figures["speedup_vs_ar"].low == 1.2 and point.generate_vs_ar == 0.9
    assert list(point.figures) == ["block_efficiency", "speedup_vs_ar"]  # a live figure's last step is not the point's
    row = point_row(point)
    assert row[RESUMED] == "yes" and row["block_efficiency"] == 2.5 and row["speedup_vs_ar high"] == 1.6
    assert RESUMED not in point_row(replace(point, resumed=False))


def test_each_sweep_process_has_its_own_directory_and_parent_file(tmp_path: Path) -> None:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        hydra_cfg = compose("config", return_hydra_config=True).hydra
    sweep_dir = str(hydra_cfg.sweep.dir)
    assert sweep_dir.startswith("multirun/") and sweep_dir.endswith(f"-{runs.SWEEP_ID}")
    other = subprocess.run(
        [sys.executable, "-c", "from speculab.tracking.runs import SWEEP_ID; print(SWEEP_ID)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert other and other != runs.SWEEP_ID
    path = write_parent_file(tmp_path, RunRef("spool", "run"))
    assert path.name == f"mlflow_parent.{runs.SWEEP_ID}.json" and json.loads(path.read_text())["run_id"] == "run"
    with pytest.raises(FileExistsError):  # never overwritten, not even by a second sweep of this process
        write_parent_file(tmp_path, RunRef("other", "other"))


def spooled_points(spool: Path, uri: str, experiments: list[str]) -> list[SpooledRun]:
    done = []
    for index, experiment in enumerate(experiments):
        run = SpooledRun(spool, uri, experiment, f"point {index}", {"speculab.kind": "point"})
        run.log_metrics({"block_efficiency": 2.0 + index})
        run.end("FINISHED")
        done.append(run)
    return done


def named_runs(uri: str, experiment: str) -> list[str]:
    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    return sorted(r.info.run_name for r in client.search_runs([found.experiment_id])) if found else []


def test_sync_replays_past_a_bad_spool_lists_it_and_replays_it_once_fixed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    down = f"http://127.0.0.1:{closed_port()}"
    spooled = spooled_points(tmp_path / "spool", down, ["speculab", "", "speculab", "speculab"])
    capsys.readouterr()
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with pytest.raises(SystemExit) as ended:
        sync_main([str(tmp_path / "spool"), "--uri", uri])
    assert ended.value.code == 1
    out, err = capsys.readouterr()
    assert "3 spooled run(s) in MLflow" in out and "Traceback" not in err
    assert f"not replayed: {spooled[1].path}:" in err and "--experiment NAME" in err
    assert named_runs(uri, "speculab") == ["point 0", "point 2", "point 3"]
    sync_main([str(spooled[1].path), "--uri", uri, "--experiment", "fixed"])  # the fix, then the retry
    sync_main([str(tmp_path / "spool"), "--uri", uri, "--experiment", "speculab"])
    assert named_runs(uri, "fixed") == ["point 1"]
    assert named_runs(uri, "speculab") == ["point 0", "point 1", "point 2", "point 3"]
    sync_main([str(tmp_path / "spool"), "--uri", uri, "--experiment", "speculab"])  # nothing twice
    assert named_runs(uri, "speculab") == ["point 0", "point 1", "point 2", "point 3"]


def test_sync_with_the_store_down_says_so_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    down = f"http://127.0.0.1:{closed_port()}"
    spooled_points(tmp_path / "spool", down, ["speculab"] * 3)
    capsys.readouterr()
    with pytest.raises(SystemExit) as ended:
        sync_main([str(tmp_path / "spool")])
    assert ended.value.code == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and "Traceback" not in lines[0]
    assert lines[0].startswith("speculab-sync: not replayed: 3 spools") and f"{down} does not answer" in lines[0]
