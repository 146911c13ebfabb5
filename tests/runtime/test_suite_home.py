"""The suite in any home: a user's `~/.ray/auth_token` (as `ray get-auth-token --generate` writes it, README
section 6) changes nothing, since the suite sets Ray's auth mode and token for itself (`support.ray_auth`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import ray

from speculab.runtime.groups import GroupPool
from support.models import REPO


def test_the_sessions_cluster_answers(ray_cluster: GroupPool) -> None:
    assert ray.get(ray.put(41)) + 1 == 42


def test_the_suite_runs_where_the_user_keeps_a_ray_token(tmp_path: Path) -> None:
    """The whole suite collected (as `make test` does: a module read on the way reads Ray's auth mode, and
    `jobs/submit.py`, imported by its test, turns token mode on), then a test on the session's cluster, in
    a home with a token of its own: the cluster starts, and the home's `~/.ray` is left as it was."""
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("the-users-own-token-0123456789abcdef")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")} | {"HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q", "tests"]
        + ["-k", "test_the_sessions_cluster_answers"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
    assert [p.name for p in (home / ".ray").iterdir()] == ["auth_token"]
    assert (home / ".ray" / "auth_token").read_text() == "the-users-own-token-0123456789abcdef"
