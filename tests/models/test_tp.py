"""Loading a multi-shard checkpoint through the TP=2 path (`speculab.models.tp`) on CPU/gloo.

The tiny target is re-saved as several safetensors shards with an index (HF format keys, as
real Llama / Qwen checkpoints ship), once tied in fp32 and once untied in bf16, and so is a
random-weight Qwen3 (q/k norms, untied head, fp32) and a random Qwen3-MoE (transformers' tp_plan only:
DeepSpeed's AutoTP is refused for a mixture of experts); two ranks in two plain processes (no Ray:
the rendezvous is `join_process_group`'s) load each and score like the single-process model.

What the memory check proves: DeepSpeed builds every real tensor of a meta-device model in
`Loading.load` (one module's checkpoint tensor copied in, full size) while one shard file's
state dict is held; AutoTP then slices it. The test samples, after every `Loading.load` and
after every shard file, the bytes of all materialised (non-meta) parameter and buffer storages
of the rank's model plus the bytes of the shard being read, and asserts that this plus the
largest single checkpoint tensor (the slice being cut at an unsampled moment) stays below
the full model. It does not see allocations outside the model and the shard's state dict.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    PreTrainedModel,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

from speculab.drafting.tree import DraftTree
from speculab.models.kinds import DecoderLM
from speculab.models.roles import LMSpec, build_lm
from speculab.models.rotary import recreate_rotary_buffers
from support.models import TINY_PAIR

WORLD = 2
CONTEXTS = [[5, 17, 301, 42, 9, 77, 1000, 3], [12, 640, 2048]]


def tiny_target(tied: bool) -> PreTrainedModel:
    model = AutoModelForCausalLM.from_pretrained(TINY_PAIR / "target", dtype=torch.float32)
    if not tied:  # an lm head of its own, as in Llama-3-70B; rolled so that a wrong tie shows
        model.config.tie_word_embeddings = False
        model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().roll(1, dims=0))
    return model


# Layers outweigh embedding and head 3:1 as in real models (DeepSpeed slices the head last).
QWEN3_SHAPE = dict(
    vocab_size=4096,
    hidden_size=256,
    intermediate_size=1024,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    tie_word_embeddings=False,
)


def random_qwen3() -> PreTrainedModel:
    torch.manual_seed(0)
    return Qwen3ForCausalLM(Qwen3Config(**QWEN3_SHAPE, num_hidden_layers=6))


def random_qwen3_moe() -> PreTrainedModel:
    """The Qwen3 case's shape, a dense first layer, then mixture-of-experts layers (4 experts, 2 a token)."""
    torch.manual_seed(0)
    moe = dict(moe_intermediate_size=256, num_experts=4, num_experts_per_tok=2, mlp_only_layers=[0])
    return Qwen3MoeForCausalLM(Qwen3MoeConfig(**QWEN3_SHAPE, num_hidden_layers=3, **moe))


CASES = {  # name: (model, dtype it is saved and loaded in)
    "llama-tied-float32": (lambda: tiny_target(True), "float32"),
    "llama-untied-bfloat16": (lambda: tiny_target(False), "bfloat16"),
    "qwen3-untied-float32": (random_qwen3, "float32"),
    "qwen3moe-untied-float32": (random_qwen3_moe, "float32"),
}
TRANSFORMERS_ONLY = {"qwen3moe-untied-float32"}  # DeepSpeed AutoTP is refused for a mixture of experts
BACKENDS = ("", "-transformers")  # DeepSpeed's AutoTP, then the model's own tp_plan


def save_sharded(model: PreTrainedModel, out: Path, dtype: str) -> Path:
    """A multi-shard safetensors checkpoint: several files plus the index json."""
    model.to(getattr(torch, dtype)).save_pretrained(out, max_shard_size="2MB")
    return out


def tree() -> DraftTree:
    torch.manual_seed(1)
    return DraftTree.from_paths(torch.tensor([8, 99]), torch.randint(2, 4096, (2, 3, 3)))  # K=3 paths, L=3


