"""Where and with what a run was made: the tags every point and every sweep parent carry.

Git commit and dirtiness, the versions of the libraries that decide the numbers, CUDA, the CPU
and GPUs of the machine that records the run, its torch threads, the Ray job it ran in and its
output directory. Everything is read cheaply (package metadata, not imports; one `git` call
each) and nothing here raises: a missing git, package or GPU becomes "unknown" or "none".

A Ray job runs in Ray's copy of the working directory, which has no `.git`: `jobs/submit.py`
computes the commit on the submitting machine and passes it in `SPECULAB_GIT_COMMIT` and
`SPECULAB_GIT_DIRTY`, which win over asking git here.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import time
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from speculab.config import PROJECT_ROOT, local_gpus

COMMIT_ENV, DIRTY_ENV = "SPECULAB_GIT_COMMIT", "SPECULAB_GIT_DIRTY"
RAY_JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # set by Ray's job supervisor for the job's driver
JOB_TAG = "provenance.ray_job_id"  # the Ray job's submission id (`ray job logs <id>`), or "none"
COMMIT_TAG = "mlflow.source.git.commit"  # MLflow's own tag: its UI shows it on the run's page
PACKAGES = ("torch", "transformers", "deepspeed", "ray", "mlflow")


def git(root: Path, *args: str) -> str | None:
    """`git <args>` in ``root``: its stdout, or None when git or the repository is not there."""
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_state(root: Path, env: dict[str, str]) -> tuple[str, str]:
    """(commit, "true"/"false"/"unknown" dirty): handed in by the submitter, else asked of git."""
    if env.get(COMMIT_ENV):
        return env[COMMIT_ENV], env.get(DIRTY_ENV, "unknown")
    commit = git(root, "rev-parse", "HEAD")
    if commit is None:
        return "unknown", "unknown"
    changes = git(root, "status", "--porcelain", "--untracked-files=no")  # untracked outputs are not code
    return commit, "unknown" if changes is None else str(bool(changes)).lower()


def package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "none"


def cpu_model() -> str:
    """The CPU's marketing name (Linux's /proc/cpuinfo), else what `platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cuda_version() -> str:
    import torch  # already imported by every run; the version string costs nothing more

    return torch.version.cuda or "none"


def ray_job_id(env: dict[str, str]) -> str:
    """The submission id of the Ray job this process is the driver of, or "none" outside a job.
    Ray's job supervisor hands the driver its id in the job config it puts in the environment."""
    try:
        metadata = json.loads(env.get(RAY_JOB_CONFIG_ENV, "{}")).get("metadata") or {}
    except json.JSONDecodeError:
        return "none"
    return str(metadata.get("job_submission_id") or "none")


@cache
def machine_tags() -> dict[str, str]:
    """What does not change while the process runs (computed once per process: a sweep asks per point)."""
    commit, dirty = git_state(PROJECT_ROOT, dict(os.environ))
    return {
        COMMIT_TAG: commit,
        "provenance.git_dirty": dirty,
        **{f"provenance.{name}": package_version(name) for name in PACKAGES},
        "provenance.cuda": cuda_version(),
        "provenance.host": socket.gethostname(),
        "provenance.cpu": cpu_model(),
        "provenance.gpus": ", ".join(local_gpus()) or "none",
    }


def provenance_tags(output_dir: Path) -> dict[str, str]:
    """The tags of a run recorded by this process, whose files go to ``output_dir``."""
    import torch

    return {
        **machine_tags(),
        "provenance.torch_threads": str(torch.get_num_threads()),  # this process's; models may run in others
        JOB_TAG: ray_job_id(dict(os.environ)),
        "provenance.output_dir": str(output_dir.resolve()),
    }


def launch_label(env: dict[str, str], sweep: str) -> str:
    """What tells two launches of the same sweep apart in its parent's name: the Ray job id in a
    job, else the local start time and the `sweep` id (its directory's suffix), since two sweeps
    started in the same second are not rare on a shared machine."""
    job = ray_job_id(env)
    return job if job != "none" else f"{time.strftime('%Y-%m-%d %H:%M:%S')} {sweep}"
