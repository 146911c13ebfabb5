"""Faults of a single run: a tracking server that never answers (the run spools and syncs after), and
SIGTERM on Ray mid-decode (the run ends KILLED, exit 130, Ray's own handler not in the way)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest

from support.cli import points_logged, runs_by_kind, speculab
from support.waits import awaited


@pytest.mark.slow
def test_a_store_down_from_the_start_keeps_the_run(random_llama_pair, tmp_path: Path) -> None:
    """A tracking server that never answers (a store path under a file is refused up front instead:
    tests/test_config.py): the run decodes, spools, and syncs afterwards."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = [
        f"model.target_path={random_llama_pair[0]}",
        f"model.draft_path={random_llama_pair[1]}",
        "runtime=inline",
        "dataset.num_prompts=2",
        "sampling.max_new_tokens=8",
        f"tracking.uri=http://127.0.0.1:{port}",
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
        timeout=240,
    )
    (point,) = runs_by_kind(uri)["point"]
    assert point.info.status == "FINISHED" and "block_efficiency" in point.data.metrics


def prompt_decoded(uri: str) -> bool:
    """Whether the run in the store at `uri` has logged a decoded prompt."""
    return any("prompt/generated_tokens" in r.data.metrics for r in points_logged(uri))


@pytest.mark.slow
def test_sigterm_on_ray_ends_the_run_killed_as_inline(random_llama_pair, tmp_path: Path, sweeps) -> None:
    """Ray's driver handler (a C stack dump and exit 134 when shutdown is slow) does not replace
    speculab's: SIGTERM mid-decode ends the run KILLED with exit 130."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = [
        f"model.target_path={random_llama_pair[0]}",
        f"model.draft_path={random_llama_pair[1]}",
        "runtime=ray",
        "dataset.num_prompts=4",
        "sampling.max_new_tokens=200",
        f"tracking.uri={uri}",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    run = sweeps(args, tmp_path)
    awaited(partial(prompt_decoded, uri), "the run decoded a prompt on Ray", run, 300)
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=120)
    assert run.returncode == 130 and "SIGTERM received" not in err, err
    (point,) = runs_by_kind(uri)["point"]
    assert point.info.status == "KILLED"