def forward(spec: LMSpec) -> tuple[torch.Tensor, torch.Tensor]:
    return scores(build_lm(spec))


def scores(lm: DecoderLM) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Logits of prefill [B, V], of scoring one tree after it [B, N, V], and of a second tree after the
    cache edits of a round (commit a path per row, drop row 0) [1, N, V]."""
    lm.reset(len(CONTEXTS))
    prefill, first = lm.feed(CONTEXTS).float(), lm.extend(tree()).float()
    lm.commit(torch.tensor([[0, 1, 2], [0, 4, -1]]))  # root and two (row 0) or one (row 1) tree nodes
    lm.retain(torch.tensor([1]))
    second = DraftTree.from_paths(
        torch.tensor([7]), torch.randint(2, 4096, (1, 2, 3), generator=torch.Generator().manual_seed(2))
    )
    return prefill, first, lm.extend(second).float()


def materialised_bytes(model: torch.nn.Module) -> int:
    """Bytes of the distinct real (non-meta) storages behind a model's parameters and buffers."""
    storages = {
        t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
        for t in [*model.parameters(), *model.buffers()]
        if not t.is_meta
    }
    return sum(storages.values())


def observe_loading() -> list[int]:
    """Materialised model bytes (plus the open shard's bytes) after each DeepSpeed load step, from now on."""
    from deepspeed.module_inject import replace_module as rm
    from deepspeed.module_inject.auto_tp import Loading

    samples: list[int] = []
    seen: dict[str, torch.nn.Module] = {}
    replace_module, load = rm.replace_module, Loading.load

    def shard_step(*args, **kwargs):
        seen["model"] = kwargs["model"]
        out = replace_module(*args, **kwargs)
        samples.append(materialised_bytes(out))
        return out

    def module_load(module, state_dict, prefix, mp_group=None):
        load(module, state_dict, prefix, mp_group)
        samples.append(materialised_bytes(seen["model"]) + sum(t.nbytes for t in state_dict.values()))

    rm.replace_module, Loading.load = shard_step, staticmethod(module_load)
    return samples


def rank_main(rank: int, port: int, checkpoints: dict[str, str], out: str) -> None:
    from speculab.models.tp import join_process_group

    join_process_group(rank, WORLD, "127.0.0.1", port, "cpu")
    samples = observe_loading()
    for case, path in checkpoints.items():
        if case in TRANSFORMERS_ONLY:
            lm = build_lm(LMSpec("hf", path, CASES[case][1], threads=1, tp_size=WORLD, tp_backend="transformers"))
            torch.save({"logits": scores(lm)}, f"{out}/{case}-transformers-{rank}.pt")
            continue
        samples.clear()
        lm = build_lm(LMSpec("hf", path, CASES[case][1], threads=1, tp_size=WORLD))
        samples.append(materialised_bytes(lm.model))  # rotary buffers and the sliced lm head come last
        shapes = {name: (tuple(p.shape), p.nbytes) for name, p in lm.model.named_parameters(remove_duplicate=False)}
        torch.save({"peak": max(samples), "shapes": shapes, "logits": scores(lm)}, f"{out}/{case}-{rank}.pt")
        # transformers' own tensor parallelism, on the same world (DeepSpeed's joins torch.distributed's)
        lm = build_lm(LMSpec("hf", path, CASES[case][1], threads=1, tp_size=WORLD, tp_backend="transformers"))
        torch.save({"logits": scores(lm)}, f"{out}/{case}-transformers-{rank}.pt")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def tp_runs(tmp_path_factory) -> dict[str, tuple[Path, list[dict]]]:
    """Per case: the checkpoint and each rank's results."""
    root = tmp_path_factory.mktemp("sharded")
    checkpoints = {case: save_sharded(build(), root / case, dtype) for case, (build, dtype) in CASES.items()}
    mp.spawn(rank_main, args=(free_port(), {c: str(p) for c, p in checkpoints.items()}, str(root)), nprocs=WORLD)
    return {
        f"{case}{backend}": (path, [torch.load(root / f"{case}{backend}-{r}.pt") for r in range(WORLD)])
        for case, path in checkpoints.items()
        for backend in (BACKENDS[1:] if case in TRANSFORMERS_ONLY else BACKENDS)
    }


