"""Draft trees: the node-major structure a target scores in one forward pass.

A `DraftTree` holds one tree per prompt as a padded batch. Node 0 of every row is the root:
the last committed token that neither model has processed yet. Padding nodes (``valid`` is
False) attend only to themselves and are never attended to, so a padded batch runs in one
pass. This module builds trees and derives masks and positions; it knows no model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from speculab.device.hostreads import reads_free


@dataclass(frozen=True)
class DraftTree:
    tokens: torch.Tensor  # [B, N] int64 token at each node (0 at padding)
    parents: torch.Tensor  # [B, N] int64 parent node index, -1 for the root and padding
    depth: torch.Tensor  # [B, N] int64 root = 0
    valid: torch.Tensor  # [B, N] bool real node (False = padding)
    path_nodes: torch.Tensor | None = None  # [B, K, L+1] node of each path position, col 0 = root

    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]

    def to(self, device: torch.device | str) -> DraftTree:
        """The same tree on `device` (itself where it is there already): a model takes a tree its
        caller built elsewhere (the loop, or a drafter on another device) to its own."""
        if self.tokens.device == torch.device(device):
            return self
        paths = None if self.path_nodes is None else self.path_nodes.to(device)
        return DraftTree(
            self.tokens.to(device), self.parents.to(device), self.depth.to(device), self.valid.to(device), paths
        )

    @property
    def num_nodes(self) -> torch.Tensor:
        """[B] number of real nodes per tree."""
        return self.valid.sum(dim=1)

    @staticmethod
    def from_paths(root: torch.Tensor, paths: torch.Tensor) -> DraftTree:
        """Merge K drafted paths per prompt into a prefix tree, nodes ordered by depth.

        root: [B] int64; paths: [B, K, L] int64. Equal prefixes share nodes; every path's
        nodes are recorded in ``path_nodes`` so path-major views gather from node-major ones.
        """
        B, K, L = paths.shape
        device = paths.device
        # same_prefix[b, k, j, t]: paths k and j agree on positions 0..t
        same_prefix = (paths[:, :, None, :] == paths[:, None, :, :]).to(torch.int8).cumprod(-1).bool()
        first_equal = same_prefix.to(torch.int8).argmax(dim=2)  # [B, K, L] lowest j sharing the prefix
        is_new = first_equal == torch.arange(K, device=device)[None, :, None]  # [B, K, L]
        # Number new nodes depth-major (t, then k), after the root.
        new_tk = is_new.transpose(1, 2).reshape(B, L * K)
        ids_tk = torch.cumsum(new_tk.long(), dim=1).reshape(B, L, K)  # valid where new
        node_of = ids_tk.gather(2, first_equal.transpose(1, 2)).transpose(1, 2)  # [B, K, L]
        path_nodes = torch.cat([torch.zeros(B, K, 1, dtype=torch.long, device=device), node_of], dim=2)

        # the nodes the widest row needs where reading it is free; else room for K distinct paths (a
        # static shape: the rest are padding)
        N = 1 + (int(new_tk.sum(dim=1).max()) if reads_free(new_tk) else K * L)
        tokens = torch.zeros(B, N, dtype=torch.long, device=device)
        parents = torch.full((B, N), -1, dtype=torch.long, device=device)
        depth = torch.zeros(B, N, dtype=torch.long, device=device)
        valid = torch.zeros(B, N, dtype=torch.bool, device=device)
        tokens[:, 0] = root
        valid[:, 0] = True
        if L > 0:
            # Duplicates write identical values, so scattering every (k, t) is safe.
            target = node_of.reshape(B, K * L)
            tokens.scatter_(1, target, paths.reshape(B, K * L))
            parents.scatter_(1, target, path_nodes[:, :, :L].reshape(B, K * L))
            steps = torch.arange(1, L + 1, device=device).expand(B, K, L).reshape(B, K * L)
            depth.scatter_(1, target, steps)
            valid.scatter_(1, target, torch.ones_like(target, dtype=torch.bool))
        return DraftTree(tokens, parents, depth, valid, path_nodes)

    @staticmethod
    def chain(tokens: torch.Tensor, valid: torch.Tensor) -> DraftTree:
        """A single path per row: tokens [B, N] right-aligned, valid [B, N] (left padding).

        Used to feed committed tokens (prompts, pending tokens) through the same tree path.
        """
        B, N = tokens.shape
        cols = torch.arange(N, device=tokens.device).expand(B, N)
        first = (~valid).sum(dim=1, keepdim=True)  # [B, 1] number of left pads
        depth = (cols - first).clamp(min=0)
        parents = torch.where(valid & (cols > first), cols - 1, torch.full_like(cols, -1))
        return DraftTree(tokens.where(valid, 0), parents, depth.where(valid, 0), valid)

    def ancestor_mask(self) -> torch.Tensor:
        """[B, N, N] bool: node i attends to node j iff j is i itself or an ancestor of i.

        By pointer doubling: after t steps a node holds its ancestors less than 2^t hops up, and
        `hop` points 2^t hops up; ceil(log2 N) steps reach every ancestor, a count the shape decides
        (no read of the tree's depth)."""
        B, N = self.tokens.shape
        device = self.tokens.device
        mask = torch.eye(N, dtype=torch.bool, device=device).expand(B, N, N).clone()
        hop = self.parents  # [B, N] 2^t hops up, -1 past the root
        for _ in range(max(N - 1, 0).bit_length()):
            up = hop.clamp(min=0)
            above = mask.gather(1, up[..., None].expand(-1, -1, N)) & (hop >= 0)[..., None]
            mask |= above
            hop = torch.where(hop >= 0, hop.gather(1, up), hop)
        return mask

    def is_chain(self) -> bool:
        """True when every valid node's parent is the valid node before it (-1 for the first):
        then a node's ancestors are exactly the valid nodes before it, as in a causal mask."""
        B, N = self.tokens.shape
        cols = torch.arange(N, device=self.tokens.device).expand(B, N)
        last_valid = torch.where(self.valid, cols, -1).cummax(dim=1).values  # [B, N]
        previous = torch.cat([torch.full_like(last_valid[:, :1], -1), last_valid[:, :-1]], dim=1)
        return bool(((self.parents == previous) | ~self.valid).all())

    def position_ids(self, context_len: torch.Tensor) -> torch.Tensor:
        """[B, N] absolute positions: context_len [B] (committed tokens) + depth."""
        return context_len[:, None] + self.depth

    def children(self, row: int) -> list[list[int]]:
        """Children lists of one tree (for walks over small trees)."""
        kids: list[list[int]] = [[] for _ in range(self.tokens.shape[1])]
        for node, parent in enumerate(self.parents[row].tolist()):
            if parent >= 0 and bool(self.valid[row, node]):
                kids[parent].append(node)
        return kids


@dataclass(frozen=True)
class Proposal:
    """What a drafter proposes in one round: a tree to score and, for i.i.d. paths, the paths and q."""

    tree: DraftTree  # the K paths merged into a prefix tree rooted at the root token, or a DDTree
    paths: torch.Tensor | None  # [B, K, L] int64 drafted tokens; None: a deterministic tree (DDTree)
    q: torch.Tensor | None  # [B, K, L, V] draft probs that produced each drafted token; None with paths
    build_s: float = 0.0  # seconds spent building a deterministic tree from marginals
    feature_bytes: int = 0  # target features the drafter absorbed for this proposal (DFlash)
    feature_s: float = 0.0  # seconds it spent absorbing them
    marginals: torch.Tensor | None = None  # [B, L, V] a deterministic tree's per-depth marginals
    ahead_hit: bool | None = None  # drafted ahead (`drafting.ahead`): the cached draft (True) or not; None: not ahead
    ahead_drafts: int = 0  # the drafts made ahead for this round (guesses times rows)
    draft_busy_s: float = 0.0  # a draft in an actor of its own: its model seconds since its last proposal
