"""Submit a speculab run or sweep to a Ray cluster through the Ray Jobs API, and follow it.

    .venv/bin/python jobs/submit.py [--address http://127.0.0.1:8265] [--tracking-uri URI] \
        [--output-dir DIR] [--python PY] -- algorithm=gbv -m algorithm.K=1,2

The job runs `<python> -m speculab.launch.cli <overrides>` on the cluster with this checkout as its
working dir (stores, virtualenvs, git history and weight files left out) and
`PYTHONPATH=platform`, so the driver and the model actors import the uploaded speculab. `-m`
may stand anywhere among the overrides (it is moved first, as Hydra needs). Added unless given:
- `cluster.address=auto`: the driver attaches to the job's own cluster;
- `tracking.uri`: the job's cwd is Ray's temporary copy, so a relative store would vanish; for a
  cluster on this machine the absolute `<repo>/mlflow.db`, else `--tracking-uri` is required;
- `hydra.run.dir`, `hydra.sweep.dir` and `tracking.spool_dir` under `<output dir>/<job id>`:
  Hydra's outputs and the spool (the record of every run that survives MLflow being down) must
  outlive Ray's copy; for a local cluster `<repo>/outputs/jobs`, else `--output-dir` (a path on
  the cluster's shared disk) is required.

Before anything is uploaded, every point of the command is validated here as the job will validate it
(`config.sweep.sweep_plans`: the whole config, with the job's own additions); for a cluster elsewhere the
checks that look at the cluster's machine (its checkpoints, datasets, devices, store and address) are
left to the job, and the rest refuse here.

The interpreter: for a cluster on this machine, the one running this script (the project's
venv; a bare `python` on the cluster's PATH is whatever `ray start` inherited, often one without
hydra); for a remote cluster `python`, which the `cluster/` presets make the project's (they
start Ray from its venv or image). The commit is computed here and passed in
`SPECULAB_GIT_COMMIT`/`SPECULAB_GIT_DIRTY` (the upload has no `.git`). The job's log is streamed
while it runs; at the end the MLflow runs tagged with its id are listed with their pages.
This module does not start clusters.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shlex
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlparse

from speculab.config import TrackingConfig
from speculab.config.attach import token_mode
from speculab.launch.cli import command_problems
from speculab.launch.cli_args import multirun_first
from speculab.tracking.provenance import COMMIT_ENV, DIRTY_ENV, git_state
from speculab.tracking.ui import job_links, ui_port

os.environ.update(token_mode(os.environ, Path.home()))  # before Ray is imported: it reads the mode then

from hydra.core.override_parser.overrides_parser import OverridesParser
from ray.exceptions import AuthenticationError
from ray.job_submission import JobStatus, JobSubmissionClient

REPO = Path(__file__).resolve().parents[1]
# gitignore-style patterns left out of the upload (Ray caps a working dir at 500 MiB).
EXCLUDES = [
    ".venv",
    ".git",
    "mlflow.db",
    "mlruns",
    "outputs",
    "multirun",
    ".pytest_cache",
    "**/__pycache__",
    "*.bin",
    "*.pt",
    "*.pth",
    "*.gguf",
    "checkpoints/",
    "weights/",
]
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
AUTH_HELP = (
    "A head started with token authentication (RAY_AUTH_MODE=token, or a token in ~/.ray/auth_token) needs "
    "its token here: on the head's machine, as its user, this script finds ~/.ray/auth_token itself; "
    "elsewhere run `ray get-auth-token` on the head, then submit with "
    "`RAY_AUTH_TOKEN=<token> python jobs/submit.py ...` (or RAY_AUTH_TOKEN_PATH=<file>)."
)
# How to start a head on this machine without meeting another Ray's ports (docs/runtime.md#job-submission).
START_HEAD = "docs/runtime.md#job-submission (`ray start --head --block --dashboard-port=PORT ...`, every port its own)"
T = TypeVar("T")
TERMINAL = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED)


def override(overrides: list[str], key: str) -> str | None:
    """The value the user gave ``key`` (`key=value`), or None."""
    return next((o.split("=", 1)[1] for o in overrides if o.startswith(f"{key}=")), None)


def with_defaults(overrides: list[str], defaults: dict[str, str]) -> list[str]:
    """Overrides plus key=value for each default whose key the user did not set."""
    return [*overrides, *(f"{key}={value}" for key, value in defaults.items() if override(overrides, key) is None)]


def is_local(address: str) -> bool:
    return urlparse(address).hostname in LOCAL_HOSTS


def default_tracking_uri(address: str) -> str | None:
    """The absolute SQLite store of this checkout when the cluster runs on this machine, else None."""
    return f"sqlite:///{REPO / 'mlflow.db'}" if is_local(address) else None


def default_output_root(address: str) -> Path | None:
    """`<repo>/outputs/jobs` when the cluster runs on this machine, else None (no path is known there)."""
    return REPO / "outputs" / "jobs" if is_local(address) else None


def default_python(address: str) -> str:
    """This script's interpreter for a cluster on this machine, else `python` on the cluster's PATH."""
    return sys.executable if is_local(address) else "python"


def new_job_id() -> str:
    """A submission id chosen here, so that the job's output directory can be named before it starts."""
    return f"speculab_{time.strftime('%Y%m%d_%H%M%S')}_{uuid.uuid4().hex[:6]}"


