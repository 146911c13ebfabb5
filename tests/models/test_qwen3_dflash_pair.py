"""The Qwen3 + DFlash-b16 pair as published, in its small shape (tools/random_dflash_pair.py):
the layouts load, the Qwen3 target runs the lean stack, greedy DDTree decoding equals plain
transformers, and `model=qwen3-8b_dflash` decodes end to end inline and on Ray into MLflow.
The same script's 8B shape runs the same code on a GPU (README, "On a GPU")."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from speculab.core.engine import decode
from speculab.drafting.ddtree import TreeDrafter, tree_builder
from speculab.models import DraftModel, LMSpec, TreeTarget
from speculab.models.dflash_layout import read_layout
from speculab.models.hf import TreeLM, load_causal_lm
from speculab.registry import get_verifier
from support.cli import runs, speculab
from support.engine import PROMPTS, greedy_reference, settings
from support.models import REPO


def tool():
    spec = importlib.util.spec_from_file_location("random_dflash_pair", REPO / "tools" / "random_dflash_pair.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass resolves annotations through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(target, draft) small-shape dirs; the target in three shards, as large checkpoints come."""
    module = tool()
    out = tmp_path_factory.mktemp("qwen3_dflash")
    return module.write_pair(out, module.SHAPES["small"], module.torch.float32, "cpu", shard_bytes=20 * 2**20)


@pytest.fixture(scope="module")
def dflash2_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The same target with a DFlash2 drafter (`--dflash2`)."""
    module = tool()
    out = tmp_path_factory.mktemp("qwen3_dflash2")
    return module.write_pair(out, module.SHAPES["small"], module.torch.float32, "cpu", 20 * 2**20, dflash2=True)


def test_the_dflash2_drafter_in_vllm_s_layout(dflash2_pair) -> None:
    """Its settings in dflash_config and every DFlash2 tensor under vLLM's names (8 of them a layer)."""
    layout = read_layout(dflash2_pair[1])
    assert layout.block_size == 8 and layout.dflash2 is not None and layout.dflash2.selector_top_k == 16
    keys = set(json.loads((dflash2_pair[1] / "model.safetensors.index.json").read_text())["weight_map"])
    assert {
        "layers.1.attention_conv.base_kernel",
        "layers.1.mlp_conv.kernel_projection.weight",
        "candidate_selector.predecessor_codebook",
        "candidate_selector.successor_codebook",
        "candidate_selector.hidden_projection.weight",
    } <= keys


def test_greedy_ddtree_over_the_selector_equals_transformers(dflash2_pair) -> None:
    target_path, draft_path = map(str, dflash2_pair)
    ids = read_layout(draft_path).target_layer_ids
    target = TreeTarget(LMSpec("hf", target_path, feature_layers=ids))
    source = DraftModel(LMSpec("dflash", draft_path, target_path=target_path))
    drafter = TreeDrafter(source, tree_builder("best_first", 32))
    run = decode(target, drafter, get_verifier("ddtree"), PROMPTS, settings(K=1, L=7, batch=2, max_new=10))
    assert [p.tokens for p in run.prompts] == [greedy_reference(target_path, prompt, 10) for prompt in PROMPTS]


def test_the_published_layouts(pair) -> None:
    target, draft = pair
    index = json.loads((target / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) == 3 and "lm_head.weight" in index["weight_map"]
    config = json.loads((draft / "config.json").read_text())
    assert config["block_size"] == 16 and "block_size" not in config["dflash_config"]
    layout = read_layout(draft)
    assert layout.target_layer_ids == (1, 3) and layout.block_size == 16 and layout.mask_token_id == 151669
    assert TreeLM(load_causal_lm(target)).lean is not None  # Qwen3 runs the lean stack


def test_greedy_ddtree_on_the_qwen3_pair_equals_transformers(pair) -> None:
    target_path, draft_path = map(str, pair)
    ids = read_layout(draft_path).target_layer_ids
    target = TreeTarget(LMSpec("hf", target_path, feature_layers=ids))
    source = DraftModel(LMSpec("dflash", draft_path, target_path=target_path))
    run = decode(
        target,
        TreeDrafter(source, tree_builder("best_first", 32)),
        get_verifier("ddtree"),
        PROMPTS,
        settings(K=1, L=15, batch=2, max_new=10),
    )
    assert [p.tokens for p in run.prompts] == [greedy_reference(target_path, prompt, 10) for prompt in PROMPTS]


@pytest.mark.slow
def test_a_dflash2_drafter_decodes_end_to_end_into_mlflow(dflash2_pair, tmp_path: Path) -> None:
    """model=qwen3-8b_dflash with a DFlash2 drafter at the small shape, DDTree over the selector and SpecTr over
    its walks."""
    store = tmp_path / "mlflow.db"
    args = [
        "-m",
        "model=qwen3-8b_dflash",
        f"model.target_path={dflash2_pair[0]}",
        f"model.draft_path={dflash2_pair[1]}",
        "model.device=cpu",
        "model.dtype=float32",
        "drafter=dflash2",
        "algorithm=ddtree,spectr",
        "algorithm.K=1",
        "runtime=inline",
        "dataset.num_prompts=2",
        "sampling.max_new_tokens=6",
        "baseline_hf=false",
        f"tracking.uri=sqlite:///{store}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    ]
    result = speculab(args, tmp_path)
    assert result.returncode == 0, result.stderr
    points = [run for run in runs(store) if "algorithm.name" in run.data.params]
    assert {run.data.params["algorithm.name"] for run in points} == {"ddtree", "spectr"}
    assert all(run.info.status == "FINISHED" for run in points)
    by_name = {run.data.params["algorithm.name"]: run for run in points}
    assert by_name["ddtree"].data.params["algorithm.L"] == "7"  # the block's drafts, as DFlash's
    assert by_name["spectr"].data.metrics["count/generated_tokens"] == 12


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["inline", "ray"])
def test_the_preset_decodes_end_to_end_into_mlflow(pair, tmp_path: Path, runtime: str) -> None:
    store = tmp_path / "mlflow.db"
    args = [
        "model=qwen3-8b_dflash",
        f"model.target_path={pair[0]}",
        f"model.draft_path={pair[1]}",
        "model.device=cpu",
        "model.dtype=float32",
        "drafter=dflash",
        "algorithm=ddtree",
        "algorithm.budget=16",
        f"runtime={runtime}",
        "dataset.num_prompts=2",
        "sampling.max_new_tokens=6",
        "baseline_hf=false",
        f"tracking.uri=sqlite:///{store}",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    result = speculab(args, tmp_path)
    assert result.returncode == 0, result.stderr
    (point,) = runs(store)
    assert point.info.status == "FINISHED" and point.data.params["algorithm.L"] == "15"
    assert point.data.metrics["count/generated_tokens"] == 12 and point.data.metrics["tree/nodes_mean"] == 17
