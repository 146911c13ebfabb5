"""A sweep point that fails mid-run: its run is FAILED, the next points run, the parent ends FAILED saying
which point failed and why, the command exits 1, and `resume=true` reruns the failed point alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from mlflow.tracking import MlflowClient
from safetensors.torch import load_file, save_file

from support.cli import speculab

BROKEN_TENSOR = "model.norm.weight"


def broken_copy(pair: tuple[Path, Path], where: Path) -> Path:
    """The target with a NaN in one tensor: a checkpoint whose config and headers pass the checks made before
    any weight loads, and that fails only as its values load, mid-sweep, as a corrupted upload would."""
    shutil.copytree(pair[0], where)
    tensors = load_file(where / "model.safetensors")
    tensors[BROKEN_TENSOR][0] = torch.nan
    save_file(tensors, where / "model.safetensors", metadata={"format": "pt"})
    return where


def sweep(pair: tuple[Path, Path], targets: list[Path], uri: str, *extra: str) -> list[str]:
    return [
        "-m",
        f"model.target_path={','.join(map(str, targets))}",
        f"model.draft_path={pair[1]}",
        "runtime=inline",
        "dataset.num_prompts=2",
        "sampling.max_new_tokens=8",
        "measure.repeats=1",
        "baseline_hf=false",
        f"tracking.uri={uri}",
        *extra,
    ]


def test_a_failed_point_is_filed_and_the_sweep_goes_on_then_resume_reruns_it(
    random_llama_pair: tuple[Path, Path], tmp_path: Path
) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    broken = broken_copy(random_llama_pair, tmp_path / "broken")
    first = speculab(sweep(random_llama_pair, [broken, random_llama_pair[0]], uri), tmp_path)
    assert first.returncode == 1, first.stderr
    assert "speculab: point failed: " in first.stderr and "; the sweep goes on" in first.stderr
    assert f"tensor {BROKEN_TENSOR} holds NaN or inf values" in first.stderr  # the file and tensor, in one line
    assert "speculab: 1 of 2 points failed" in first.stderr and "Traceback" not in first.stderr

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("speculab")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])
    parent, *points = runs
    assert parent.data.tags["speculab.kind"] == "sweep" and parent.info.status == "FAILED"
    assert [p.data.params["model.target_path"] for p in points] == [str(broken), str(random_llama_pair[0])]
    assert [p.info.status for p in points] == ["FAILED", "FINISHED"]  # the second point ran after the first failed
    assert parent.data.metrics["sweep/failed_points"] == 1
    description = parent.data.tags["mlflow.note.content"]
    assert description.startswith("**1 of 2 points failed** (") and "`resume=true` reruns them" in description

    shutil.copy(random_llama_pair[0] / "model.safetensors", broken / "model.safetensors")  # the cause fixed
    again = speculab(sweep(random_llama_pair, [broken, random_llama_pair[0]], uri, "resume=true"), tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("already finished") == 1  # the finished point is skipped, the failed one reruns
    newest = client.search_runs(
        [experiment.experiment_id], "tags.`speculab.kind` = 'sweep'", order_by=["start_time DESC"]
    )
    assert newest[0].info.status == "FINISHED" and "points failed" not in newest[0].data.tags["mlflow.note.content"]
