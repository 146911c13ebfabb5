"""The parallel drafter (a one-pass block drafter): cache bookkeeping against a from-scratch pass, and the shipped
drafter running DDTree end to end on the tiny pair (greedy output = autoregressive)."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoTokenizer

from speculab.core.autoregressive import autoregressive
from speculab.core.engine import decode
from speculab.data import encode_prompt, load_prompts
from speculab.drafting.ddtree import TreeDrafter, tree_builder
from speculab.models import DraftModel, LMSpec, TreeTarget
from speculab.models.hf import load_causal_lm
from speculab.models.parallel import ParallelDraftLM, block_allowed
from speculab.verify.ddtree_walk import ddtree_walk
from support.engine import settings
from support.models import TINY_PAIR

BLOCK = 4


@pytest.fixture(scope="module")
def random_block(random_llama_pair):
    path = random_llama_pair[1]
    (path / "block.json").write_text(json.dumps({"mask_token_id": 3, "block_size": BLOCK}))
    return path


def scratch_marginals(path, context: list[int], bonus: int) -> torch.Tensor:
    """[BLOCK, V] from one uncached pass over context + [bonus, mask x BLOCK]."""
    model = load_causal_lm(path)
    ids = torch.tensor([context + [bonus] + [3] * BLOCK])
    n = len(context)
    mask = torch.zeros(1, 1, n + 1 + BLOCK, n + 1 + BLOCK)
    mask[0, 0, :n, :n] = torch.zeros(n, n).masked_fill(torch.ones(n, n).triu(1).bool(), torch.finfo(torch.float32).min)
    mask[0, 0, :n, n:] = torch.finfo(torch.float32).min
    block = block_allowed(torch.ones(1, n, dtype=torch.bool), 1 + BLOCK)[0, 0]
    mask[0, 0, n:] = torch.zeros(block.shape).masked_fill(~block, torch.finfo(torch.float32).min)
    with torch.inference_mode():
        logits = model(input_ids=ids, attention_mask=mask).logits
    return torch.softmax(logits[0, n + 1 :], dim=-1)


def test_block_marginals_across_rounds_equal_a_fresh_pass(random_block) -> None:
    lm = ParallelDraftLM(random_block)
    lm.reset(2)
    contexts = [[5, 6, 7], [8]]
    lm.feed(contexts)
    rounds = [[[9], [10]], [[11, 12, 13], [14]], [[15], [16, 17]]]  # pending: committed tokens, bonus last
    for pending in rounds:
        q = lm.block_marginals(pending, BLOCK, 1.0)
        contexts = [c + p[:-1] for c, p in zip(contexts, pending)]
        for b in range(2):
            torch.testing.assert_close(
                q[b], scratch_marginals(random_block, contexts[b], pending[b][-1]), atol=1e-5, rtol=1e-4
            )
        contexts = [c + p[-1:] for c, p in zip(contexts, pending)]


@pytest.mark.slow
def test_shipped_block_drafter_runs_ddtree_and_keeps_greedy_output() -> None:
    tokenizer = AutoTokenizer.from_pretrained(TINY_PAIR / "target")
    prompts = [encode_prompt(p, tokenizer) for p in load_prompts("humaneval", 3)]
    target = TreeTarget(LMSpec("hf", str(TINY_PAIR / "target")))
    drafter = TreeDrafter(DraftModel(LMSpec("parallel", str(TINY_PAIR / "parallel"))), tree_builder("best_first", 32))
    s = settings(L=8, batch=3, max_new=24, eos=tokenizer.eos_token_id)
    run = decode(target, drafter, ddtree_walk, prompts, s)
    assert [p.tokens for p in run.prompts] == [p.tokens for p in autoregressive(target, prompts, s).prompts]
    assert sum(map(sum, (r.accepted for r in run.rounds))) > 0  # the trained drafter gets tokens accepted
