"""Tree attention and KV compaction against plain sequential decoding (fp32, 1e-5), with eager
passes and with the fixed-shape passes CUDA graphs replay (`models.static_pass`, run eagerly here)."""

from __future__ import annotations

import pytest
import torch

from speculab.drafting.tree import DraftTree
from speculab.models.hf import TreeLM, load_causal_lm


def sequential_logits(model: torch.nn.Module, tokens: list[int]) -> torch.Tensor:
    """logits [len, V] of a plain causal forward over one sequence."""
    with torch.inference_mode():
        return model(input_ids=torch.tensor([tokens])).logits[0]


def node_sequence(tree: DraftTree, row: int, node: int) -> list[int]:
    """Tokens from the root down to `node` in one tree."""
    seq = []
    while node >= 0:
        seq.append(int(tree.tokens[row, node]))
        node = int(tree.parents[row, node])
    return seq[::-1]


def test_from_paths_merges_prefixes() -> None:
    paths = torch.tensor([[[5, 6, 7], [5, 6, 8], [9, 6, 7], [5, 6, 7]]])
    tree = DraftTree.from_paths(torch.tensor([1]), paths)
    assert int(tree.num_nodes[0]) == 1 + 2 + 2 + 3  # root, {5, 9}, {56, 96}, {567, 568, 967}
    for k in range(4):
        assert [int(tree.tokens[0, n]) for n in tree.path_nodes[0, k]] == [1, *paths[0, k].tolist()]
    assert tree.path_nodes[0, 0].tolist() == tree.path_nodes[0, 3].tolist()
    mask = tree.ancestor_mask()[0]
    for n in range(tree.tokens.shape[1]):
        ancestors = set()
        m = n
        while m >= 0:
            ancestors.add(m)
            m = int(tree.parents[0, m])
        assert set(torch.nonzero(mask[n]).flatten().tolist()) == ancestors


PASSES = pytest.mark.parametrize("passes", ["eager", "static"])


def used_static_passes(lm: TreeLM) -> bool:
    """Every pass of a static TreeLM here fits a bucket: it ran the fixed-shape passes, not the eager fallback."""
    return lm.static is not None and len(lm.static.shapes) > 0


@PASSES
@pytest.mark.parametrize(("seed", "K", "L"), [(0, 4, 3), (1, 3, 5), (2, 8, 2), (3, 1, 4)])
def test_tree_logits_equal_sequential(random_llama_pair, seed: int, K: int, L: int, passes: str) -> None:
    model = load_causal_lm(random_llama_pair[0])
    lm = TreeLM(model, passes=passes)
    gen = torch.Generator().manual_seed(seed)
    prompts = [[3, 14, 15, 92, 65], [35, 89]]  # different lengths: left padding
    lm.reset(2)
    lm.feed([p[:-1] for p in prompts])
    paths = torch.randint(0, 3, (2, K, L), generator=gen) + 10  # small alphabet: shared prefixes
    tree = DraftTree.from_paths(torch.tensor([p[-1] for p in prompts]), paths)
    logits = lm.extend(tree)
    for b, prompt in enumerate(prompts):
        for node in range(tree.tokens.shape[1]):
            if not tree.valid[b, node]:
                continue
            seq = prompt[:-1] + node_sequence(tree, b, node)
            torch.testing.assert_close(logits[b, node], sequential_logits(model, seq)[-1], atol=1e-5, rtol=1e-5)

    # Keep the last path's first two nodes in row 0 and the root alone in row 1, then continue.
    accepted = min(2, L)
    keep = torch.tensor([[0, *tree.path_nodes[0, -1, 1 : accepted + 1].tolist()], [0] + [-1] * accepted])
    lm.commit(keep)
    contexts = [prompts[0] + paths[0, -1, :accepted].tolist(), prompts[1]]
    next_tokens = [[7], [8]]
    after = lm.feed(next_tokens)
    for b in range(2):
        torch.testing.assert_close(
            after[b], sequential_logits(model, contexts[b] + next_tokens[b])[-1], atol=1e-5, rtol=1e-5
        )
    assert int(lm.slots.context_len[0]) == len(contexts[0]) + 1
    assert used_static_passes(lm) == (passes == "static")


@PASSES
def test_retain_and_repack_keep_logits(random_llama_pair, passes: str) -> None:
    model = load_causal_lm(random_llama_pair[0])
    lm = TreeLM(model, passes=passes)
    rows = [[1, 2, 3], [4, 5, 6, 7, 8, 9], [10, 11]]
    lm.reset(3)
    lm.feed(rows)
    lm.retain(torch.tensor([0, 2]))
    for _ in range(6):  # many holes: commit nothing of 3-node chains, forcing repacks
        lm.extend(DraftTree.chain(torch.tensor([[20, 21, 22]] * 2), torch.ones(2, 3, dtype=torch.bool)))
        lm.commit(torch.tensor([[0, -1, -1], [-1, -1, -1]]))
    logits = lm.feed([[30], [31]])
    torch.testing.assert_close(logits[0], sequential_logits(model, rows[0] + [20] * 6 + [30])[-1], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logits[1], sequential_logits(model, rows[2] + [31])[-1], atol=1e-5, rtol=1e-5)
    assert lm.slots.valid.shape[1] < 3 + 6 + 1 + 6  # holes were packed away
    assert used_static_passes(lm) == (passes == "static")
