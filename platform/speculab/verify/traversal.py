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

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from speculab.device.hostreads import reads_free

from .block import block_acceptance
from .contracts import DrawnPathVerifier
from .decisions import Decisions, sample_inverse_cdf
from .primitives import clipped_ratio, positive_part, rows_to_step, token_probs
from .verdict import Outcome, Verdict, assemble_verdict, reference_verdict


@dataclass
class Node:
    """A node of the draft tree during the traversal (the scalar reference's state)."""

    depth: int
    path: int  # the first path through the node
    parent: int  # node index, -1 for the root
    p: torch.Tensor  # [V] target after the node's prefix (modified on rejections)
    children: list[int] = field(default_factory=list)
    weight: torch.Tensor = field(default_factory=lambda: torch.tensor(1.0, dtype=torch.float64))
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
            assert u.q is not None  # a parent is above the leaves, which alone have no draft
            v = nodes[child]
            x = paths[v.path, v.depth - 1]
            v.weight = clipped_ratio(u.weight * u.p[x], u.q[x]) if u.q[x] > 0 else u.q[x] * 0
            set_weights(nodes, paths, child, alive)


# paths [K, L]: the rejected node's token
def reject(nodes: list[Node], paths: torch.Tensor, y: int, alive: set[int]) -> None:
    """Rejecting y updates its parent z: residual target, new weight, y's token removed from q."""
    z = nodes[nodes[y].parent]
    assert z.q is not None  # a parent is above the leaves, which alone have no draft
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
def traversal_verify_reference(
    paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor, decisions: Decisions, carry: None = None
) -> Verdict:
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
    canonical = (canon == torch.arange(count, device=paths.device)[:, None]) & (
        (depth > 0) | (torch.arange(count, device=paths.device)[:, None] == 0)
    )
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
    """Per-slot state of the batched traversal.

    A rejection at node z replaces its target by the residual [w p - q]_+ of BV eq. 4, kept
    unnormalised with its sum (``p_mass``): p(.|z) is that row over ``p_mass`` once modified
    (``held``), the original row before. Post-order leaves a node's subtree only by visiting
    it, after which its target is read no more (unless it stops the traversal, being the node
    visited), so the modified targets still read are those of the current node's ancestors,
    one per depth: ``stack`` holds them by depth, a fixed [B (L+1), V] table, row b (L+1) + d
    (depth L, a leaf's, is never modified: rows whose residual is not kept write there). The
    draft after z is never stored: it is the original row with the rejected children's tokens
    set to 0, renormalised (the row as given before any rejection).
    """

    pt: torch.Tensor  # [B, S] float64 p(t(v)|parent) under the parent's current target
    qt: torch.Tensor  # [B, S] float64 q(t(v)|parent) under the parent's current draft
    pinned: torch.Tensor  # [B, S] bool: the weight was set by a rejection (the root from the start)
    pin: torch.Tensor  # [B, S] float64 that weight
    rejected: torch.Tensor  # [B, S] bool: the (canonical) node was rejected; its token left q(.|parent)
    held: torch.Tensor  # [B, S] bool: the node's target is modified, in ``stack`` at its depth
    stack: torch.Tensor  # [B (L+1), V] float64 unnormalised modified targets of the ancestors, by depth
    p_mass: torch.Tensor  # [B, S] float64 their sums (1 where not modified)


