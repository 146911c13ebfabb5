"""DDTree draft trees: the B most probable prefixes under a parallel drafter's marginals.

A one-pass drafter gives per-depth marginals q_1..q_L. Under the factorised surrogate a
prefix u has mass q(u) = prod_i q_i(u_i) and the expected acceptance length of a tree is
the sum of its prefix masses (DDTree Prop. 1), so the optimal tree of B nodes is the top-B
prefixes (Prop. 2), which Alg. 1 enumerates best-first over rank tuples with a heap.

Ties are broken by one total order, (score descending, depth ascending, rank tuple
lexicographic), with ranks ordered by (probability descending, token id ascending). A parent
and an earlier sibling always precede a node in this order, so its top-B set is a valid tree
and the heap pops exactly that set.

`best_first_tree` (the one the engine runs) extracts only the ranks the heap can reach:
every node's score is at most the best prefix score one depth up plus its own log-probability,
and is at least the B-th best score, for which any B distinct prefixes give a lower bound.
Chunk maxima give such prefixes (the argmax chain with one chunk's best token appended) at
two sizes: maxima of 64-token chunks (one vectorised pass over the vocabulary) and maxima
of 8 of those. The B best coarse prefixes bound tau once; the fine maxima inside them bound
it tighter, and locate the fine chunks that can hold reachable tokens, so a few hundred
tokens are sorted instead of a top-B per depth. The heap then runs per prompt in Python
(about 0.4 ms at B = 512). `best_first_tree_levels` builds the same tree with sorts on q's
device, level by level: no host read and static shapes, so it runs on a GPU and under capture
(`best_first` picks it there). `best_first_tree_reference` takes the full top-K per depth
(K = min(B, V)) and runs the same heap. `chain_tree` is the single-path baseline (argmax
per depth). This module knows no model; the verifier is `speculab.verify.ddtree_walk`.
"""

from __future__ import annotations

import heapq
from array import array

import torch

from speculab.device.hostreads import reads_free, upload
from speculab.drafting.tree import DraftTree

FINE = 64  # largest token chunk whose maximum stands for it when locating reachable tokens
GROUP = 8  # fine chunks per coarse chunk (the first, cheap bound)
MARGIN = 1e-5  # relative slack on the reachability threshold: float rounding never drops a token


def best_first_ranks(logq: list[list[float]], budget: int) -> list[tuple[int, ...]]:
    """Alg. 1: the top-`budget` rank tuples in pop order (0-based ranks).

    logq[d][r]: log-probability of the rank-r token at depth d (descending; lists may stop
    early, ranks past the end do not exist). A node's score is its parent's score plus its
    own log-probability, summed from depth 1, so every implementation rounds alike.
    """
    depth_count = len(logq)
    heap: list[tuple[float, int, tuple[int, ...], float]] = []  # (-score, depth, ranks, parent score)
    if depth_count and logq[0]:
        heap.append((-logq[0][0], 1, (0,), 0.0))
    popped: list[tuple[int, ...]] = []
    while heap and len(popped) < budget:
        neg_score, depth, ranks, parent_score = heapq.heappop(heap)
        popped.append(ranks)
        level, rank = logq[depth - 1], ranks[-1]
        if rank + 1 < len(level):  # next sibling
            sibling = parent_score + level[rank + 1]
            heapq.heappush(heap, (-sibling, depth, ranks[:-1] + (rank + 1,), parent_score))
        if depth < depth_count and logq[depth]:  # first child
            child = -neg_score + logq[depth][0]
            heapq.heappush(heap, (-child, depth + 1, ranks + (0,), -neg_score))
    return popped


def _tree_rows(ranks: list[tuple[int, ...]], ids: list[list[int]]) -> tuple[list[int], list[int], list[int]]:
    """Token, parent and depth lists of the non-root nodes, from rank tuples in pop order."""
    node_of: dict[tuple[int, ...], int] = {(): 0}
    tokens, parents, depths = [], [], []
    for node, rank_tuple in enumerate(ranks, start=1):
        node_of[rank_tuple] = node
        tokens.append(ids[len(rank_tuple) - 1][rank_tuple[-1]])
        parents.append(node_of[rank_tuple[:-1]])
        depths.append(len(rank_tuple))
    return tokens, parents, depths


