"""Submit a speculab run or sweep to a Ray cluster through the Ray Jobs API, and follow it.

    python jobs/submit.py [--address http://127.0.0.1:8265] [--tracking-uri URI] -- \
        cluster=h200x8 model=qwen3-32b_0.6b algorithm=gbv -m algorithm.K=1,2,3,4

The job runs `python -m speculab.cli <overrides> cluster.address=auto` on the cluster with
this checkout as its working dir (stores, virtualenvs, git history and weight files left
out) and `PYTHONPATH=platform`, so the driver and the model actors import the uploaded
speculab even where the cluster's Python has none installed (its dependencies must be).
MLflow: the job's cwd is Ray's copy of the working dir, so a relative store would vanish;
the URI is either given (an `mlflow server` the cluster reaches) or, for a cluster on this
machine, the absolute SQLite file `<repo>/mlflow.db`. This module does not start clusters.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

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
    "A head started with token authentication (RAY_AUTH_MODE=token; the default for local heads from Ray 2.59) "
    "needs its token here: run `ray get-auth-token` on the head, then submit with "
    "`RAY_AUTH_MODE=token RAY_AUTH_TOKEN=<token> python jobs/submit.py ...` (or RAY_AUTH_TOKEN_PATH=<file>)."
)
TERMINAL = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED)


def with_default(overrides: list[str], key: str, value: str) -> list[str]:
    """Overrides plus key=value unless the user set the key."""
    return overrides if any(o.startswith(f"{key}=") for o in overrides) else [*overrides, f"{key}={value}"]


def default_tracking_uri(address: str) -> str | None:
    """The absolute SQLite store of this checkout when the cluster runs on this machine, else None."""
    return f"sqlite:///{REPO / 'mlflow.db'}" if urlparse(address).hostname in LOCAL_HOSTS else None


def entrypoint(overrides: list[str], tracking_uri: str, python: str = "python") -> str:
    """The shell command the job runs: the speculab CLI attached to the job's own cluster."""
    args = with_default(with_default(overrides, "cluster.address", "auto"), "tracking.uri", tracking_uri)
    return shlex.join([python, "-m", "speculab.cli", *args])


def runtime_env() -> dict:
    return {"working_dir": str(REPO), "excludes": EXCLUDES, "env_vars": {"PYTHONPATH": "platform"}}


def follow(client: JobSubmissionClient, job_id: str, poll_s: float = 2.0, timeout_s: float | None = None) -> JobStatus:
    """Poll the job's status until it ends (or timeout_s passes); returns the last status."""
    start = time.monotonic()
    status = client.get_job_status(job_id)
    while status not in TERMINAL and (timeout_s is None or time.monotonic() - start < timeout_s):
        time.sleep(poll_s)
        status = client.get_job_status(job_id)
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--address", default="http://127.0.0.1:8265", help="the cluster's Jobs API (dashboard) address")
    parser.add_argument("--tracking-uri", help="MLflow URI the cluster can reach (default: <repo>/mlflow.db if local)")
    parser.add_argument("--python", default="python", help="interpreter on the cluster (default: python on its PATH)")
    parser.add_argument("--no-wait", action="store_true", help="submit and print the job id only")
    parser.add_argument("overrides", nargs="*", help="speculab (Hydra) arguments, after --")
    args = parser.parse_args(argv)
    uri = args.tracking_uri or default_tracking_uri(args.address)
    if uri is None:
        parser.error(
            f"--tracking-uri is required for a remote cluster ({args.address}): an `mlflow server` URI "
            "the cluster reaches, or sqlite:////absolute/path on its shared filesystem"
        )
    try:
        client = JobSubmissionClient(args.address)
        job_id = client.submit_job(entrypoint=entrypoint(args.overrides, uri, args.python), runtime_env=runtime_env())
    except AuthenticationError as err:
        print(
            f"submit: the Ray head at {args.address} refused this client's token ({err.message.splitlines()[0]}).\n"
            f"{AUTH_HELP}",
            file=sys.stderr,
        )
        return 2
    print(f"submitted {job_id}; MLflow: {uri}")
    if args.no_wait:
        return 0
    status = follow(client, job_id)
    print(client.get_job_logs(job_id))
    print(f"{job_id}: {status}")
    return 0 if status == JobStatus.SUCCEEDED else 1


if __name__ == "__main__":
    sys.exit(main())
