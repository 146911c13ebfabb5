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
from dataclasses import dataclass
from pathlib import Path

import mlflow
import pytest

from speculab.config.attach import token_mode
from speculab.tracking.provenance import COMMIT_TAG, JOB_TAG
from support.models import REPO
from support.ray_auth import suite_auth
from support.servers import free_port, serving


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


def test_the_job_command_attaches_writes_durably_and_keeps_user_keys(tmp_path: Path) -> None:
    overrides = ["algorithm=gbv", "-m", "algorithm.K=1,2", "tracking.uri=http://mlflow:5000"]
    args = submit.job_overrides(overrides, "sqlite:////x/mlflow.db", tmp_path / "job")
    assert args == [
        "--multirun",  # Hydra takes it only before the overrides
        "algorithm=gbv",
        "algorithm.K=1,2",
        "tracking.uri=http://mlflow:5000",  # the user's, not the default
        "cluster.address=auto",
        f"hydra.run.dir={tmp_path / 'job'}",
        f"hydra.sweep.dir={tmp_path / 'job'}",
        f"tracking.spool_dir={tmp_path / 'job' / 'spool'}",
    ]
    assert submit.entrypoint(["a=1"], "/venv/bin/python") == "/venv/bin/python -m speculab.launch.cli a=1"
    local, remote = "http://127.0.0.1:8265", "http://head.example:8265"
    assert submit.default_tracking_uri(local) == f"sqlite:///{REPO / 'mlflow.db'}"
    assert submit.default_output_root(local) == REPO / "outputs" / "jobs"
    assert submit.default_python(local) == sys.executable  # the project's venv, not the cluster's PATH
    assert (submit.default_tracking_uri(remote), submit.default_output_root(remote)) == (None, None)
    assert submit.default_python(remote) == "python"
    env = submit.runtime_env()
    assert {".venv", ".git", "mlflow.db", "mlruns", "outputs", "multirun"} <= set(env["excludes"])
    assert env["env_vars"]["SPECULAB_GIT_COMMIT"] not in ("", "unknown")  # the upload has no .git