def log_probs(logits: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits, dim=-1)


@pytest.mark.slow
def test_the_checkpoint_is_really_sharded(tp_runs) -> None:
    for path, _ in tp_runs.values():
        assert (
            len(list(path.glob("model-*-of-*.safetensors"))) >= 5 and (path / "model.safetensors.index.json").is_file()
        )


@pytest.mark.slow
@pytest.mark.parametrize(
    "case, backend",
    [
        *((case, backend) for case in ("llama-tied-float32", "qwen3-untied-float32") for backend in BACKENDS),
        ("qwen3moe-untied-float32", "-transformers"),
    ],
)
def test_tp2_sharded_fp32_logits_equal_the_single_process_model(tp_runs, case: str, backend: str) -> None:
    """Both backends (DeepSpeed's AutoTP, and with `-transformers` the model's own tp_plan; a mixture of
    experts on the latter only), through a tree pass after the prefill and another after a round's cache edits."""
    path, ranks = tp_runs[case + backend]
    reference = forward(LMSpec("hf", str(path), "float32", threads=1))
    for rank in ranks:
        for got, want in zip(rank["logits"], reference):
            torch.testing.assert_close(log_probs(got), log_probs(want), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_tp2_sharded_bf16_untied_logits_match_the_single_process_model(tp_runs) -> None:
    """bf16 rounds differently once partial sums are all-reduced: both bf16 models are held to
    the same weights computed in fp32, the TP one within twice the single-process error."""
    path, ranks = tp_runs["llama-untied-bfloat16"]
    torch.testing.assert_close(ranks[1]["logits"], ranks[0]["logits"], rtol=0, atol=0)
    single = forward(LMSpec("hf", str(path), "bfloat16", threads=1))
    exact = forward(LMSpec("hf", str(path), "float32", threads=1))
    for got, want, fp32 in zip(ranks[0]["logits"], single, exact):
        single_error = (log_probs(want) - log_probs(fp32)).abs().max()
        assert (log_probs(got) - log_probs(fp32)).abs().max() <= 2 * single_error


@pytest.mark.slow
def test_no_rank_materialises_the_full_model(tp_runs) -> None:
    for case, (path, ranks) in tp_runs.items():
        if case not in CASES:  # transformers' tp_plan: its loading is measured in benchmarks/runtime.py
            continue
        full = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, CASES[case][1]))
        full_shapes = {name: tuple(p.shape) for name, p in full.named_parameters(remove_duplicate=False)}
        full_bytes = sum(p.nbytes for p in full.parameters())
        largest = max(p.nbytes for p in full.parameters())
        sharded = {name for name, (shape, _) in ranks[0]["shapes"].items() if shape != full_shapes[name]}
        sharded_full_bytes = sum(
            p.nbytes for name, p in full.named_parameters(remove_duplicate=False) if name in sharded
        )
        per_rank = [sum(rank["shapes"][name][1] for name in sharded) for rank in ranks]
        assert (
            any("q_proj" in n for n in sharded)
            and any("down_proj" in n for n in sharded)
            and "lm_head.weight" in sharded
        )
        assert sum(per_rank) == sharded_full_bytes  # a partition: together the ranks hold each slice once
        assert all(0.4 < b / sharded_full_bytes < 0.6 for b in per_rank), (case, per_rank, sharded_full_bytes)
        for rank in ranks:
            assert rank["peak"] + largest < full_bytes, (case, rank["peak"], largest, full_bytes)
        held = [sum(nbytes for _, nbytes in rank["shapes"].values()) for rank in ranks]
        print(
            f"{case}: {len(list(path.glob('model-*')))} shards, full {full_bytes} B, per-rank peak "
            f"{[rank['peak'] for rank in ranks]} B, held after loading {held} B"
        )  # README figures (pytest -s)


