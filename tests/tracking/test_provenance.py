"""The provenance tags every run carries: complete, all strings, and no failure without git or Ray."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from speculab.tracking.provenance import (
    COMMIT_ENV,
    COMMIT_TAG,
    DIRTY_ENV,
    JOB_TAG,
    RAY_JOB_CONFIG_ENV,
    git_state,
    launch_label,
    provenance_tags,
    ray_job_id,
)

KEYS = {
    COMMIT_TAG,
    "provenance.git_dirty",
    "provenance.torch",
    "provenance.transformers",
    "provenance.deepspeed",
    "provenance.ray",
    "provenance.mlflow",
    "provenance.cuda",
    "provenance.host",
    "provenance.cpu",
    "provenance.gpus",
    "provenance.torch_threads",
    JOB_TAG,
    "provenance.output_dir",
}


def test_every_tag_is_there_as_a_string(tmp_path: Path) -> None:
    tags = provenance_tags(tmp_path / "out")
    assert set(tags) == KEYS and all(isinstance(value, str) and value for value in tags.values())
    assert tags["provenance.output_dir"] == str((tmp_path / "out").resolve())
    assert int(tags["provenance.torch_threads"]) >= 1


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def test_git_state_of_a_clean_and_a_dirty_tree_and_of_no_repository(tmp_path: Path) -> None:
    assert git_state(tmp_path, {}) == ("unknown", "unknown")  # a job's working-dir copy has no .git
    git(tmp_path, "init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    git(tmp_path, "add", "code.py")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    commit = git(tmp_path, "rev-parse", "HEAD")
    (tmp_path / "notes.txt").write_text("untracked outputs do not make the code dirty\n")
    assert git_state(tmp_path, {}) == (commit, "false")
    (tmp_path / "code.py").write_text("x = 2\n")
    assert git_state(tmp_path, {}) == (commit, "true")


def test_the_submitters_commit_wins_over_git() -> None:
    assert git_state(Path("/nonexistent"), {COMMIT_ENV: "abc123", DIRTY_ENV: "true"}) == ("abc123", "true")


def test_ray_job_id_comes_from_rays_job_config_and_names_the_sweep() -> None:
    env = {RAY_JOB_CONFIG_ENV: json.dumps({"runtime_env": {}, "metadata": {"job_submission_id": "raysubmit_1"}})}
    assert ray_job_id(env) == "raysubmit_1" and launch_label(env, "ab12cd34") == "raysubmit_1"
    assert ray_job_id({}) == "none" and ray_job_id({RAY_JOB_CONFIG_ENV: "not json"}) == "none"
    label = launch_label({}, "ab12cd34")  # outside a job: the start time, 20YY-MM-DD HH:MM:SS, and the sweep id
    assert label[:2] == "20" and label.endswith(" ab12cd34")