def test_a_remote_cluster_needs_a_tracking_uri_and_an_output_dir(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        submit.main(
            ["--address", "http://head.example:8265", "--tracking-uri", "http://mlflow:5000", "--", "algorithm.K=2"]
        )
    assert "--output-dir" in capsys.readouterr().err


def test_no_head_at_the_address_is_one_line_naming_it_and_how_to_start_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    address = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    assert (
        submit.main(["--address", address, "--output-dir", str(tmp_path), "--", "algorithm=gbv", "algorithm.K=2"]) == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and address in err and "docs/runtime.md#job-submission" in err and "ray start" in err


class LateAgent:
    """A head whose job agent registers after `refusals` submissions (Ray's 500 until then)."""

    def __init__(self, refusals: int, error: str = "No available agent to submit job, please try again later.") -> None:
        self.refusals, self.error, self.jobs = refusals, error, []

    def submit_job(self, **job) -> str:
        if self.refusals:
            self.refusals -= 1
            raise RuntimeError(f"Request failed with status code 500: {self.error}.")
        self.jobs.append(job)
        return job["submission_id"]


def test_a_head_whose_job_agent_is_not_up_yet_is_retried_with_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(submit.time, "sleep", lambda _: None)
    late = LateAgent(3)
    submit.submit_when_ready(late, entrypoint="x", submission_id="job")
    assert late.jobs == [{"entrypoint": "x", "submission_id": "job"}]
    assert capsys.readouterr().err.count("job agent is not up yet") == 1
    with pytest.raises(RuntimeError, match="No available agent"):  # still none after the wait: Ray's error
        submit.submit_when_ready(LateAgent(10**9), wait_s=0.0, entrypoint="x", submission_id="job")
    with pytest.raises(RuntimeError, match="bad runtime env"):  # another refusal is not waited on
        submit.submit_when_ready(LateAgent(1, "bad runtime env"), entrypoint="x", submission_id="job")


# a cluster on another machine, with the places it reaches
REMOTE = ["--address", "http://10.1.2.3:8265", "--tracking-uri", "http://mlflow:5000", "--output-dir", "/shared/out"]


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--address", "head.example:8265"], "--address head.example:8265"),  # no scheme: not a URL the Jobs API takes
        (["--address", "ray://head.example:10001"], "http://HOST:PORT"),  # Ray Client's address, not the Jobs API's
        (
            ["--address", "http://127.0.0.1:1", "--", "baseline_hf=maybe"],
            "baseline_hf",
        ),  # refused here, not on the cluster
        (["--address", "http://127.0.0.1:1", "--", "algorithm.nme=gbv"], "algorithm.nme"),
        (  # the whole config, each key valid alone: drafting ahead needs one path
            ["--address", "http://127.0.0.1:1", "--", "drafter.ahead=ssd", "algorithm=gbv", "algorithm.K=2"],
            "drafter.ahead=ssd: drafts ahead for one i.i.d. path",
        ),
        (  # a cluster elsewhere, every point of the sweep
            [*REMOTE, "--", "-m", "drafter.ahead=ssd", "algorithm=gbv", "algorithm.K=1,2"],
            "point 2 of 2 (algorithm.K=2): drafter.ahead=ssd: drafts ahead",
        ),
    ],
)
def test_a_bad_address_or_override_is_refused_before_anything_is_sent(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(submit, "JobSubmissionClient", lambda *_: pytest.fail("a client made for a refused job"))
    with pytest.raises(SystemExit) as exit:
        submit.main(argv)
    err = capsys.readouterr().err
    assert exit.value.code == 2 and named in err and "Traceback" not in err


def test_what_only_a_remote_clusters_machine_can_check_is_left_to_the_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint, a dataset or a store on the cluster's own disks is not there to check here: the job checks
    it there, before it starts anything; the rest of its config is checked here."""
    sent: list[str] = []

    class Client:
        def __init__(self, address: str) -> None:
            sent.append(address)

        def submit_job(self, **kwargs: object) -> None:
            pass

    monkeypatch.setattr(submit, "JobSubmissionClient", Client)
    elsewhere = ["model.target_path=/on/the/cluster/target", "model.draft_path=/on/the/cluster/draft"]
    assert submit.main([*REMOTE, "--no-wait", "--", *elsewhere]) == 0 and sent == [REMOTE[1]]


def list_jobs(address: str) -> bool:
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(address).list_jobs() is not None


@pytest.fixture
def local_ray_head() -> Iterator[str]:
    """A Ray head of this test only, on 127.0.0.1 with the suite's token (`support.ray_auth`: this process's
    client sends it); yields its Jobs API address."""
    yield from (head.jobs for head in ray_head(suite_auth(), list_jobs))


HEAD_TOKEN = "speculab-test-token-0123456789abcdef"


@dataclass(frozen=True)
class Head:
    jobs: str  # the Jobs API's address, http://127.0.0.1:PORT
    gcs: str  # the GCS's, 127.0.0.1:PORT (what `cluster.address` names)


@pytest.fixture
def token_ray_head() -> Iterator[Head]:
    """Like `local_ray_head`, with token authentication on and a known token (asked in a fresh
    process each time: Ray reads its auth settings once per process)."""
    probe = ["-c", "import sys; from ray.job_submission import JobSubmissionClient as C; C(sys.argv[1]).list_jobs()"]
    yield from ray_head(
        {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": HEAD_TOKEN},
        lambda address: with_token(HEAD_TOKEN, [*probe, address]).returncode == 0,
    )


def ray_head(auth_env: dict[str, str], probe: Callable[[str], bool]) -> Iterator[Head]:
    """Start a private head with ``auth_env``, yield its addresses once ``probe`` answers at its Jobs API,
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
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != Path(sys.executable).parent)
    # Without the venv on the head's PATH a bare `python` lacks the project's packages (as on a head
    # started by `.venv/bin/ray start`): the job gets them only through jobs/submit.py's interpreter.
    # No PYTHONPATH: the job must find speculab in its uploaded working dir.
    env = {**os.environ, "PATH": path, "PYTHONPATH": "", "RAY_ADDRESS": "", **auth_env}
    address = f"http://127.0.0.1:{dashboard}"
    try:
        with serving(command, lambda: probe(address), f"the Ray Jobs API at {address}", env=env):
            yield Head(address, f"127.0.0.1:{gcs}")
    finally:
        time.sleep(2)
        leftovers = subprocess.run(["pgrep", "-f", temp_dir], capture_output=True, text=True).stdout.split()
        for pid in leftovers:  # raylet children of this head only (their command lines name its temp dir)
            os.kill(int(pid), signal.SIGKILL)


