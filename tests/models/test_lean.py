"""The lean stacks of every family: the same logits as transformers' own forward, step by step (bit for
bit but in multi-query Falcon), and the fixed-shape passes' logits; the models the lean layers would not
reproduce keep transformers' modules."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache, PreTrainedModel

from speculab.drafting.tree import DraftTree
from speculab.models import LMSpec, TreeTarget
from speculab.models.families import lean_stack, own_decoder, runs_lean
from speculab.models.hf import TreeLM, load_causal_lm
from speculab.models.lean import FusedQKV, decoder_forward, lean_layers
from support.models import VOCAB, save_random_lm, save_random_opt

# The families support.models does not save, beyond the shared shape (3 layers, 64 wide, 4 heads): each
# one's MLP width under its own name, 2 key heads where the family groups them.
GROUPED = {"num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128}
SHAPES: dict[str, dict[str, object]] = {
    "mistral": GROUPED,
    "qwen2": GROUPED,  # q, k, v biases
    "gemma": GROUPED,  # (1 + w) RMSNorm, GELU-tanh, embeddings scaled
    "phi3": GROUPED | {"partial_rotary_factor": 0.5},  # fused qkv and gate-up; the rotary over half a head
    "gpt2": {"n_inner": 128},  # Conv1D, learned positions, gelu_new
    "gpt_neox": {"intermediate_size": 128},  # per-head fused qkv, the rotary over a quarter, parallel residual
    "gpt_neox-sequential": {"intermediate_size": 128, "use_parallel_residual": False},
    "falcon": {"ffn_hidden_size": 128},  # Falcon-7B: one key head, one norm, attention and MLP in parallel
    "falcon-40b": {"ffn_hidden_size": 128, "new_decoder_architecture": True, "num_kv_heads": 2},
}
# Multi-query Falcon: the lean attention groups the heads over the one key head, transformers broadcasts
# it; float32 rounding apart
ROUNDED = {"falcon"}


def random_model(family: str, **overrides: object) -> PreTrainedModel:
    """A random-weight model of a `SHAPES` family ("gpt_neox-sequential": that family, that variant)."""
    torch.manual_seed(4)
    shared = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=3, num_attention_heads=4)
    shared |= dict(max_position_embeddings=256, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    config = AutoConfig.for_model(family.partition("-")[0], **shared, **SHAPES[family] | overrides)
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()


def assert_same(mine: torch.Tensor, theirs: torch.Tensor, family: str) -> None:
    if family in ROUNDED:
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=0)
        assert torch.equal(mine.argmax(-1), theirs.argmax(-1))
    else:
        assert torch.equal(mine, theirs)


def lean_logits(model, stack, tokens, cache, positions, mask, states=None) -> torch.Tensor:
    decoder = own_decoder(model, stack)
    assert decoder is not None

    def layers(hidden, cos, sin, outputs):
        return lean_layers(
            stack, hidden, cos, sin, mask, cache.layers.__getitem__, outputs if states is None else states
        )

    return decoder_forward(decoder, layers, tokens, positions, (), lambda hidden: hidden)[0]


@pytest.fixture(scope="module", params=["llama", "qwen3", "qwen3_moe", "opt", "opt-350m", *SHAPES])
def target(
    request: pytest.FixtureRequest, random_llama_pair, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Path]:
    """A random 3-layer target of each lean family (Qwen3: per-head q/k norms; OPT: LayerNorm, biases,
    learned positions; OPT-350m's shape: norms after each block, embeddings projected in and out; Qwen3-MoE:
    a dense first layer, then mixture-of-experts layers; the others: `SHAPES`), and its family."""
    family, path = request.param, tmp_path_factory.mktemp(request.param) / "target"
    if family == "llama":
        return family, random_llama_pair[0]
    if family.startswith("qwen3"):
        return family, save_random_lm(path, 3, 64, seed=3, arch=family)
    if family.startswith("opt"):
        return family, save_random_opt(path, 3, 64, norm_before=family == "opt", project=32 * (family != "opt"))
    random_model(family).save_pretrained(path)
    return family, path


@torch.inference_mode()
def test_prefill_and_steps_equal_the_model(target: tuple[str, Path]) -> None:
    family, path = target
    model = load_causal_lm(path)
    stack = lean_stack(model)
    assert stack is not None and runs_lean(model) and TreeTarget(LMSpec("hf", model=model)).conditions().lean
    assert all((w.q_norm is not None) == family.startswith("qwen3") for w in stack.layers)
    fused = family.startswith(("phi3", "gpt", "falcon"))
    assert all(isinstance(w.qkv, FusedQKV) == fused for w in stack.layers)
    tokens = torch.randint(3, 60, (2, 9), generator=torch.Generator().manual_seed(0))
    plain, lean, lean_masked = (DynamicCache(config=model.config) for _ in range(3))
    positions = torch.arange(9).expand(2, -1)
    causal = torch.ones(9, 9, dtype=torch.bool).tril()[None, None].expand(2, 1, -1, -1)
    expected = model(input_ids=tokens, past_key_values=plain, position_ids=positions, use_cache=True).logits
    assert_same(lean_logits(model, stack, tokens, lean, positions, causal), expected, family)
    states: list[torch.Tensor] = []
    lean_logits(model, stack, tokens, lean_masked, positions, causal, states)
    reported = model(input_ids=tokens, position_ids=positions, output_hidden_states=True).hidden_states
    for mine, theirs in zip(states[:-1], reported[1:-1]):  # the last is normed
        assert_same(mine, theirs, family)
    step = expected[:, -1:].argmax(-1)
    for position in range(9, 12):
        at = torch.full((2, 1), position)
        expected = model(input_ids=step, past_key_values=plain, position_ids=at, use_cache=True).logits
        assert_same(lean_logits(model, stack, step, lean, at, None), expected, family)
        every_slot = torch.ones(2, 1, 1, position + 1, dtype=torch.bool)  # a masked single query: folded heads
        folded = lean_logits(model, stack, step, lean_masked, at, every_slot)
        torch.testing.assert_close(folded, expected, atol=1e-5, rtol=0)
        step = expected.argmax(-1)


def test_a_model_with_other_projections_keeps_its_modules(random_llama_pair) -> None:
    model = load_causal_lm(random_llama_pair[0])

    class AllReduceLinear(torch.nn.Linear):  # what a tensor-parallel shard's projection looks like
        pass

    proj = model.model.layers[0].self_attn.o_proj
    replacement = AllReduceLinear(proj.in_features, proj.out_features, bias=False)
    model.model.layers[0].self_attn.o_proj = replacement
    assert lean_stack(model) is None


@pytest.mark.parametrize(
    ("family", "overrides"),
    [
        ("falcon", {"bias": True}),  # biases added after the matmul, not in it
        ("mistral", {"sliding_window": 64}),  # a window shorter than the positions
        ("phi3", {"sliding_window": 64}),
        ("qwen2", {"use_sliding_window": True, "sliding_window": 64, "max_window_layers": 1}),  # sliding layers
        ("gpt2", {"scale_attn_by_inverse_layer_idx": True}),
    ],
)
@torch.inference_mode()
def test_models_the_lean_layers_would_not_reproduce_keep_their_modules(family: str, overrides: dict) -> None:
    """transformers' forward runs them whole, over speculab's cache and mask: its own logits."""
    model = random_model(family, **overrides)
    assert lean_stack(model) is None and not runs_lean(model)
    assert not TreeTarget(LMSpec("hf", model=model)).conditions().lean  # what the run is told (`ar_lean`)
    lm = TreeLM(model)
    assert lm.lean is None and lm.decoder is None and lm.static is None
    lm.reset(1, 32)
    expected = model(input_ids=torch.tensor([[3, 4, 5, 6]])).logits[:, -1]
    torch.testing.assert_close(lm.feed([[3, 4, 5, 6]]), expected, atol=1e-5, rtol=0)


def test_alibi_falcon_keeps_its_modules() -> None:
    """ALiBi's bias enters the scores inside Falcon's attention, from each key's position (which the lean
    layers do not track). Its forward takes no 4-D mask (`build_alibi_tensor` reads a 2-D one), so TreeLM
    cannot run it either way: only the refusal is checked."""
    model = random_model("falcon", alibi=True)
    assert not runs_lean(model) and own_decoder(model, None) is None


@torch.inference_mode()
def test_both_stacks_give_the_eager_logits_with_fixed_shape_passes(target: tuple[str, Path]) -> None:
    """The fixed-shape passes CUDA graphs replay (`models.static_pass`) over each lean stack: a
    prefill, a tree and a step after its commit give what TreeLM's eager passes give."""
    model = load_causal_lm(target[1])
    paths = torch.tensor([[[10, 11, 12], [10, 13, 14]], [[20, 21, 22], [23, 24, 25]]])
    tree = DraftTree.from_paths(torch.tensor([5, 6]), paths)
    out = []
    for passes in ("eager", "static"):
        lm = TreeLM(model, passes=passes)
        lm.reset(2, 32)
        prefill = lm.feed([[3, 4, 5, 6], [7, 8]])
        scored = lm.extend(tree)
        lm.commit(tree.path_nodes[:, 0, :3])  # the first path's root and two nodes
        out.append((prefill, scored, lm.feed([[9], [9]])))
    for eager, static in zip(*out, strict=True):
        torch.testing.assert_close(static, eager, atol=1e-5, rtol=1e-5)
