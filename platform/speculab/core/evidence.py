"""Why a round accepted what it did, from what the round already computed (no model pass): the
overlap sum_x min(p_j, q_j) at each depth of the accepted path, the first position's entropies and,
for a deterministic tree, whether the accepted path left its first-ranked chain. One tensor per
round, read on the host once by the engine.
"""

from __future__ import annotations

import torch

from speculab.drafting.tree import DraftTree, Proposal
from speculab.verify.verdict import Verdict


# tokens [B, L+1] a verdict's (accepted, then the extra token); tau [B]; q [B, L, V] a tree's marginals
def left_chain(tokens: torch.Tensor, tau: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """[B] bool: the accepted path left the tree's first-ranked chain (the most probable token at
    every depth, ties to the lower token id as the tree builders rank them): the round was won by a
    side branch, which a single chain (vanilla DFlash) would have lost."""
    L = q.shape[1]
    off = tokens[:, :L] != q.argmax(dim=-1).to(tokens.device)  # [B, L]
    return (off & (torch.arange(L, device=tokens.device) < tau[:, None])).any(dim=1)


Drafts = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # i.i.d. paths [B, K, L], p [B, K, L+1, V], q [B, K, L, V]


# p_nodes [B, N, V]; path [B]
def along_path(
    p_nodes: torch.Tensor, proposal: Proposal, tree: DraftTree, path: torch.Tensor, drafts: Drafts | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """([B, L, V] target, [B, L, V] draft) distributions of the token at each depth j = 1..L of path
    `path`: the i.i.d. paths' (``drafts``, on p's device for their verifier), or a deterministic
    tree's p at the path's node of depth j - 1 (``tree`` on p's device, where it was walked) and its
    marginals. Nothing is copied to the device but a tree's marginals where the draft is elsewhere."""
    rows = torch.arange(len(path), device=p_nodes.device)
    if drafts is not None:
        return drafts[1][rows, path, :-1], drafts[2][rows, path]
    assert tree.path_nodes is not None and proposal.marginals is not None  # a deterministic tree records both
    nodes = tree.path_nodes[rows, path, :-1].clamp(min=0)  # [B, L]; -1 past the end of a tree's shorter path
    p = p_nodes.gather(1, nodes[..., None].expand(-1, -1, p_nodes.shape[-1]))
    return p, proposal.marginals.to(p_nodes.device)


# p, q [B, L, V] along `verdict.path` (`along_path`)
def depth_evidence(p: torch.Tensor, q: torch.Tensor, verdict: Verdict, tree_marginals: bool = False) -> torch.Tensor:
    """Why a round accepted what it did, from what the round already computed (no model pass), on p's
    device so that the caller reads it in one host read; [B, L + 2], [B, L + 3] with ``tree_marginals``
    (q is the marginals a deterministic tree was built from).
    Columns: at each depth j = 1..L along the accepted path, sum_x min(p_j(x), q_j(x)), the chance
    that one token drawn from q_j is accepted against p_j by token verification (at the depths
    reached, j <= tau + 1, every path through the accepted prefix has the same p_j and q_j, so which
    one `verdict.path` names does not matter); then the entropies of p_1 and q_1 in nats; for a
    tree, then 1 where the accepted path left its first-ranked chain (`left_chain`)."""
    device = p.device
    # ranked in the dtype the tree was built from, before q meets p's
    off = left_chain(verdict.tokens.to(device), verdict.tau.to(device), q) if tree_marginals else None
    q = q.to(device, p.dtype)
    entropies = [torch.special.entr(d[:, 0]).sum(-1, keepdim=True) for d in (p, q)]
    columns = [torch.minimum(p, q).sum(-1), *entropies]
    if off is not None:
        columns.append(off[:, None].to(p.dtype))
    return torch.cat(columns, dim=1)