@pytest.mark.slow
def test_a_submitted_sweep_streams_its_log_writes_durably_and_tags_its_runs(
    local_ray_head: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store, jobs = tmp_path / "mlflow.db", tmp_path / "jobs"
    overrides = [
        "dataset.num_prompts=1",
        "sampling.max_new_tokens=8",
        "baseline=false",
        "baseline_hf=false",
        "measure.repeats=1",
        "runtime.torch_threads=1",
        "tracking.experiment=jobs-test",
        "algorithm=gbv",
        "-m",  # after an override, as the docs write it
        "algorithm.K=1,2",
    ]
    states: list[str] = []  # the job's status whenever a piece of its log arrived
    stream = submit.stream_logs

    async def watched(client, job_id: str) -> None:
        def write(chunk: str) -> None:
            states.append(str(client.get_job_status(job_id)))
            submit.show(chunk)

        await stream(client, job_id, write)

    monkeypatch.setattr(submit, "stream_logs", watched)
    args = ["--address", local_ray_head, "--tracking-uri", f"sqlite:///{store}", "--output-dir", str(jobs)]
    code = submit.main([*args, "--", *overrides])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "RUNNING" in states[0] and "block_efficiency" in out  # the log arrived while the job ran

    (job_dir,) = jobs.iterdir()
    job_id = job_dir.name
    assert {"multirun.yaml", "0", "1", "spool"} <= {p.name for p in job_dir.iterdir()}
    assert len(list((job_dir / "spool").glob("*.jsonl"))) == 3  # the sweep's parent and its two points

    mlflow.set_tracking_uri(f"sqlite:///{store}")
    runs = mlflow.search_runs(experiment_names=["jobs-test"], output_format="list")
    assert len(runs) == 3 and {run.info.status for run in runs} == {"FINISHED"}
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    for run in runs:
        tags = run.data.tags
        assert tags[JOB_TAG] == job_id and tags[COMMIT_TAG] == commit, tags
        assert tags["provenance.output_dir"].startswith(str(job_dir)) and tags["provenance.torch"] != "none"
    (parent,) = [run for run in runs if run.data.tags["speculab.kind"] == "sweep"]
    assert parent.info.run_name.endswith(job_id)  # two submissions of one sweep are told apart
    assert f"MLflow runs of {job_id} (3):" in out and f"{parent.info.run_name}: http://127.0.0.1:5000/#/" in out


def with_token(token: str, args: list[str]) -> subprocess.CompletedProcess:
    """Run a Python command in a fresh process (Ray reads its auth settings once per process)."""
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token, "PYTHONPATH": ""}
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=180)


def speculab_in(home: str, env: dict[str, str], args: list[str]) -> subprocess.CompletedProcess:
    """`speculab` with `args` in a fresh process, in `home` with `env` (its timeout a hang guard only)."""
    command = [sys.executable, "-m", "speculab.launch.cli", *args]
    return subprocess.run(command, env=env, cwd=home, capture_output=True, text=True, timeout=180)


@pytest.mark.slow
def test_token_auth_head_refuses_a_wrong_token_with_instructions_and_takes_the_right_one(token_ray_head: Head) -> None:
    # The right token: the fixture yields only once a fresh process listed the head's jobs with it.
    refused = with_token(
        "not-the-token",
        [
            str(REPO / "jobs" / "submit.py"),
            "--address",
            token_ray_head.jobs,
            "--tracking-uri",
            "sqlite:////tmp/x.db",
            "--no-wait",
        ],
    )
    assert refused.returncode == 2 and "ray get-auth-token" in refused.stderr and "Traceback" not in refused.stderr
    # The token where `ray get-auth-token --generate` keeps it, nothing in the environment: jobs/submit.py
    # turns Ray's token mode on for its client and is let in; a user without the file is refused.
    lists = (
        "import runpy, sys; runpy.run_path(sys.argv[1]); "
        "import ray.job_submission as j; j.JobSubmissionClient(sys.argv[2]).list_jobs()"
    )
    for home, let_in in ((tempfile.mkdtemp(), True), (tempfile.mkdtemp(), False)):
        if let_in:
            (Path(home) / ".ray").mkdir()
            (Path(home) / ".ray" / "auth_token").write_text(HEAD_TOKEN)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")} | {"HOME": home, "PYTHONPATH": ""}
        done = subprocess.run(
            [sys.executable, "-c", lists, str(REPO / "jobs" / "submit.py"), token_ray_head.jobs],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert (done.returncode == 0) == let_in, done.stderr[-2000:]
        # `speculab` attaching to the same head: let in with the kept token, else told it needs one by its
        # precheck, before Ray's own connect loop (which would retry for 20 s and call it no cluster)
        attach = ["runtime=ray", f"cluster.address={token_ray_head.gcs}", "tracking=none"]
        planned = speculab_in(home, env, ["--plan", *attach])
        assert planned.returncode == 0, planned.stderr[-2000:]  # a plan needs no cluster; it says how attaching goes
        needs = f"the Ray cluster at {token_ray_head.gcs} needs its token and none is set"
        assert ("the head answers" if let_in else needs) in planned.stdout, planned.stdout
        if not let_in:  # a run is refused by the precheck, in one line (a title, the line), and nothing else
            run = speculab_in(home, env, attach)
            assert run.returncode == 2 and run.stderr.count("\n") == 2 and needs in run.stderr, run.stderr
            assert "ray get-auth-token" in run.stderr


def test_submit_sends_the_token_ray_keeps_and_leaves_a_chosen_mode() -> None:
    home = Path(tempfile.mkdtemp())
    assert token_mode({}, home) == {}  # no token anywhere: Ray's default (no auth) stands
    assert token_mode({"RAY_AUTH_TOKEN": "t"}, home) == {"RAY_AUTH_MODE": "token"}
    (home / ".ray").mkdir()
    (home / ".ray" / "auth_token").write_text("t")
    assert token_mode({}, home) == {"RAY_AUTH_MODE": "token"}
    assert token_mode({"RAY_AUTH_MODE": "disabled"}, home) == {}
