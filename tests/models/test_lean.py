"""The lean Llama, Qwen3 and OPT stacks: the same logits as transformers' own forward, bit for bit, step by step."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import DynamicCache

from speculab.drafting.tree import DraftTree
from speculab.models.hf import TreeLM, load_causal_lm
from speculab.models.lean import decoder_forward, lean_layers, lean_stack, own_decoder
from support.models import save_random_lm, save_random_opt


def lean_logits(model, stack, tokens, cache, positions, mask, states=None) -> torch.Tensor:
    decoder = own_decoder(model, stack)
    assert decoder is not None

    def layers(hidden, cos, sin, outputs):
        return lean_layers(
            stack, hidden, cos, sin, mask, cache.layers.__getitem__, outputs if states is None else states
        )

    return decoder_forward(decoder, layers, tokens, positions, (), lambda hidden: hidden)[0]


@pytest.fixture(scope="module", params=["llama", "qwen3", "qwen3_moe", "opt", "opt-350m"])
def target(request: pytest.FixtureRequest, random_llama_pair, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 3-layer target of each lean architecture (Qwen3: per-head q/k norms; OPT: LayerNorm, biases,
    learned positions; OPT-350m's shape: norms after each block, embeddings projected in and out; Qwen3-MoE:
    a dense first layer, then mixture-of-experts layers)."""
    path = tmp_path_factory.mktemp(request.param) / "target"
    if request.param == "llama":
        return random_llama_pair[0]
    if request.param.startswith("qwen3"):
        return save_random_lm(path, 3, 64, seed=3, arch=request.param)
    return save_random_opt(path, 3, 64, norm_before=request.param == "opt", project=32 * (request.param != "opt"))


@torch.inference_mode()
def test_prefill_and_steps_equal_the_model(target: Path) -> None:
    model = load_causal_lm(target)  # Llama, Qwen3: grouped keys, 4 heads over 2 key heads
    stack = lean_stack(model)
    assert stack is not None and (stack.heads > stack.kv_heads) == (model.config.model_type != "opt")
    assert all((w.q_norm is not None) == model.config.model_type.startswith("qwen3") for w in stack.layers)
    tokens = torch.randint(3, 60, (2, 9), generator=torch.Generator().manual_seed(0))
    plain, lean, lean_masked = (DynamicCache(config=model.config) for _ in range(3))
    positions = torch.arange(9).expand(2, -1)
    causal = torch.ones(9, 9, dtype=torch.bool).tril()[None, None].expand(2, 1, -1, -1)
    expected = model(input_ids=tokens, past_key_values=plain, position_ids=positions, use_cache=True).logits
    assert torch.equal(lean_logits(model, stack, tokens, lean, positions, causal), expected)
    states: list[torch.Tensor] = []
    lean_logits(model, stack, tokens, lean_masked, positions, causal, states)
    reported = model(input_ids=tokens, position_ids=positions, output_hidden_states=True).hidden_states
    assert all(torch.equal(mine, theirs) for mine, theirs in zip(states[:-1], reported[1:-1]))  # the last is normed
    step = expected[:, -1:].argmax(-1)
    for position in range(9, 12):
        at = torch.full((2, 1), position)
        expected = model(input_ids=step, past_key_values=plain, position_ids=at, use_cache=True).logits
        assert torch.equal(lean_logits(model, stack, step, lean, at, None), expected)
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


@torch.inference_mode()
def test_both_stacks_give_the_eager_logits_with_fixed_shape_passes(target: Path) -> None:
    """The fixed-shape passes CUDA graphs replay (`models.static_pass`) over each lean stack: a
    prefill, a tree and a step after its commit give what TreeLM's eager passes give."""
    model = load_causal_lm(target)
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
