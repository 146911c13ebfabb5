"""jobs/submit.py: a speculab run submitted through the Ray Jobs API to a real local cluster.

The test starts its own head (`ray start --head --block` on 127.0.0.1 with free ports and a
private temp dir) in a new process group and ends only that group, so Ray clusters of
other processes on the machine are untouched.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import mlflow
import pytest

from support.models import REPO
from support.servers import serving


def load_submit():
    spec = importlib.util.spec_from_file_location("submit", REPO / "jobs" / "submit.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


submit = load_submit()


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def test_entrypoint_attaches_to_the_jobs_cluster_and_keeps_user_keys() -> None:
    command = submit.entrypoint(["algorithm.K=2", "tracking.uri=http://mlflow:5000"], "sqlite:////x/mlflow.db")
    assert command == "python -m speculab.cli algorithm.K=2 tracking.uri=http://mlflow:5000 cluster.address=auto"
    assert submit.default_tracking_uri("http://127.0.0.1:8265") == f"sqlite:///{REPO / 'mlflow.db'}"
    assert submit.default_tracking_uri("http://head.example:8265") is None
    assert {".venv", ".git", "mlflow.db", "mlruns", "outputs", "multirun"} <= set(submit.runtime_env()["excludes"])


def list_jobs(address: str) -> bool:
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(address).list_jobs() is not None


@pytest.fixture
def local_ray_head(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A Ray head of this test only, on 127.0.0.1 without token auth; yields its Jobs API address."""
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # Ray 2.60 turns token auth on when ~/.ray/auth_token exists
    yield from ray_head({"RAY_AUTH_MODE": "disabled"}, list_jobs)


HEAD_TOKEN = "speculab-test-token-0123456789abcdef"


@pytest.fixture
def token_ray_head() -> Iterator[str]:
    """Like `local_ray_head`, with token authentication on and a known token (asked in a fresh
    process each time: Ray reads its auth settings once per process)."""
    probe = ["-c", "import sys; from ray.job_submission import JobSubmissionClient as C; C(sys.argv[1]).list_jobs()"]
    yield from ray_head(
        {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": HEAD_TOKEN},
        lambda address: with_token(HEAD_TOKEN, [*probe, address]).returncode == 0,
    )


def ray_head(auth_env: dict[str, str], probe: Callable[[str], bool]) -> Iterator[str]:
    """Start a private head with ``auth_env``, yield its Jobs API address once ``probe`` answers,
    stop only its process group and the raylet workers it started."""
    gcs, dashboard, agent, metrics, grpc, runtime_env, nm, om = free_ports(8)
    worker_low = 20000 + (os.getpid() % 200) * 100  # a worker port range unlikely to collide
    temp_dir = tempfile.mkdtemp(prefix="ray_sl_", dir="/tmp")  # short: Ray's socket paths have a length limit
    command = [
        str(Path(sys.executable).parent / "ray"),
        "start",
        "--head",
        "--block",
        "--node-ip-address=127.0.0.1",
        f"--port={gcs}",
        f"--dashboard-port={dashboard}",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-agent-listen-port={agent}",
        f"--metrics-export-port={metrics}",
        f"--dashboard-agent-grpc-port={grpc}",
        f"--runtime-env-agent-port={runtime_env}",
        f"--node-manager-port={nm}",
        f"--object-manager-port={om}",
        f"--min-worker-port={worker_low}",
        f"--max-worker-port={worker_low + 99}",
        f"--temp-dir={temp_dir}",
        "--num-cpus=3",
        "--include-dashboard=true",
        "--disable-usage-stats",
    ]
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": "",
        "RAY_ADDRESS": "",
        **auth_env,
    }  # the job must find speculab in its uploaded working dir
    address = f"http://127.0.0.1:{dashboard}"
    try:
        with serving(command, lambda: probe(address), f"the Ray Jobs API at {address}", env=env):
            yield address
    finally:
        time.sleep(2)
        leftovers = subprocess.run(["pgrep", "-f", temp_dir], capture_output=True, text=True).stdout.split()
        for pid in leftovers:  # raylet children of this head only (their command lines name its temp dir)
            os.kill(int(pid), signal.SIGKILL)


@pytest.mark.slow
def test_a_job_submitted_to_a_local_cluster_produces_an_mlflow_run(local_ray_head: str, tmp_path: Path) -> None:
    store = tmp_path / "mlflow.db"
    overrides = [
        "dataset.num_prompts=1",
        "sampling.max_new_tokens=8",
        "baseline=false",
        "runtime.torch_threads=1",
        "tracking.experiment=jobs-test",
        "cluster.plan_prompt_tokens=512",
    ]  # a key main's installed copy lacks: speculab must come from the upload
    assert (
        submit.main(
            ["--address", local_ray_head, "--tracking-uri", f"sqlite:///{store}", "--no-wait", "--", *overrides]
        )
        == 0
    )

    from ray.job_submission import JobStatus, JobSubmissionClient

    client = JobSubmissionClient(local_ray_head)
    (job,) = client.list_jobs()
    status = submit.follow(client, job.submission_id, poll_s=1, timeout_s=400)
    logs = client.get_job_logs(job.submission_id)
    assert status == JobStatus.SUCCEEDED, logs
    assert "block_efficiency" in logs
    mlflow.set_tracking_uri(f"sqlite:///{store}")
    runs = mlflow.search_runs(experiment_names=["jobs-test"])
    assert len(runs) == 1 and runs["metrics.block_efficiency"].iloc[0] >= 1


def with_token(token: str, args: list[str]) -> subprocess.CompletedProcess:
    """Run a Python command in a fresh process (Ray reads its auth settings once per process)."""
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token, "PYTHONPATH": ""}
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=180)


@pytest.mark.slow
def test_token_auth_head_refuses_a_wrong_token_with_instructions_and_takes_the_right_one(token_ray_head: str) -> None:
    # The right token: the fixture yields only once a fresh process listed the head's jobs with it.
    refused = with_token(
        "not-the-token",
        [
            str(REPO / "jobs" / "submit.py"),
            "--address",
            token_ray_head,
            "--tracking-uri",
            "sqlite:////tmp/x.db",
            "--no-wait",
        ],
    )
    assert refused.returncode == 2 and "ray get-auth-token" in refused.stderr and "Traceback" not in refused.stderr