def _longs(values: list[int]) -> torch.Tensor:
    """An int64 tensor from a list of ints, through a buffer (several times faster than torch.tensor)."""
    return torch.frombuffer(array("q", values), dtype=torch.int64) if values else torch.zeros(0, dtype=torch.long)


def node_paths(parents: torch.Tensor, depth: torch.Tensor, length: int) -> torch.Tensor:
    """[B, N, L+1] root-to-node path of every node (column = depth), -1 past the node's depth.

    parents, depth: [B, N]. Path k ends at node k, so a walk that stops at node k reports
    path k and `core.engine.accepted_nodes` gathers the accepted nodes like for i.i.d. paths.
    """
    B, N = parents.shape
    up = parents.clamp(min=0)  # the root (and padding) point at node 0, so climbing saturates
    ancestors = [torch.arange(N, device=parents.device).expand(B, N)]
    for _ in range(length):
        ancestors.append(up.gather(1, ancestors[-1]))
    climb = torch.stack(ancestors, dim=2)  # [B, N, L+1] ancestor t levels up
    column = torch.arange(length + 1, device=parents.device)
    steps_up = depth[..., None] - column  # [B, N, L+1] the ancestor at column c is depth - c levels up
    return torch.where(steps_up >= 0, climb.gather(2, steps_up.clamp(min=0)), -1)


def padded_tree(rows: list[tuple[list[int], list[int], list[int]]], root: torch.Tensor, length: int) -> DraftTree:
    """Pad per-prompt (tokens, parents, depths) lists of non-root nodes under their roots into a DraftTree."""
    sizes = [len(tokens) for tokens, _, _ in rows]
    B, N = len(rows), 1 + max(sizes)
    valid = torch.arange(N) < 1 + _longs(sizes)[:, None]  # [B, N]
    below_root = valid.clone()
    below_root[:, 0] = False  # masked assignment fills these slots in row-major order, i.e. rows concatenated
    tokens = torch.zeros(B, N, dtype=torch.long)
    parents = torch.full((B, N), -1, dtype=torch.long)
    depth = torch.zeros(B, N, dtype=torch.long)
    for field, column in ((tokens, 0), (parents, 1), (depth, 2)):
        field[below_root] = _longs([value for row in rows for value in row[column]])
    tokens[:, 0] = root.cpu()
    return DraftTree(tokens, parents, depth, valid, node_paths(parents, depth, length))


def _build(
    root: torch.Tensor, logq: list[list[list[float]]], ids: list[list[list[int]]], budget: int, length: int
) -> DraftTree:
    """Run Alg. 1 per prompt over descending per-depth log-probabilities and their token ids.

    logq[b][d], ids[b][d]: prompt b's depth-d ranks (log of the float32 probability in float64).
    """
    rows = [_tree_rows(best_first_ranks(levels, budget), level_ids) for levels, level_ids in zip(logq, ids)]
    return padded_tree(rows, root, length)


