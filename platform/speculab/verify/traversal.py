"""Traversal verification (Weng et al. 2025; GBV paper App. L): bottom-up over the draft tree.

The tree is the prefix tree of the K drafted paths, children in first-appearance order. Every
node v carries a weight, w(root) = 1 and w(v) = min(1, w(u) p(t(v)|u) / q(t(v)|u)) for its
parent u (0 where q is 0). The nodes are visited in post-order (children before parents),
which always visits a current leaf y:

- y is the root: emit the correction token from p(.|root) and stop;
- with probability w(y): accept the path root -> y, emit the extra token from p(.|y), stop;
- else, with z = parent(y) and S = sum_x [w(z) p(x|z) - q(x|z)]_+ (BV eq. 4-5 at z):
  p(.|z) <- [w(z) p(.|z) - q(.|z)]_+ / S and w(z) <- S / (S + 1 - w(z)) if S > 0, else
  w(z) <- 0; t(y) is removed from q(.|z) (renormalised); the weights of z's remaining
  descendants are recomputed from the new p(.|z), q(.|z), w(z).

On a single path this is block verification (BV Alg. 2) read from the longest sub-block down.
Removing t(y) from q(.|z) looks like a rule for siblings drafted without replacement, but the
exact certificate (tests/verify/test_traversal.py) shows it is lossless for the prefix tree of K
i.i.d. paths as the contract drafts them (siblings are distinct tokens in first-appearance
order), so every input of the contract is accepted; no other drafting mode is needed.

``traversal_verify_reference`` follows the description node by node; ``traversal_verify`` is the
batched version: it indexes the tree by path slots (k, d), the node of path k at depth d, visits
every row's nodes in the same post-order and consumes one uniform per visited non-root node,
then one for the extra token, exactly as the reference does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .block import block_acceptance
from .decisions import Decisions, draw_uniforms, sample_inverse_cdf
from .primitives import clipped_ratio, positive_part, token_probs
from .verdict import Outcome, Verdict, assemble_verdict, reference_verdict


@dataclass
class Node:
    """A node of the draft tree during the traversal (the scalar reference's state)."""

    depth: int
    path: int  # the first path through the node
    parent: int  # node index, -1 for the root
    children: list[int] = field(default_factory=list)
    weight: torch.Tensor = field(default_factory=lambda: torch.tensor(1.0, dtype=torch.float64))
    p: torch.Tensor | None = None  # [V] target after the node's prefix (modified on rejections)
    q: torch.Tensor | None = None  # [V] draft after the node's prefix (drafted siblings removed)


# paths [K, L]; p [K, L+1, V]; q [K, L, V]
def prefix_tree(paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor) -> list[Node]:
    """The prefix tree of the K paths, node 0 the root, children in first-appearance order."""
    count, length = paths.shape
    nodes = [Node(0, 0, -1, p=p[0, 0].double(), q=q[0, 0].double())]
    index: dict[tuple[int, ...], int] = {(): 0}
    for k in range(count):
        for d in range(1, length + 1):
            prefix = tuple(paths[k, :d].tolist())
            if prefix not in index:
                parent = index[prefix[:-1]]
                index[prefix] = len(nodes)
                nodes[parent].children.append(len(nodes))
                draft = q[k, d].double() if d < length else None
                nodes.append(Node(d, k, parent, p=p[k, d].double(), q=draft))
    return nodes


def post_order(nodes: list[Node], root: int = 0) -> list[int]:
    """Node indices, children (in order) before their parent."""
    order: list[int] = []
    for child in nodes[root].children:
        order += post_order(nodes, child)
    return order + [root]


# paths [K, L]: the token of node v is paths[v.path, v.depth - 1]
def set_weights(nodes: list[Node], paths: torch.Tensor, parent: int, alive: set[int]) -> None:
    """w(v) = min(1, w(u) p(t(v)|u) / q(t(v)|u)) for the alive descendants v of ``parent``."""
    u = nodes[parent]
    for child in u.children:
        if child in alive:
            v = nodes[child]
            x = paths[v.path, v.depth - 1]
            v.weight = clipped_ratio(u.weight * u.p[x], u.q[x]) if u.q[x] > 0 else u.q[x] * 0
            set_weights(nodes, paths, child, alive)


# paths [K, L]: the rejected node's token
def reject(nodes: list[Node], paths: torch.Tensor, y: int, alive: set[int]) -> None:
    """Rejecting y updates its parent z: residual target, new weight, y's token removed from q."""
    z = nodes[nodes[y].parent]
    residual = positive_part(z.weight, z.p, 1, z.q)
    mass = residual.sum()
    if mass > 0:
        z.p = residual / mass
    z.weight = block_acceptance(z.weight, mass) if mass > 0 else mass * 0
    q = z.q.clone()
    q[paths[nodes[y].path, nodes[y].depth - 1]] = 0
    z.q = q / q.sum() if q.sum() > 0 else q
    alive.discard(y)
    set_weights(nodes, paths, nodes[y].parent, alive)


# paths [K, L]; p [K, L+1, V]; q [K, L, V]
def traversal_verify_reference(paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor,
                               decisions: Decisions, carry: None = None) -> Verdict:
    """Traversal verification of one prompt's draft tree (module docstring), any tree shape."""
    nodes = prefix_tree(paths, p, q)
    alive = set(range(len(nodes)))
    set_weights(nodes, paths, 0, alive)
    for y in post_order(nodes):
        node = nodes[y]
        if y == 0 or decisions.bernoulli(node.weight):
            return reference_verdict(paths[node.path], node.depth, decisions.categorical(node.p), node.path)
        reject(nodes, paths, y, alive)
    raise AssertionError("the root always stops the traversal")


# ---------------------------------------------------------------- batched


@dataclass
class SlotTree:
    """The prefix tree of every prompt's K paths, indexed by path slots.

    Slot k (L+1) + d is the node of path k at depth d; a node is held by its first path (the
    canonical slot), the root by slot 0.
    """

    parent: torch.Tensor  # [B, S] int64 canonical slot of the slot's parent (root: 0)
    token: torch.Tensor  # [B, S] int64 token of the slot's node (root: 0)
    order: torch.Tensor  # [B, S] int64 canonical slots in post-order, then the other slots


# paths [B, K, L]
def slot_tree(paths: torch.Tensor) -> SlotTree:
    """Canonical slots, parents and the post-order of the reference's ``prefix_tree``.

    Post-order with children in first-appearance order is the lexicographic order of the
    canonical paths of a node's ancestors (c_1, ..., c_d), padded with K (after every child).
    """
    batch, count, length = paths.shape
    same = (paths.unsqueeze(2) == paths.unsqueeze(1)).long().cumprod(-1)  # [B, K, K', L]
    first = same.to(torch.int8).argmax(dim=2)  # [B, K, L] first path sharing the prefix
    canon = torch.nn.functional.pad(first, (1, 0))  # [B, K, L+1]; depth 0: the root, path 0
    depth = torch.arange(length + 1, device=paths.device)
    parent = canon[:, :, :-1] * (length + 1) + depth[:-1]
    parent = torch.nn.functional.pad(parent, (1, 0)).flatten(1)
    canonical = (canon == torch.arange(count, device=paths.device)[:, None]) & ((depth > 0) | (
        torch.arange(count, device=paths.device)[:, None] == 0))
    # digits[b, k, d, j] = c_j for j <= d, else K
    digits = torch.where(depth[1:] <= depth[:, None], canon[:, :, None, 1:], count).flatten(1, 2)
    order = torch.arange(count * (length + 1), device=paths.device).expand(batch, -1)
    for j in reversed(range(length)):  # stable sorts, least significant digit first
        order = order.gather(1, torch.sort(digits[:, :, j].gather(1, order), stable=True).indices)
    order = order.gather(1, torch.sort((~canonical.flatten(1)).gather(1, order).long(), stable=True).indices)
    token = torch.nn.functional.pad(paths, (1, 0)).flatten(1)
    return SlotTree(parent, token, order)


@dataclass
class TraversalState:
    """Per-slot state of the batched traversal (rows of rejected parents kept lazily)."""

    pt: torch.Tensor  # [B, S] float64 p(t(v)|parent) under the parent's current target
    qt: torch.Tensor  # [B, S] float64 q(t(v)|parent) under the parent's current draft
    pinned: torch.Tensor  # [B, S] bool: the weight was set by a rejection (the root from the start)
    pin: torch.Tensor  # [B, S] float64 that weight
    modified: torch.Tensor  # [B, S] bool: p_mod, q_mod hold the node's current rows
    p_mod: torch.Tensor  # [B, S, V] float64 modified targets (valid where ``modified``)
    q_mod: torch.Tensor  # [B, S, V] float64 drafts with rejected children removed


# tree: slots; state: per-slot edges and pins
def traversal_weights(tree: SlotTree, state: TraversalState, length: int) -> torch.Tensor:
    """``[B, S]`` w(v) = min(1, w(u) p(t(v)|u) / q(t(v)|u)), top-down, pinned weights kept."""
    batch, slots = tree.parent.shape
    w = state.pin.view(batch, -1, length + 1).clone()
    for d in range(1, length + 1):
        parent_w = w.flatten(1).gather(1, tree.parent.view(batch, -1, length + 1)[:, :, d])
        pt, qt = state.pt.view(batch, -1, length + 1)[:, :, d], state.qt.view(batch, -1, length + 1)[:, :, d]
        fresh = torch.where(qt > 0, clipped_ratio(parent_w * pt, qt), 0.0)
        w[:, :, d] = torch.where(state.pinned.view(batch, -1, length + 1)[:, :, d], w[:, :, d], fresh)
    return w.flatten(1)


# p_flat [B, S, V] target rows by slot; q_flat [B, K*L, V] draft rows; z [B] slots (depth < L)
def current_rows(state: TraversalState, p_flat: torch.Tensor, q_flat: torch.Tensor, z: torch.Tensor,
                 length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``[B, V]`` float64 current target and draft rows of node z (modified or original)."""
    rows = torch.arange(z.shape[0], device=z.device)
    changed = state.modified[rows, z].unsqueeze(-1)
    q_slot = (z // (length + 1)) * length + (z % (length + 1)).clamp_max(length - 1)
    p_z = torch.where(changed, state.p_mod[rows, z], p_flat[rows, z].double())
    q_z = torch.where(changed, state.q_mod[rows, z], q_flat[rows, q_slot].double())
    return p_z, q_z


# reject [B] rows rejecting node y [B] (slots) at this step; w [B, S] current weights
def reject_batched(tree: SlotTree, state: TraversalState, p_flat: torch.Tensor, q_flat: torch.Tensor,
                   y: torch.Tensor, reject: torch.Tensor, w: torch.Tensor, length: int) -> None:
    """``reject`` for every row at once: update the parent's rows, weight and children edges."""
    rows = torch.arange(y.shape[0], device=y.device)
    z = tree.parent.gather(1, y.unsqueeze(1)).squeeze(1)
    p_z, q_z = current_rows(state, p_flat, q_flat, z, length)
    w_z = w.gather(1, z.unsqueeze(1))
    residual = positive_part(w_z, p_z, 1, q_z)
    mass = residual.sum(-1, keepdim=True)
    p_new = torch.where(mass > 0, residual / mass, p_z)
    w_new = torch.where(mass > 0, block_acceptance(w_z, mass), 0.0).squeeze(1)
    q_new = q_z.scatter(1, tree.token.gather(1, y.unsqueeze(1)), 0.0)
    q_sum = q_new.sum(-1, keepdim=True)
    q_new = torch.where(q_sum > 0, q_new / q_sum, q_new)
    keep = reject.unsqueeze(-1)
    state.p_mod[rows, z] = torch.where(keep, p_new, p_z)
    state.q_mod[rows, z] = torch.where(keep, q_new, q_z)
    state.modified[rows, z] |= reject
    state.pin[rows, z] = torch.where(reject, w_new, state.pin[rows, z])
    state.pinned[rows, z] |= reject
    children = (tree.parent == z.unsqueeze(1)) & keep
    children[:, 0] = False
    state.pt = torch.where(children, p_new.gather(1, tree.token), state.pt)
    state.qt = torch.where(children, q_new.gather(1, tree.token), state.qt)


# paths [B, K, L]; p [B, K, L+1]; q [B, K, L, V]
def initial_state(paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor) -> TraversalState:
    """Edges from the original rows, the root pinned at weight 1, nothing modified."""
    batch, count, length = paths.shape
    slots = count * (length + 1)
    pt = torch.nn.functional.pad(token_probs(p[:, :, :length], paths).double(), (1, 0)).flatten(1)
    qt = torch.nn.functional.pad(token_probs(q, paths).double(), (1, 0), value=1.0).flatten(1)
    pinned = torch.zeros(batch, slots, dtype=torch.bool, device=p.device)
    pinned[:, 0] = True
    pin = torch.ones(batch, slots, dtype=torch.float64, device=p.device)
    mod = torch.empty(batch, slots, p.shape[-1], dtype=torch.float64, device=p.device)
    return TraversalState(pt, qt, pinned, pin, torch.zeros_like(pinned), mod, torch.empty_like(mod))


# paths [B, K, L]; p [B, K, L+1, V]; q [B, K, L, V]
def traversal_verify(paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor, *,
                     rng: torch.Generator, carry: None = None) -> Verdict:
    """Batched traversal verification: every row walks its post-order, one node per step."""
    batch, count, length = paths.shape
    slots = count * (length + 1)
    rows = torch.arange(batch, device=paths.device)
    tree = slot_tree(paths)
    state = initial_state(paths, p, q)
    p_flat = p.reshape(batch, slots, p.shape[-1])
    q_flat = q.reshape(batch, count * length, q.shape[-1])
    u = draw_uniforms(rng, batch, slots + 1, p.device)
    done = torch.zeros(batch, dtype=torch.bool, device=p.device)
    stop = torch.zeros(batch, dtype=torch.int64, device=p.device)
    extra_u = torch.zeros(batch, dtype=torch.int64, device=p.device)
    for step in range(slots):
        y = tree.order[:, step]
        w = traversal_weights(tree, state, length)
        accept = u[:, step] < w.gather(1, y.unsqueeze(1)).squeeze(1)
        stops = ~done & ((y == 0) | accept)
        stop = torch.where(stops, y, stop)
        extra_u = torch.where(stops, step + (y != 0).long(), extra_u)
        reject_batched(tree, state, p_flat, q_flat, y, ~done & ~stops, w, length)
        done |= stops
    changed = state.modified[rows, stop].unsqueeze(-1)
    target = torch.where(changed, state.p_mod[rows, stop], p_flat[rows, stop].double())
    extra = sample_inverse_cdf(target, u.gather(1, extra_u.unsqueeze(1)).squeeze(1))
    path = stop // (length + 1)
    return assemble_verdict(paths[rows, path], Outcome(stop % (length + 1), extra), path)
