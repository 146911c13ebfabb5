"""The parallel drafter: a one-pass block drafter (DFlash-style) conditioned on the context only.

Weights are a small transformers causal LM; what makes it a one-pass drafter is how it is run.
Committed tokens go through its own KV cache causally, like any draft model; then one
forward pass over the block [bonus, mask x S] (S = the trained block size) with
bidirectional attention inside the block and full attention to the context gives, at mask
position j, the marginal q_j of the token j steps after the bonus (`block_allowed`, the
mask of the DFlash drafter's block too). The block's slots are cropped away afterwards, and
the bonus token is fed causally at the next call, when it has been committed. Conditions
on the context only (no target hidden features). `block.json` beside the weights holds the
mask token id and the block size. Trained by jobs/train_parallel_drafter.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from speculab.drafting.sampling import tempered_probs
from speculab.models.hf import TreeLM, load_causal_lm
from speculab.models.slots import DEFAULT_CAPACITY


def read_block_spec(path: str | Path) -> dict[str, int]:
    """{"mask_token_id", "block_size"} of a saved parallel drafter."""
    return json.loads((Path(path) / "block.json").read_text())


# context_valid [B, S] -> [B, 1, Q, S + Q] bool
def block_allowed(context_valid: torch.Tensor, Q: int) -> torch.Tensor:
    """What a block of Q positions attends to: every valid context slot and the whole block
    (bidirectional). The parallel drafter's and the DFlash drafter's mask."""
    B = context_valid.shape[0]
    inside = torch.ones(B, Q, Q, dtype=torch.bool, device=context_valid.device)
    return torch.cat([context_valid[:, None, :].expand(B, Q, -1), inside], dim=2)[:, None]


class ParallelDraftLM:
    """A one-pass drafter (`models.kinds.OnePassDrafterLM`) that reads its context as tokens, through a `TreeLM`,
    then drafts with `block_marginals`, the one-pass draft."""

    def __init__(self, path: str | Path, dtype: str = "float32", device: str = "cpu") -> None:
        self.tree_lm = TreeLM(load_causal_lm(path, dtype, device))
        spec = read_block_spec(path)
        self.mask_token_id, self.block_size = spec["mask_token_id"], spec["block_size"]
        self.held: list[list[int]] = []  # per row: the last bonus token, not yet in the cache

    @property
    def peak_bytes(self) -> int:
        return self.tree_lm.peak_bytes

    def reset(self, batch_size: int, capacity: int = DEFAULT_CAPACITY) -> None:
        self.tree_lm.reset(batch_size, capacity)
        self.held = [[] for _ in range(batch_size)]

    def feed(self, rows: list[list[int]]) -> torch.Tensor:
        return self.tree_lm.feed(rows)

    def commit(self, keep: torch.Tensor) -> None:
        self.tree_lm.commit(keep)

    def retain(self, rows: torch.Tensor) -> None:
        self.tree_lm.retain(rows)
        self.held = [self.held[r] for r in rows.tolist()]

    @torch.inference_mode()
    def block_marginals(self, pending: list[list[int]], length: int, temperature: float) -> torch.Tensor:
        """q [B, L, V] after each row's last pending token (the bonus); earlier ones are committed."""
        lm = self.tree_lm
        context = [held + row[:-1] for held, row in zip(self.held, pending)]
        if any(context):
            lm.feed(context)
        self.held = [row[-1:] for row in pending]
        B, Q = len(pending), 1 + self.block_size
        tokens = torch.full((B, Q), self.mask_token_id, dtype=torch.long, device=lm.device)
        tokens[:, 0] = torch.tensor([row[-1] for row in pending], device=lm.device)
        slots = lm.slots
        slots.add(torch.ones(B, Q, dtype=torch.bool, device=lm.device))
        out = lm.model(
            input_ids=tokens,
            attention_mask=block_allowed(slots.valid[:, : slots.committed], Q),
            position_ids=slots.context_len[:, None] + torch.arange(Q, device=lm.device),
            past_key_values=slots.cache,
            use_cache=True,
        )
        slots.crop(slots.committed)  # drop the block: only committed tokens stay
        return tempered_probs(out.logits[:, 1 : 1 + length], temperature)