def job_overrides(overrides: list[str], tracking_uri: str, job_dir: Path) -> list[str]:
    """The job's speculab arguments: the user's, `-m` first, plus where it attaches and writes."""
    defaults = {
        "cluster.address": "auto",
        "tracking.uri": tracking_uri,
        "hydra.run.dir": str(job_dir),
        "hydra.sweep.dir": str(job_dir),
        "tracking.spool_dir": str(job_dir / "spool"),
    }
    return with_defaults(multirun_first(overrides), defaults)


# Config keys whose checks look at the machine the job runs on (files, caches, GPUs, paths): for a cluster
# elsewhere the job checks them there, before it starts anything. The job's cluster (`cluster.address=auto`
# from the head's machine) is checked here by its Jobs API instead, wherever it runs.
MACHINE_KEYS = ("model.", "drafter.path", "dataset", "tracking.uri", "tracking.spool_dir")
HEAD_KEYS = ("cluster.address",)
POINT_PREFIX = re.compile(r"^point \d+ of \d+ \(.*?\): ")  # a sweep's line names its point first


def left_to_the_job(line: str, local: bool) -> bool:
    """Whether a validation line is the job's to say (HEAD_KEYS; MACHINE_KEYS for a cluster elsewhere)."""
    return POINT_PREFIX.sub("", line).startswith(HEAD_KEYS if local else HEAD_KEYS + MACHINE_KEYS)


def job_problems(args: list[str], local: bool) -> list[str]:
    """What the job's own validation refuses in `args` (its speculab arguments, `-m` first): every point of
    a sweep resolved as `speculab -m` resolves them (`config.sweep.sweep_plans`), but the lines left to the
    job (`left_to_the_job`; `local`: the cluster runs on this machine); a single run's without its point."""
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    from speculab.config import ConfigError
    from speculab.config.sweep import sweep_plans
    from speculab.launch.cli import CONF

    overrides = [arg for arg in args if arg != "--multirun"]
    parsed = OverridesParser.create().parse_overrides(overrides)
    fixed = [text for text, o in zip(overrides, parsed, strict=True) if not o.is_sweep_override()]
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            config = compose(config_name="config", overrides=fixed, return_hydra_config=True)
            with open_dict(config):
                config.hydra.overrides.task = overrides  # every point's, as Hydra's sweeper gives them
            errors = sweep_plans(config)[1]
    except ConfigError as err:
        errors = [line.strip() for line in str(err).splitlines()[1:]]
    kept = [line for line in errors if not left_to_the_job(line, local)]
    return kept if args[:1] == ["--multirun"] else [POINT_PREFIX.sub("", line) for line in kept]


def entrypoint(args: list[str], python: str) -> str:
    """The shell command the job runs."""
    return shlex.join([python, "-m", "speculab.launch.cli", *args])


def runtime_env() -> dict:
    commit, dirty = git_state(REPO, {})
    env_vars = {"PYTHONPATH": "platform", COMMIT_ENV: commit, DIRTY_ENV: dirty}
    return {"working_dir": str(REPO), "excludes": EXCLUDES, "env_vars": env_vars}


def follow(client: JobSubmissionClient, job_id: str, poll_s: float = 2.0, timeout_s: float | None = None) -> JobStatus:
    """Poll the job's status until it ends (or timeout_s passes); returns the last status."""
    start = time.monotonic()
    status = client.get_job_status(job_id)
    while status not in TERMINAL and (timeout_s is None or time.monotonic() - start < timeout_s):
        time.sleep(poll_s)
        status = client.get_job_status(job_id)
    return status


def show(chunk: str) -> None:
    print(chunk, end="", flush=True)


async def stream_logs(client: JobSubmissionClient, job_id: str, write: Callable[[str], None] = show) -> None:
    """Hand the job's log to ``write`` as it is written, until the job ends."""
    async for chunk in client.tail_job_logs(job_id):
        write(chunk)


def print_links(uri: str, job_id: str, port: int | None) -> None:
    """The job's MLflow runs and their pages (or why they cannot be listed)."""
    try:
        links = job_links(uri, job_id, port)
    except Exception as err:  # the store is down or unreachable from here: the job's spool still has the runs
        print(f"MLflow at {uri} did not answer ({type(err).__name__}); the runs are in the job's spool")
        return
    print(f"MLflow runs of {job_id} ({len(links)}):", *(f"  {link}" for link in links), sep="\n")
    if not uri.startswith("http"):
        print(f"(serve the store: `mlflow ui --backend-store-uri {uri} --port {ui_port(uri, port)}`)")