def ranked(q: torch.Tensor, keep: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Descending probabilities and token ids [..., keep], ties to the lower token id. q [..., V] float32 >= 0.

    One top-k over unique int64 keys (the float's bits, which order like non-negative floats,
    then the reversed token id), so ties cannot fall either way at the cut.
    """
    V = q.shape[-1]
    shift = max(1, (V - 1).bit_length())
    key = (q.view(torch.int32).long() << shift) | (V - 1 - torch.arange(V, device=q.device))
    ids = key.topk(keep, dim=-1).indices
    return q.gather(-1, ids), ids


# q [B, L, V] marginals; root [B] bonus tokens
def best_first_tree_reference(q: torch.Tensor, root: torch.Tensor, budget: int) -> DraftTree:
    """Alg. 1 as written: a full top-K (K = min(B, V)) per depth, then the heap."""
    values, ids = ranked(q.float().contiguous(), min(budget, q.shape[-1]))
    return _build(root, values.double().log().tolist(), ids.tolist(), budget, q.shape[1])


def _chunk_maxima(q: torch.Tensor, chunk: int) -> torch.Tensor:
    """[R, C] maximum of each run of `chunk` columns (the last may be shorter). q [R, V]."""
    full = q.shape[1] // chunk
    maxima = [q[:, : full * chunk].unflatten(1, (full, chunk)).amax(dim=2)] if full else []
    if q.shape[1] > full * chunk:
        maxima.append(q[:, full * chunk :].amax(dim=1, keepdim=True))
    return torch.cat(maxima, dim=1)


# comb [B, M] scores of distinct prefixes; above [B, L]; returns [B, L] probability threshold
def reachability_threshold(comb: torch.Tensor, above: torch.Tensor, budget: int) -> torch.Tensor:
    """The smallest probability a depth-d token of the top-`budget` tree can have.

    A reachable depth-d token has log q >= tau - S_{d-1}, with S_{d-1} (`above`) the best
    prefix score one depth up and tau a lower bound on the B-th best score: the B-th best
    of any B distinct prefixes (`comb`). Fewer than B of them: no bound, keep every token.
    """
    if comb.shape[1] < budget:
        return torch.zeros_like(above)
    tau = comb.topk(budget, dim=1).values[:, -1:]  # [B, 1]
    return torch.exp(tau - above) * (1 - MARGIN)


# fine [B*L, F] chunk maxima, coarse [B*L, C] maxima of `group` fine ones, above [B, L]; returns [B*L] float32
def refined_threshold(
    fine: torch.Tensor, coarse: torch.Tensor, above: torch.Tensor, group: int, budget: int
) -> torch.Tensor:
    """Reachability threshold from the B best "argmax chain, then one fine chunk's best token" prefixes.

    The coarse prefixes bound tau once; the fine maxima inside the B best coarse chunks are
    B * group further distinct prefixes whose B-th best is a tighter bound, found without a
    top-B over every fine chunk.
    """
    B, L = above.shape
    F, C = fine.shape[1], coarse.shape[1]
    if budget > L * C:
        return torch.zeros(B * L, dtype=fine.dtype)
    comb = (above[..., None] + coarse.double().log().reshape(B, L, C)).reshape(B, L * C)
    best = comb.topk(budget, dim=1).indices  # [B, budget] the B best coarse prefixes
    row = torch.arange(B)[:, None] * L + best // C  # [B, budget] row of q
    cols = (best % C)[..., None] * group + torch.arange(group)  # [B, budget, group] fine chunk
    values = fine[row[..., None], cols.clamp(max=F - 1)].double().log()
    fine_comb = torch.where(cols < F, above.reshape(-1)[row][..., None] + values, -torch.inf)  # no duplicates
    return reachability_threshold(fine_comb.reshape(B, -1), above, budget).reshape(B * L).to(fine.dtype)


# rows [R, V], fine [R, F] maxima of `chunk` tokens, threshold [R]; returns candidates (row, token, q)
def reachable_tokens(
    rows: torch.Tensor, fine: torch.Tensor, chunk: int, threshold: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every token at or above its row's threshold, reading only the full chunks that hold one.

    Within a row, candidates come in token order (full chunks, then the short tail chunk).
    """
    full = rows.shape[1] // chunk
    hit_row, hit_chunk = (fine[:, :full] >= threshold[:, None]).nonzero(as_tuple=True)
    values = rows[:, : full * chunk].unflatten(1, (full, chunk))[hit_row, hit_chunk]  # [H, chunk]
    hit, offset = (values >= threshold[hit_row, None]).nonzero(as_tuple=True)
    tail_row, tail_token = (rows[:, full * chunk :] >= threshold[:, None]).nonzero(as_tuple=True)
    tail_token = tail_token + full * chunk
    return (
        torch.cat([hit_row[hit], tail_row]),
        torch.cat([hit_chunk[hit] * chunk + offset, tail_token]),
        torch.cat([values[hit, offset], rows[tail_row, tail_token]]),
    )


# q [B, L, V] marginals; root [B] bonus tokens
def best_first_tree(q: torch.Tensor, root: torch.Tensor, budget: int) -> DraftTree:
    """The optimal DDTree of `budget` nodes per prompt, rooted at the bonus token (node 0).

    Same tree as `best_first_tree_reference`; reads the vocabulary once (fine chunk maxima),
    then sorts only tokens at or above each depth's reachability threshold.
    """
    B, L, V = q.shape
    rows = q.float().reshape(B * L, V).contiguous()
    chunk = max(1, min(FINE, V * L // (2 * budget)))
    fine = _chunk_maxima(rows, chunk)  # [B*L, F]
    group = max(1, min(GROUP, fine.shape[1] * L // (2 * budget)))  # at least 2B coarse maxima feed the bound
    coarse = _chunk_maxima(fine, group)  # [B*L, C]
    best = coarse.amax(dim=1).double().log().reshape(B, L)
    above = torch.cumsum(best, dim=1) - best  # [B, L] S_{d-1}, 0 at depth 1
    threshold = refined_threshold(fine, coarse, above, group, budget)
    cand_row, cand_token, cand_q = reachable_tokens(rows, fine, chunk, threshold)
    # One stable sort on (row asc, q desc) keeps the (row, token) input order among ties.
    key = (cand_row << 31) | (torch.iinfo(torch.int32).max - cand_q.view(torch.int32).long())
    order = torch.sort(key, stable=True).indices
    logq = cand_q[order].double().log().tolist()
    tokens = cand_token[order].tolist()
    found = torch.bincount(cand_row, minlength=B * L)
    starts = (torch.cumsum(found, 0) - found).tolist()
    keep = min(budget, V)  # Lemma 1: ranks past K = min(B, V) never enter
    spans = [(start, start + min(count, keep)) for start, count in zip(starts, found.tolist())]
    level_logq = [[logq[a:b] for a, b in spans[p * L : (p + 1) * L]] for p in range(B)]
    level_ids = [[tokens[a:b] for a, b in spans[p * L : (p + 1) * L]] for p in range(B)]
    return _build(root, level_logq, level_ids, budget, L)


# q [B, L, V] marginals; root [B] bonus tokens
def best_first_tree_levels(q: torch.Tensor, root: torch.Tensor, budget: int) -> DraftTree:
    """The same tree as `best_first_tree`, built level by level with sorts on q's device: no host
    read and static shapes, so it runs on a GPU and under capture (the heap is a Python loop).

    Every prefix of the top-B tree is itself in it, so at each depth only the best B prefixes
    (in the total order of the module docstring) can hold a node or a node's ancestor: depth d
    extends the kept depth-(d-1) prefixes by the K = min(B, V) ranked tokens and keeps its best
    B. Kept prefixes are stored in rank-tuple order, so a stable descending sort on the score of
    candidates listed parent-major breaks ties exactly as the heap does; the union over depths,
    sorted on (score descending, depth, rank tuple), is the heap's pop order.
    """
    B, L, V = q.shape
    K = min(budget, V)
    values, ids = ranked(q.float().contiguous(), K)  # [B, L, K]
    logq = values.double().log()
    scores = [logq[:, 0]]  # per depth [B, M_d], kept prefixes in rank-tuple order
    tokens = [ids[:, 0]]
    parent_pos = [torch.full_like(ids[:, 0], -1)]
    for depth in range(1, L):
        M = scores[-1].shape[1]
        candidates = (scores[-1][:, :, None] + logq[:, depth, None, :]).reshape(B, M * K)  # parent-major
        keep = min(budget, M * K)
        best = torch.sort(candidates, dim=1, descending=True, stable=True).indices[:, :keep]
        best = torch.sort(best, dim=1).values  # back to rank-tuple order
        scores.append(candidates.gather(1, best))
        tokens.append(ids[:, depth].gather(1, best % K))
        parent_pos.append(best // K)
    # every kept prefix of every depth, keyed for the heap's order
    width = max(s.shape[1] for s in scores)
    all_scores = torch.cat([torch.nn.functional.pad(s, (0, width - s.shape[1]), value=-torch.inf) for s in scores], 1)
    exists = torch.cat([torch.arange(width, device=q.device) < s.shape[1] for s in scores])  # [L * width]
    order = torch.sort(all_scores, dim=1, descending=True, stable=True).indices
    # padding slots last, before even a real prefix of score -inf (a zero-probability token)
    order = order.gather(1, torch.sort((~exists[order]).to(torch.uint8), dim=1, stable=True).indices)
    nodes = min(budget, sum(s.shape[1] for s in scores))
    chosen = order[:, :nodes]  # [B, n] slot (depth * width + position) of each node, in pop order
    node_of = torch.zeros(B, L * width, dtype=torch.long, device=q.device)
    node_of.scatter_(1, chosen, torch.arange(1, nodes + 1, device=q.device).expand(B, -1))
    pad = [torch.nn.functional.pad(t, (0, width - t.shape[1])) for t in (*tokens, *parent_pos)]
    flat_tokens, flat_parent = torch.cat(pad[:L], 1), torch.cat(pad[L:], 1)
    depth_of = chosen // width  # 0-based depth of each node's last token
    parent_slot = (depth_of - 1) * width + flat_parent.gather(1, chosen)
    parents = torch.where(depth_of > 0, node_of.gather(1, parent_slot.clamp(min=0)), 0)
    tree_tokens = torch.cat([upload(root, q.device)[:, None], flat_tokens.gather(1, chosen)], 1)
    tree_parents = torch.cat([torch.full((B, 1), -1, device=q.device, dtype=torch.long), parents], 1)
    tree_depth = torch.cat([torch.zeros(B, 1, dtype=torch.long, device=q.device), depth_of + 1], 1)
    valid = torch.ones_like(tree_tokens, dtype=torch.bool)
    return DraftTree(tree_tokens, tree_parents, tree_depth, valid, node_paths(tree_parents, tree_depth, L))


# q [B, L, V] marginals; root [B] bonus tokens
def best_first(q: torch.Tensor, root: torch.Tensor, budget: int) -> DraftTree:
    """The DDTree the engine builds: the heap over reachable ranks where q is on the CPU (a few
    hundred sorted tokens and a Python loop: fastest there), the level sorts elsewhere (no host read)."""
    build = best_first_tree if reads_free(q) else best_first_tree_levels
    return build(q, root, budget)


# q [B, L, V] marginals; root [B] bonus tokens
def chain_tree(q: torch.Tensor, root: torch.Tensor) -> DraftTree:
    """The single-chain baseline (vanilla DFlash): the argmax token at every depth as one path."""
    return DraftTree.from_paths(upload(root, q.device), q.argmax(dim=-1)[:, None, :])


def surrogate_value(tree: DraftTree, q: torch.Tensor) -> torch.Tensor:
    """[B] sum over non-root nodes of the prefix mass prod_i q_i(u_i) (DDTree Prop. 1). q [B, L, V]."""
    B, N = tree.tokens.shape
    depth_index = (tree.depth - 1).clamp(min=0)  # [B, N]
    own = (
        q.double().gather(2, tree.tokens[:, None, :].expand(B, q.shape[1], N)).gather(1, depth_index[:, None, :])[:, 0]
    )
    mass = torch.ones(B, N, dtype=torch.float64)
    for node in range(1, N):
        parent = tree.parents[:, node].clamp(min=0)
        mass[:, node] = mass.gather(1, parent[:, None])[:, 0] * own[:, node]
    real = tree.valid & (tree.depth > 0)
    return (mass * real).sum(dim=1)


__all__ = [
    "best_first",
    "best_first_ranks",
    "best_first_tree",
    "best_first_tree_levels",
    "best_first_tree_reference",
    "chain_tree",
    "surrogate_value",
]
