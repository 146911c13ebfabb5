"""Every decode path of the tiny pair on one CUDA GPU, in float32: tree attention against the
CPU, greedy output equal to transformers' `generate` on the same GPU (batches of prompts of
different lengths), every verifier and drafter (i.i.d. paths, DDTree on the parallel drafter,
DFlash chain and DDTree), inline and on Ray with both actors sharing the GPU, and what a GPU
run logs to MLflow."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient
from transformers import AutoTokenizer

from speculab.config.cluster import Placement
from speculab.core.autoregressive import autoregressive
from speculab.core.engine import DecodeSettings, decode
from speculab.data import encode_prompt, load_prompts
from speculab.drafting.ddtree import MarginalPathDrafter, TreeDrafter, tree_builder
from speculab.drafting.sampling import SamplingParams
from speculab.drafting.tree import DraftTree
from speculab.models import DraftModel, LMSpec, TreeTarget
from speculab.models.hf import TreeLM, load_causal_lm
from speculab.registry import PATH_ALGORITHMS, get_verifier
from speculab.runtime import start_models
from support.cli import file_store, speculab
from support.models import TINY_PAIR

pytestmark = pytest.mark.gpu

TARGET, DRAFT = str(TINY_PAIR / "target"), str(TINY_PAIR / "draft")


def settings(temperature: float = 0.0, batch: int = 4, max_new: int = 24, K: int = 2, L: int = 4) -> DecodeSettings:
    return DecodeSettings(K, L, SamplingParams(temperature), max_new, batch, 0, EOS)


EOS = AutoTokenizer.from_pretrained(TARGET).eos_token_id


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    """Eight HumanEval prompts: different lengths, so batches hold padded rows."""
    tokenizer = AutoTokenizer.from_pretrained(TARGET)
    return [encode_prompt(p, tokenizer) for p in load_prompts("humaneval", 8)]


@pytest.fixture(scope="module")
def roles() -> tuple[TreeTarget, DraftModel]:
    return TreeTarget(LMSpec("hf", TARGET, device="cuda")), DraftModel(LMSpec("hf", DRAFT, device="cuda"))


def tokens(run) -> list[list[int]]:
    return [p.tokens for p in run.prompts]


def test_tree_attention_commit_repack_and_retain_match_the_cpu() -> None:
    """On a GPU: the target's tree attention, step by step (two contexts fed, a tree scored, a commit's
    repack, a retain that swaps the rows, a feed after), gives the CPU's logits to 1e-4."""
    torch.manual_seed(0)
    lms = {device: TreeLM(load_causal_lm(TARGET, device=device)) for device in ("cpu", "cuda")}
    contexts = [[5, 17, 301, 42, 9, 77, 1000, 3], [12, 640, 2048]]
    tree = DraftTree.from_paths(torch.tensor([8, 99]), torch.randint(2, 4096, (2, 3, 4)))
    keep = torch.tensor([[0, 2, 5], [0, 1, -1]])
    out = {}
    for device, lm in lms.items():
        lm.reset(2)
        first = lm.feed(contexts)
        scored = lm.extend(tree)
        lm.commit(keep)
        lm.retain(torch.tensor([1, 0]))
        after = lm.feed([[7, 8], [9]])
        out[device] = [first, scored, after]
    for cpu, cuda in zip(out["cpu"], out["cuda"]):
        assert cuda.device.type == "cuda"
        torch.testing.assert_close(cuda.cpu(), cpu, rtol=1e-4, atol=1e-4)


def test_greedy_decoding_on_cuda_equals_generate_on_cuda(roles, prompts) -> None:
    """On a GPU, T = 0: the autoregressive baseline and every path verifier decode the tokens of
    transformers' `generate` on the same GPU, in batches of prompts of different lengths (padded rows)."""
    target, drafter = roles
    s = settings()
    reference = [list(t) for t in target.hf_generate(prompts, s).tokens]  # baseline_hf, on the target's GPU
    assert tokens(autoregressive(target, prompts, s)) == reference
    for name in PATH_ALGORITHMS:
        assert tokens(decode(target, drafter, get_verifier(name), prompts, s)) == reference, name


