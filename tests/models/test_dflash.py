"""The DFlash drafter: the published checkpoint layout loads exactly, its one-pass block equals a
slow step-by-step evaluation of the same formulas, and the target hands over the right features."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from speculab.drafting.tree import DraftTree
from speculab.models.dflash import DFlashLM, load_dflash, load_target_head
from speculab.models.hf import TreeLM, load_causal_lm
from speculab.models.roles import aligned_valid
from support.dflash_reference import reference_block
from support.models import save_random_dflash

LAYER_IDS = [0, 2]


@pytest.fixture(scope="module")
def dflash_pair(random_llama_pair, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(target, DFlash drafter) on the random 3-layer Llama target, block size 8."""
    target = random_llama_pair[0]
    return target, save_random_dflash(tmp_path_factory.mktemp("dflash") / "d", target, LAYER_IDS)


def test_the_published_layout_loads_with_no_missing_or_unexpected_key(dflash_pair) -> None:
    target, draft = dflash_pair
    with safe_open(str(draft / "model.safetensors"), framework="pt") as f:
        keys = set(f.keys())
    assert set(load_dflash(draft).state_dict()) == keys  # load_dflash itself refuses any mismatch
    embed, head = load_target_head(target, torch.float32, "cpu")
    model = load_causal_lm(target)
    torch.testing.assert_close(embed, model.model.embed_tokens.weight, rtol=0, atol=0)
    torch.testing.assert_close(head, model.lm_head.weight, rtol=0, atol=0)


def test_a_checkpoint_with_a_missing_key_is_refused_naming_it(dflash_pair, tmp_path: Path) -> None:
    target = dflash_pair[0]
    bad = save_random_dflash(tmp_path / "bad", target, LAYER_IDS)
    with safe_open(str(bad / "model.safetensors"), framework="pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys() if k != "hidden_norm.weight"}  # noqa: SIM118
    from safetensors.torch import save_file

    save_file(tensors, str(bad / "model.safetensors"))
    with pytest.raises(ValueError, match="missing keys \\['hidden_norm.weight'\\]"):
        load_dflash(bad)


def test_block_marginals_equal_the_step_by_step_reference(dflash_pair) -> None:
    """Two rows of different context lengths, the context absorbed in two pieces (prefill, then a
    left-aligned commit with padding): the cached context keys equal one pass over all of it."""
    target, draft = dflash_pair
    lm = DFlashLM(draft, target)
    config = json.loads((draft / "config.json").read_text())
    with safe_open(str(draft / "model.safetensors"), framework="pt") as f:
        weights = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    gen = torch.Generator().manual_seed(0)
    width = len(LAYER_IDS) * config["hidden_size"]
    contexts = [torch.randn(7, width, generator=gen), torch.randn(4, width, generator=gen)]
    first = [5, 2]  # tokens of each row's prefill; the rest come as one commit
    lm.reset(2)
    prefill = torch.zeros(2, 5, width)
    prefill[0], prefill[1, 3:] = contexts[0][:5], contexts[1][:2]
    lm.absorb(prefill, aligned_valid(first, 5, right=True))
    commit = torch.zeros(2, 2, width)
    commit[0], commit[1] = contexts[0][5:], contexts[1][2:]
    lm.absorb(commit, aligned_valid([2, 2], 2))
    roots = [[3], [17]]
    q = lm.block_marginals(roots, 7, 1.0)  # [B, L, V]
    for b, context in enumerate(contexts):
        tokens = [roots[b][0]] + [0] * 7
        logits = reference_block(weights, config, lm.embed, lm.head, context, tokens, len(context))
        torch.testing.assert_close(q[b], torch.softmax(logits[1:], dim=-1), atol=1e-5, rtol=1e-4)


# ------------------------------------------------------------- the target's features


@pytest.mark.parametrize("passes", ["eager", "static"])
def test_features_of_accepted_tree_nodes_equal_causal_features_along_the_path(random_llama_pair, passes: str) -> None:
    """Committed nodes' features come from the tree-scoring pass (eager, or the fixed-shape pass of
    CUDA graphs); they equal transformers' hidden_states[id + 1] of a plain causal pass over
    context + accepted path (the last layer after the final norm, as transformers reports it)."""
    model = load_causal_lm(random_llama_pair[0])
    ids = (0, 2)
    lm = TreeLM(model, ids, passes)
    prompts = [[3, 14, 15, 92, 65], [35, 89]]
    lm.reset(2)
    lm.feed([p[:-1] for p in prompts])
    prefill = lm.features
    paths = torch.tensor([[[10, 11, 12], [10, 13, 14]], [[20, 21, 22], [23, 24, 25]]])
    tree = DraftTree.from_paths(torch.tensor([p[-1] for p in prompts]), paths)
    lm.extend(tree)
    keep = torch.stack([tree.path_nodes[0, 1, :3], torch.tensor([*tree.path_nodes[1, 0, :2].tolist(), -1])])
    lm.commit(keep)
    accepted = [[10, 13], [20]]
    for b, prompt in enumerate(prompts):
        with torch.inference_mode():
            states = model(input_ids=torch.tensor([prompt + accepted[b]]), output_hidden_states=True).hidden_states
        want = torch.cat([states[i + 1][0] for i in ids], dim=-1)  # [T, n * hidden]
        n = len(prompt) - 1
        torch.testing.assert_close(prefill[b, prefill.shape[1] - n :], want[:n], atol=1e-5, rtol=1e-5)
        m = 1 + len(accepted[b])
        torch.testing.assert_close(lm.features[b, :m], want[n:], atol=1e-5, rtol=1e-5)


def test_without_feature_layers_nothing_is_captured(random_llama_pair) -> None:
    lm = TreeLM(load_causal_lm(random_llama_pair[0]))
    lm.reset(1)
    lm.feed([[1, 2, 3]])
    assert lm.features is None and lm.forest_features is None