def remote_needs(parser: argparse.ArgumentParser, value: T | None, option: str) -> T:
    """``value``; None (no default: nothing here names a place a remote cluster reaches) stops with
    what to give instead."""
    if value is None:
        parser.error(f"a remote cluster needs {option}")
    return value


def no_head(address: str) -> str:
    """One line for a Jobs API address nothing answers at: the address, and how to start a head or name one."""
    return f"submit: no Ray head answers at {address}: start one as in {START_HEAD}, or name yours with --address"


# A head just started answers 500 "No available agent to submit job" until its job agent registers: seconds,
# longer on a loaded machine
NO_AGENT = "No available agent to submit job"
AGENT_WAIT_S = 120.0


def submit_when_ready(client: JobSubmissionClient, wait_s: float = AGENT_WAIT_S, **job: object) -> None:
    """`client.submit_job(**job)`, retried each second while the head has no job agent yet, up to `wait_s`
    (one line says so); any other refusal, or the agent still missing then, is raised."""
    deadline, told = time.monotonic() + wait_s, False
    while True:
        try:
            client.submit_job(**job)  # type: ignore[arg-type]
            return
        except RuntimeError as err:
            if NO_AGENT not in str(err) or time.monotonic() > deadline:
                raise
            if not told:
                print(f"submit: the head's job agent is not up yet; retrying for up to {wait_s:g} s", file=sys.stderr)
                told = True
            time.sleep(1.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--address", default="http://127.0.0.1:8265", help="the cluster's Jobs API (dashboard) address")
    parser.add_argument("--tracking-uri", help="MLflow URI the cluster can reach (default: <repo>/mlflow.db if local)")
    parser.add_argument(
        "--output-dir",
        type=Path,
        help="durable root of the jobs' outputs and spools (default: <repo>/outputs/jobs if local)",
    )
    parser.add_argument("--python", help="interpreter on the cluster (default: this one if local, else `python`)")
    parser.add_argument("--no-wait", action="store_true", help="submit and print the job id only")
    parser.add_argument("overrides", nargs="*", help="speculab (Hydra) arguments, after --")
    args = parser.parse_args(argv)
    address = urlparse(args.address)
    if address.scheme not in ("http", "https") or not address.hostname:
        parser.error(f"--address {args.address}: not a Jobs API address; give http://HOST:PORT (the head's dashboard)")
    if problems := command_problems(multirun_first(args.overrides)):  # refused here, not on the cluster
        parser.exit(2, "".join(f"submit: {line}\n" for line in problems))
    uri = remote_needs(
        parser,
        args.tracking_uri or default_tracking_uri(args.address),
        "--tracking-uri: an `mlflow server` URI the cluster reaches, or sqlite:////absolute/path on its shared disk",
    )
    root = remote_needs(
        parser,
        args.output_dir or default_output_root(args.address),
        "--output-dir: a directory on the cluster's shared disk for Hydra's outputs and the spool",
    )
    job_id = new_job_id()
    job_dir = root.absolute() / job_id  # not resolve(): a remote path may not exist here
    job_args = job_overrides(args.overrides, uri, job_dir)
    if problems := job_problems(job_args, is_local(args.address)):  # the whole config, before any upload
        parser.exit(2, "submit: invalid config:\n" + "".join(f"  {line}\n" for line in problems))
    command = entrypoint(job_args, args.python or default_python(args.address))
    try:
        client = JobSubmissionClient(args.address)
        submit_when_ready(client, entrypoint=command, runtime_env=runtime_env(), submission_id=job_id)
    except ConnectionError:  # Ray's message is the last line of a long traceback; the fix is one command
        print(no_head(args.address), file=sys.stderr)
        return 2
    except AuthenticationError as err:
        print(
            f"submit: the Ray head at {args.address} refused this client's token ({err.message.splitlines()[0]}).\n"
            f"{AUTH_HELP}",
            file=sys.stderr,
        )
        return 2
    print(f"submitted {job_id}: {command}\noutputs and spool: {job_dir}\nMLflow: {uri}", flush=True)
    if args.no_wait:
        return 0
    asyncio.run(stream_logs(client, job_id))
    status = follow(client, job_id)
    print(f"{job_id}: {status}")
    given = override(args.overrides, "tracking.ui_port")
    print_links(uri, job_id, int(given) if given not in (None, "null") else TrackingConfig.ui_port)
    return 0 if status == JobStatus.SUCCEEDED else 1


if __name__ == "__main__":
    sys.exit(main())