def test_compiled_generate_on_cuda_decodes_what_eager_does(roles, prompts) -> None:
    """`baseline_hf` on a GPU (measure.generate=auto): static cache + inductor + CUDA graphs, warmed
    untimed at each batch size, gives eager generate's greedy tokens."""
    from speculab.models.generate import GenerateForm

    target, _ = roles
    s = settings(batch=3)
    compiled = target.hf_generate(prompts, s, GenerateForm.of("compiled", prompts, s.max_new_tokens))
    assert compiled.tokens == target.hf_generate(prompts, s).tokens
    assert target.generate_warmed == {3, 2}  # 8 prompts: units of 3, 3 and 2


@pytest.mark.parametrize("temperature", [0.6, 1.0])
def test_every_verifier_samples_on_cuda(roles, prompts, temperature: float) -> None:
    """On a GPU, T = 0.6 and 1: every path verifier decodes its batches there, each row to its full length
    or to EOS (the draws' distribution is test_verify_cuda's)."""
    target, drafter = roles
    for name in PATH_ALGORITHMS:
        run = decode(target, drafter, get_verifier(name), prompts, settings(temperature, max_new=16))
        assert all(len(p.tokens) == 16 or p.stop == "eos" for p in run.prompts), name


def test_ddtree_on_the_parallel_drafter_and_dflash_keep_greedy_output(roles, prompts) -> None:
    """On a GPU, T = 0: DDTree on the parallel drafter, DDTree on DFlash (best-first and chain trees) and
    DFlash's marginals as one path under block verification all decode the autoregressive tokens."""
    target, _ = roles
    s = settings(L=7, max_new=24, K=1)
    reference = tokens(autoregressive(target, prompts, s))
    parallel = TreeDrafter(
        DraftModel(LMSpec("parallel", str(TINY_PAIR / "parallel"), device="cuda")), tree_builder("best_first", 32)
    )
    assert tokens(decode(target, parallel, get_verifier("ddtree"), prompts, s)) == reference
    dflash_target = TreeTarget(LMSpec("hf", TARGET, device="cuda", feature_layers=(2, 4, 6)))
    dflash = DraftModel(LMSpec("dflash", str(TINY_PAIR / "dflash"), device="cuda", target_path=TARGET))
    for builder in ("best_first", "chain"):
        drafter = TreeDrafter(dflash, tree_builder(builder, 32))
        assert tokens(decode(dflash_target, drafter, get_verifier("ddtree"), prompts, s)) == reference, builder
    one_path = MarginalPathDrafter(dflash, torch.Generator())
    assert tokens(decode(dflash_target, one_path, get_verifier("block"), prompts, s)) == reference


@pytest.mark.usefixtures("ray_pool")
def test_ray_with_both_actors_on_one_gpu_decodes_like_inline(roles, prompts) -> None:
    """At T = 1: the engine draws on the CPU and each drafter on its GPU in both runtimes, so a seed
    gives the same tokens (the loop verifies on the GPU inline, on the CPU on Ray)."""
    inline_target, inline_drafter = roles
    s = settings(1.0)
    reference = tokens(decode(inline_target, inline_drafter, get_verifier("gbv"), prompts, s))
    target, drafter = start_models(
        "ray", LMSpec("hf", TARGET, device="cuda"), LMSpec("hf", DRAFT, device="cuda"), Placement(draft_gpu=0.5)
    )
    assert tokens(decode(target, drafter, get_verifier("gbv"), prompts, s)) == reference


def test_a_gpu_run_logs_its_device_and_memory_peaks(tmp_path: Path) -> None:
    """On a GPU: `speculab` on CUDA, inline and on Ray (`cluster=gpu1`), ends 0 and logs the devices it ran
    on (`cuda:0 (<the GPU's name>)`), CUDA memory peaks above 0, its block efficiency and generate's speed."""
    uri = file_store(tmp_path)
    for runtime in ("inline", "ray"):
        args = [f"runtime={runtime}", "model.device=cuda", "dataset.num_prompts=2", "sampling.max_new_tokens=16"]
        result = speculab([*args, f"tracking.uri={uri}", "cluster=gpu1"], tmp_path)
        assert result.returncode == 0, result.stderr
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("speculab").experiment_id])
    assert len(runs) == 2
    for run in runs:
        assert run.data.tags["device"].startswith("cuda:0 (") and run.data.tags["draft_device"].startswith("cuda")
        peaks = [key for key in run.data.metrics if key.startswith("memory/peak_mb_")]
        assert peaks and all(run.data.metrics[key] > 0 for key in peaks), peaks
        assert run.data.metrics["block_efficiency"] >= 1 and "baseline_hf/tokens_per_s" in run.data.metrics