# tree: slots; state: per-slot edges and pins
def traversal_weights(tree: SlotTree, state: TraversalState, length: int) -> torch.Tensor:
    """``[B, S]`` w(v) = min(1, w(u) p(t(v)|u) / q(t(v)|u)) (0 where q is 0), top-down, pins kept."""
    batch = tree.parent.shape[0]

    def by_depth(t: torch.Tensor) -> torch.Tensor:
        return t.view(batch, -1, length + 1).permute(2, 0, 1)  # [L+1, B, K], a view

    inverse_q = by_depth(torch.where(state.qt > 0, 1 / state.qt, 0.0)).unbind()
    pt, pinned = by_depth(state.pt).unbind(), by_depth(state.pinned).unbind()
    parent_path = (by_depth(tree.parent) // (length + 1)).unbind()  # the path of each parent's canonical slot
    w = by_depth(state.pin).clone(memory_format=torch.contiguous_format)  # w[d] contiguous
    for d in range(1, length + 1):
        fresh = w[d - 1].gather(1, parent_path[d]).mul_(pt[d]).mul_(inverse_q[d]).clamp_max_(1)
        torch.where(pinned[d], w[d], fresh, out=w[d])
    return w.permute(1, 2, 0).reshape(batch, -1)


@dataclass
class Rows:
    """The vocabulary rows a traversal reads, and reusable buffers for copies of them.

    Every step reads a few rows; copying them into the same buffers (``index_select`` with
    ``out=``) avoids touching fresh memory at every step, which costs as much as the arithmetic.
    """

    p: torch.Tensor  # [B*S, V] target rows by slot
    q: torch.Tensor  # [B*K*L, V] draft rows by slot
    p_copy: torch.Tensor  # [B, V] buffer in p's dtype
    q_copy: torch.Tensor  # [B, V] buffer in q's dtype
    residual: torch.Tensor  # [B, V] float64 buffer (rows read from the stack, then the new residuals)

    @classmethod
    def of(cls, p: torch.Tensor, q: torch.Tensor) -> Rows:
        vocab, batch = p.shape[-1], p.shape[0]
        return cls(
            p.reshape(-1, vocab),
            q.reshape(-1, vocab),
            p.new_empty(batch, vocab),
            q.new_empty(batch, vocab),
            q.new_empty(batch, vocab, dtype=torch.float64),
        )


# choose [n] bool; when_true, when_false: [n, V] rows, computed on demand
def rowwise_choice(
    choose: torch.Tensor, when_true: Callable[[], torch.Tensor], when_false: Callable[[], torch.Tensor]
) -> torch.Tensor:
    """``torch.where(choose, when_true, when_false)`` by rows; where host reads are free and every
    row chooses alike, only the chosen rows are read (a pass over [n, V] saved at every step)."""
    if reads_free(choose):
        chosen = int(choose.sum())
        if chosen in (0, len(choose)):
            return when_true() if chosen else when_false()
    return torch.where(choose.unsqueeze(1), when_true(), when_false())


# rows, z [n]: the nodes whose current target row is read
def current_target(state: TraversalState, source: Rows, rows: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """``[n, V]`` the unnormalised current target rows of nodes z (sums: ``p_mass``): float64 rows
    of the stack or p's rows (each copied into a reused buffer)."""
    slots, depths = state.pt.shape[1], state.stack.shape[0] // state.pt.shape[0]
    return rowwise_choice(
        state.held[rows, z],
        lambda: torch.index_select(state.stack, 0, rows * depths + z % depths, out=source.residual[: len(rows)]),
        lambda: torch.index_select(source.p, 0, rows * slots + z, out=source.p_copy[: len(rows)]),
    )


# removed [..., n, S] slots whose token is out of q(.|z); same [n, S, S] slots with equal tokens;
# q_tokens [n, S] q(.|z) at the slots' tokens (original rows); q_sum [n]
def removed_tokens(
    removed: torch.Tensor, same: torch.Tensor, q_tokens: torch.Tensor, q_sum: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[..., n, S]`` which slots carry a removed token (any slot, duplicates included), and
    ``[..., n]`` the factor that renormalises the row without them (1 while none is removed, 0 if
    none is left)."""
    hit = (same & removed.unsqueeze(-2)).any(-1)
    kept = q_sum - torch.where(removed, q_tokens, 0).sum(-1, dtype=torch.float64)
    scale = torch.where(kept > 0, 1 / torch.where(kept > 0, kept, 1), 0.0)
    return hit, torch.where(removed.any(-1), scale, 1.0)


# rows, y [n] the rows stepped and their node y at this step; going [n] which of them reject y
# (the others keep their state); w [B, S] current weights
def reject_batched(
    tree: SlotTree,
    state: TraversalState,
    source: Rows,
    rows: torch.Tensor,
    y: torch.Tensor,
    going: torch.Tensor,
    w: torch.Tensor,
    length: int,
) -> None:
    """``reject`` for the rejecting rows: the parent's residual target, weight and draft, and the
    edges to its children, touching each vocabulary row a few times."""
    z = tree.parent[rows, y]
    slots = tree.parent.shape[1]
    children = tree.parent[rows] == z.unsqueeze(1)  # [n, S]
    children[:, 0] = False
    tokens = tree.token[rows]  # [n, S]
    same = tokens.unsqueeze(2) == tokens.unsqueeze(1)  # [n, S, S]
    count = slots // (length + 1)
    q_slot = rows * count * length + (z // (length + 1)) * length + (z % (length + 1)).clamp_max(length - 1)
    q_z = torch.index_select(source.q, 0, q_slot, out=source.q_copy[: len(rows)])
    q_sum = q_z.sum(-1, dtype=torch.float64)
    q_tokens = q_z.gather(1, tokens)
    rejected_before = state.rejected[rows]
    is_y = torch.arange(slots, device=rows.device) == y.unsqueeze(1)  # [n, S]
    rejected = rejected_before | (going.unsqueeze(1) & is_y)
    state.rejected[rows] = rejected
    # before and after y leaves q(.|z), as one [2, n, S] table
    removed, q_scales = removed_tokens(children & torch.stack([rejected_before, rejected]), same, q_tokens, q_sum)
    (removed_before, removed_after), (q_scale, q_scale_after) = removed, q_scales
    # [w p - q]_+ with p the current target (w p at the removed tokens, where q is 0)
    w_z, p_mass = w[rows, z], state.p_mass[rows, z]
    current = current_target(state, source, rows, z)
    residual = torch.mul(current, (w_z / p_mass).unsqueeze(1), out=source.residual[: len(rows)])
    kept_residual = residual.gather(1, tokens)
    residual.addcmul_(q_z, q_scale.unsqueeze(1), value=-1).clamp_min_(0)
    residual.scatter_(1, tokens, torch.where(removed_before, kept_residual, residual.gather(1, tokens)))
    mass = residual.sum(-1)
    moved = going & (mass > 0)
    # the residual is kept at z's depth (z has a child: < L) where it moved; elsewhere (a held row
    # stays as it was, an unheld one is not read) it goes to the unused depth L
    depth = torch.where(moved, z % (length + 1), length)
    state.stack[rows * (length + 1) + depth] = residual
    state.held[rows, z] |= moved
    state.p_mass[rows, z] = torch.where(moved, mass, p_mass)
    state.pin[rows, z] = torch.where(going, torch.where(moved, block_acceptance(w_z, mass), 0.0), state.pin[rows, z])
    state.pinned[rows, z] |= going
    # edges to z's children under the new rows
    new_p = torch.where(
        moved.unsqueeze(1), residual.gather(1, tokens) / torch.where(moved, mass, 1).unsqueeze(1), state.pt[rows]
    )
    new_q = torch.where(removed_after, 0.0, q_tokens * q_scale_after.unsqueeze(1))
    edges = children & going.unsqueeze(1)
    state.pt[rows] = torch.where(edges, new_p, state.pt[rows])
    state.qt[rows] = torch.where(edges, new_q, state.qt[rows])


# paths [B, K, L]; p [B, K, L+1]; q [B, K, L, V]
def initial_state(paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor) -> TraversalState:
    """Edges from the original rows, the root pinned at weight 1, nothing modified."""
    batch, count, length = paths.shape
    slots = count * (length + 1)
    pt = torch.nn.functional.pad(token_probs(p[:, :, :length], paths).double(), (1, 0)).flatten(1)
    qt = torch.nn.functional.pad(token_probs(q, paths).double(), (1, 0), value=1.0).flatten(1)
    flags = torch.zeros(batch, slots, dtype=torch.bool, device=p.device)
    pinned = flags.clone()
    pinned[:, 0] = True
    ones = torch.ones(batch, slots, dtype=torch.float64, device=p.device)
    # a row of the stack is read only once written (``held``): no need to clear it
    stack = torch.empty(batch * (length + 1), p.shape[-1], dtype=torch.float64, device=p.device)
    return TraversalState(pt, qt, pinned, ones, flags, flags.clone(), stack, ones.clone())


def traversal_uniforms(count: int, length: int) -> int:
    """Uniforms per row: one per visited non-root node (at most the K (L+1) slots), then the extra token's."""
    return count * (length + 1) + 1


# paths [B, K, L]; p [B, K, L+1, V]; q [B, K, L, V]; u [B, K (L+1) + 1]
def traversal_decision(
    paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor, u: torch.Tensor, carry: None = None
) -> Verdict:
    """Batched traversal verification: every row walks its post-order, one node per step.

    Each step rejects at the rows `rows_to_step` names (where host reads are free, the rows
    still walking, and the loop ends when every row has stopped; elsewhere all K (L+1) steps
    over every row, the stopped ones unchanged).
    """
    batch, count, length = paths.shape
    slots = count * (length + 1)
    rows = torch.arange(batch, device=paths.device)
    tree = slot_tree(paths)
    state = initial_state(paths, p, q)
    source = Rows.of(p, q)
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
        done |= stops
        stepped = rows_to_step(~done)
        if stepped.numel() == 0:
            break
        reject_batched(tree, state, source, stepped, y[stepped], ~done[stepped], w, length)
    target = current_target(state, source, rows, stop)
    extra = sample_inverse_cdf(target, u.gather(1, extra_u.unsqueeze(1)).squeeze(1))
    path = stop // (length + 1)
    return assemble_verdict(paths[rows, path], Outcome(stop % (length + 1), extra), path)


traversal_verify = DrawnPathVerifier(traversal_decision, traversal_uniforms)
