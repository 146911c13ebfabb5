"""The DDTree verification walk over a deterministic draft tree (no draft probabilities).

From the root, draw y ~ p(. | node) with the target's own decoding rule; if the node has a
child with token y, accept that child and continue there, else stop: y is the extra token
(the bonus token of the next round). Every emitted token is a draw from the target given
the emitted tokens before it, and stopping depends only on what has been emitted, so the
walk is lossless for any tree. At temperature 0, p is one-hot and the draw is the argmax.

`ddtree_walk_reference` follows these words for one tree; `ddtree_walk` is the batched version (one
uniform per depth and row, consumed in the reference's order). Neither knows how the tree
was built; trees come from `speculab.drafting` (DDTree best-first or a single chain).
"""

from __future__ import annotations

import torch

from speculab.device.hostreads import reads_free
from speculab.drafting.tree import DraftTree

from .decisions import Decisions, draw_uniforms, sample_inverse_cdf
from .verdict import PAD, Verdict


# tokens [N], p [N, V] target probabilities at every node
def ddtree_walk_reference(
    tokens: torch.Tensor, children: list[list[int]], p: torch.Tensor, decisions: Decisions
) -> tuple[list[int], int]:
    """(accepted nodes, root first; extra token) for one tree."""
    nodes = [0]
    while True:
        y = decisions.categorical(p[nodes[-1]])
        child = next((c for c in children[nodes[-1]] if int(tokens[c]) == y), None)
        if child is None:
            return nodes, y
        nodes.append(child)


# p [B, N, V] target probabilities at every node of `tree`; uniforms [B, L+1]: one per visited depth
def ddtree_walk_decision(tree: DraftTree, p: torch.Tensor, uniforms: torch.Tensor) -> Verdict:
    """Batched walk; ``verdict.path`` indexes ``tree.path_nodes`` (the path through the last accepted node).

    L + 1 steps, each a fixed set of [B, N] and [B, V] operations; only where host reads are free
    does the loop stop once no row walks.
    """
    assert tree.path_nodes is not None  # every drafted tree records its paths
    B = tree.tokens.shape[0]
    L = tree.path_nodes.shape[2] - 1
    device = p.device
    tokens, parents = tree.tokens.to(device), tree.parents.to(device)
    real = tree.valid.to(device) & (parents >= 0)
    rows = torch.arange(B, device=device)
    node = torch.zeros(B, dtype=torch.long, device=device)  # current node
    walking = torch.ones(B, dtype=torch.bool, device=device)
    out = torch.full((B, L + 1), PAD, dtype=torch.long, device=device)
    tau = torch.zeros(B, dtype=torch.long, device=device)
    for step in range(L + 1):
        y = sample_inverse_cdf(p[rows, node], uniforms[:, step])  # [B]
        match = real & (parents == node[:, None]) & (tokens == y[:, None])  # [B, N]
        moves = walking & match.any(dim=1)
        out[rows, tau] = torch.where(walking, y, out[rows, tau])
        node = torch.where(moves, match.to(torch.int8).argmax(dim=1), node)
        tau = tau + moves.long()
        walking = moves
        if reads_free(walking) and not bool(walking.any()):
            break
    path_nodes = tree.path_nodes.to(device)  # [B, K, L+1]
    on_path = path_nodes.gather(2, tau[:, None, None].expand(B, path_nodes.shape[1], 1))[..., 0] == node[:, None]
    return Verdict(out, tau + 1, on_path.to(torch.int8).argmax(dim=1))


# p [B, N, V] target probabilities at every node of `tree`
def ddtree_walk(tree: DraftTree, p: torch.Tensor, *, rng: torch.Generator) -> Verdict:
    """The walk with its ``[B, L+1]`` uniforms drawn up front from ``rng`` (`ddtree_walk_decision`)."""
    assert tree.path_nodes is not None  # every drafted tree records its paths
    uniforms = draw_uniforms(rng, tree.tokens.shape[0], tree.path_nodes.shape[2], p.device)
    return ddtree_walk_decision(tree, p, uniforms)