FRESH_RANK = """
import sys
import torch
from speculab.models.tp import join_process_group, load_tp_causal_lm

assert "transformers.masking_utils" not in sys.modules  # as in a fresh Ray actor
rank = int(sys.argv[1])
join_process_group(rank, {world}, "127.0.0.1", {port}, "cpu")
model = load_tp_causal_lm({path!r}, "float32", "cpu", {world})
torch.save(model(torch.tensor([{context}])).logits, f"{out}/{{rank}}.pt")
"""


@pytest.mark.slow
def test_ranks_load_in_processes_that_imported_no_modelling_code(tmp_path: Path) -> None:
    """A Ray actor's first transformers modelling import happens inside the meta-device build:
    under transformers 5.x that import pulls in torch._dynamo, which refused DeepSpeed's
    OnDevice patch of Tensor.__new__ (the load failed with "Signature mismatch")."""
    path, context = TINY_PAIR / "target", CONTEXTS[0]
    code = FRESH_RANK.format(world=WORLD, port=free_port(), path=str(path), context=context, out=tmp_path)
    ranks = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), str(rank)]) for rank in range(WORLD)]
    try:
        assert [rank.wait(timeout=240) for rank in ranks] == [0] * WORLD  # under the test's 300 s
    finally:  # a rank that failed leaves the other waiting at the rendezvous
        for rank in ranks:
            rank.kill()
    want = log_probs(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)(torch.tensor([context])).logits)
    for rank in range(WORLD):
        torch.testing.assert_close(log_probs(torch.load(tmp_path / f"{rank}.pt")), want, rtol=1e-5, atol=1e-5)


LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}  # Llama-3.1-70B's config.json
YARN_ROPE = {
    "rope_type": "yarn",
    "rope_theta": 1000000.0,
    "factor": 4.0,
    "original_max_position_embeddings": 32768,
}  # Qwen3 long context


@pytest.mark.parametrize(
    "config",
    [
        LlamaConfig(
            hidden_size=128,
            num_attention_heads=4,
            num_hidden_layers=1,
            max_position_embeddings=131072,
            rope_parameters=LLAMA3_ROPE,
        ),
        Qwen3Config(
            hidden_size=128,
            num_attention_heads=4,
            head_dim=32,
            num_hidden_layers=1,
            max_position_embeddings=131072,
            rope_parameters=YARN_ROPE,
        ),
        Qwen3Config(hidden_size=128, num_attention_heads=4, head_dim=32, num_hidden_layers=1),
    ],
    ids=["llama3", "yarn", "default"],
)
def test_rotary_buffers_of_a_meta_built_model_are_recreated_like_a_normal_build(config) -> None:
    reference = AutoModelForCausalLM.from_config(config).model.rotary_emb
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    recreate_rotary_buffers(model, "cpu")
    rotary = model.model.rotary_emb
    torch.testing.assert_close(rotary.inv_freq, reference.inv_freq, rtol=0, atol=0)
    torch.testing.assert_close(rotary.original_inv_freq, reference.original_inv_freq, rtol=0, atol=0)
    assert rotary.attention_scaling == reference.attention_scaling


def test_recreated_rotary_buffers_live_on_the_device_asked_for() -> None:
    """On a GPU a CPU `inv_freq` costs a host copy every forward and fails under capture; the meta
    device stands in for the GPU here. transformers 5.17 warns that its `device` argument goes away."""
    model = tiny_target(tied=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        recreate_rotary_buffers(model, "meta")
    rotary = model.model.rotary_emb
    assert rotary.inv_freq.device.type == rotary.original_inv_freq.device.type == "meta"
    assert rotary.inv_freq.dtype == torch.float32
