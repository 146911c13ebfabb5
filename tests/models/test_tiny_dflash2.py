"""The shipped tiny DFlash2 drafter (assets/tiny-pycode/dflash2, `jobs/train_dflash.py --dflash2`): it loads
as DFlash2 in vLLM's layout, in half precision on disk; and a sweep over drafter=dflash,dflash2 on the tiny
pair (`model.drafters` names each one's checkpoint) decodes both with DDTree at T = 0 and T = 1 into MLflow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from speculab.models.dflash import DFlash2LM, load_dflash_lm
from support.cli import runs, speculab
from support.models import TINY_PAIR

DFLASH2 = TINY_PAIR / "dflash2"


def test_the_tiny_dflash2_loads_in_vllm_s_layout() -> None:
    config = json.loads((DFLASH2 / "config.json").read_text())
    assert config["dtype"] == "float16" and config["dflash_config"]["selector_top_k"] == 8
    assert isinstance(load_dflash_lm(DFLASH2, TINY_PAIR / "target"), DFlash2LM)
    stats = json.loads((DFLASH2 / "train_stats.json").read_text())
    assert "--dflash2" in stats["command"] and stats["steps_done"] >= 1


@pytest.mark.slow
def test_a_sweep_over_both_drafters_decodes_at_t0_and_t1(tmp_path: Path) -> None:
    store = tmp_path / "mlflow.db"
    args = [
        "-m",
        "model=tiny-pycode_dflash",
        "drafter=dflash,dflash2",
        "algorithm=ddtree",
        "algorithm.budget=16",
        "sampling.temperature=0,1",
        "runtime=inline",
        "dataset.num_prompts=2",
        "sampling.max_new_tokens=8",
        "baseline_hf=false",
        f"tracking.uri=sqlite:///{store}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    ]
    result = speculab(args, tmp_path)
    assert result.returncode == 0, result.stderr
    points = [run for run in runs(store) if "drafter.name" in run.data.params]
    shapes = {(run.data.params["drafter.name"], run.data.params["sampling.temperature"]) for run in points}
    assert shapes == {("dflash", "0.0"), ("dflash", "1.0"), ("dflash2", "0.0"), ("dflash2", "1.0")}
    assert all(run.info.status == "FINISHED" and run.data.metrics["count/generated_tokens"] == 16 for run in points)
    drafts = {run.data.params["drafter.name"]: run.data.params["model.draft_dir"] for run in points}
    assert drafts["dflash2"].endswith("dflash2") and drafts["dflash"].endswith("dflash")
