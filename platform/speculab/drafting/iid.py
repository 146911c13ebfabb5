"""I.i.d. multi-path drafting: K independent paths of length L from an autoregressive draft.

The K paths of a prompt are decoded together as a forest in the draft's own KV cache (each
path attends to the committed context and its own earlier tokens), so the context is never
copied K times. Works with any model that can extend a forest (`ForestLM`).
"""

from __future__ import annotations

from typing import Protocol

import torch

from speculab.drafting.sampling import SamplingParams, draft_probs, sample_with
from speculab.drafting.tree import DraftTree, Proposal


class ForestLM(Protocol):
    def extend(self, nodes: DraftTree) -> torch.Tensor:
        """Append nodes whose parents index earlier uncommitted nodes (-1: the context); logits [B, N, V]."""
        ...


def step_nodes(tokens: torch.Tensor, step: int) -> DraftTree:
    """The forest nodes for drafted step `step` (0-based) of K paths: tokens [B, K].

    Node (k, step) hangs under (k, step - 1), which sits at forest index (step - 1) * K + k.
    """
    B, K = tokens.shape
    ks = torch.arange(K, device=tokens.device).expand(B, K)
    parents = (step - 1) * K + ks if step > 0 else torch.full_like(ks, -1)
    depth = torch.full_like(ks, step)
    return DraftTree(tokens, parents, depth, torch.ones_like(tokens, dtype=torch.bool))


def sample_iid_paths(
    lm: ForestLM,
    root: torch.Tensor,  # [B] int64 root token (already processed by lm)
    root_logits: torch.Tensor,  # [B, V] draft logits after the root
    num_paths: int,
    length: int,
    sampling: SamplingParams,
    u: torch.Tensor,  # [B, K, L] the round's uniforms (`drafting.sampling.draft_uniforms`)
) -> Proposal:
    """Draw K i.i.d. paths of L tokens, path k's token i by u[:, k, i]; L - 1 forest extensions after the root.
    With `sampling.confidence_stop`, fewer: drafting stops after a token whose draft probability is below it
    in every row (and path), and the draft passes after it are not run. Whether to draft position i + 1 is
    decided by the tokens drafted up to i alone, a stopping time of the draft: token and block verification
    stay lossless (certified by enumeration). It reads one number to the host a drafted token."""
    B, V = root_logits.shape
    q = draft_probs(root_logits, sampling.temperature, sampling.top_k, sampling.top_p)  # [B, V]
    qs = [q[:, None, :].expand(B, num_paths, V)]
    tokens = [sample_with(q, u[:, :, 0])]  # [B, K]
    for step in range(length - 1):
        if _unconfident(qs[-1], tokens[-1], sampling.confidence_stop):
            break
        logits = lm.extend(step_nodes(tokens[-1], step))  # [B, K, V]
        q = draft_probs(logits, sampling.temperature, sampling.top_k, sampling.top_p)
        qs.append(q)
        tokens.append(sample_with(q, u[:, :, step + 1, None])[..., 0])  # [B, K]
    paths = torch.stack(tokens, dim=2)  # [B, K, L]
    return Proposal(DraftTree.from_paths(root, paths), paths, torch.stack(qs, dim=2))


def _unconfident(q: torch.Tensor, drafted: torch.Tensor, stop: float) -> bool:
    """Whether the confidence stop ends the round after `drafted` [B, K], drawn from q [B, K, V]: its draft
    probability is below `stop` in every row and path (never with stop 0)."""
    return bool(stop) and float(q.gather(-1, drafted[..., None]).max()) < stop
