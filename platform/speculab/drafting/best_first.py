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
Chunk maxima of the vocabulary give such prefixes (the argmax chain with one chunk's best
token appended) and locate the chunks that can hold reachable tokens, so the vocabulary is
read once by a vectorised max and a few hundred tokens are sorted, instead of a top-B per
depth. `best_first_tree_reference` takes the full top-K per depth (K = min(B, V)). Both run the same heap. `chain_tree` is the single-path baseline (argmax per
depth). This module knows no model; the verifier is `speculab.verify.walk`.
"""

from __future__ import annotations

import heapq

import torch

from speculab.drafting.tree import DraftTree

CHUNK = 256  # largest vocabulary chunk whose maximum stands for it when locating reachable tokens
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


def _tree_rows(ranks: list[tuple[int, ...]], ids: list[list[int]]) -> list[tuple[int, int, int]]:
    """(token, parent, depth) of every non-root node from rank tuples in pop order."""
    node_of: dict[tuple[int, ...], int] = {(): 0}
    nodes = []
    for node, rank_tuple in enumerate(ranks, start=1):
        node_of[rank_tuple] = node
        nodes.append((ids[len(rank_tuple) - 1][rank_tuple[-1]], node_of[rank_tuple[:-1]], len(rank_tuple)))
    return nodes


def node_paths(parents: torch.Tensor, depth: torch.Tensor, length: int) -> torch.Tensor:
    """[B, N, L+1] root-to-node path of every node (column = depth), -1 past the node's depth.

    parents, depth: [B, N]. Path k ends at node k, so a walk that stops at node k reports
    path k and `engine.accepted_nodes` gathers the accepted nodes like for i.i.d. paths.
    """
    B, N = parents.shape
    paths = torch.full((B, N, length + 2), -1, dtype=torch.long, device=parents.device)
    node = torch.arange(N, device=parents.device).expand(B, N)
    for _ in range(length + 1):
        alive = node >= 0
        at = torch.where(alive, depth.gather(1, node.clamp(min=0)), length + 1)  # sink column L+1
        paths.scatter_(2, at[..., None], torch.where(alive, node, -1)[..., None])
        node = torch.where(alive, parents.gather(1, node.clamp(min=0)), node)
    return paths[..., : length + 1]


def _draft_tree(rows: list[list[tuple[int, int, int]]], root: torch.Tensor, length: int) -> DraftTree:
    """Pad per-prompt (token, parent, depth) node lists under their roots into a DraftTree."""
    B, N = len(rows), 1 + max(len(nodes) for nodes in rows)
    fields = torch.zeros(B, N, 3, dtype=torch.long)  # token, parent, depth
    fields[:, :, 1] = -1
    valid = torch.zeros(B, N, dtype=torch.bool)
    for b, nodes in enumerate(rows):
        if nodes:
            fields[b, 1 : 1 + len(nodes)] = torch.tensor(nodes)
        valid[b, : 1 + len(nodes)] = True
    fields[:, 0, 0] = root.cpu()
    tokens, parents, depth = (column.contiguous() for column in fields.unbind(2))
    return DraftTree(tokens, parents, depth, valid, node_paths(parents, depth, length))


def _build(root: torch.Tensor, sorted_q: list[list[torch.Tensor]], sorted_ids: list[list[torch.Tensor]],
           budget: int, length: int) -> DraftTree:
    """Run Alg. 1 per prompt over descending per-depth probabilities and their token ids."""
    rows = []
    for probs, ids in zip(sorted_q, sorted_ids):
        logq = [level.double().log().tolist() for level in probs]
        rows.append(_tree_rows(best_first_ranks(logq, budget), [level.tolist() for level in ids]))
    return _draft_tree(rows, root, length)


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
    return _build(root, [list(v) for v in values], [list(i) for i in ids], budget, q.shape[1])


def _chunk_maxima(q: torch.Tensor, chunk: int) -> torch.Tensor:
    """[R, C] maximum of each vocabulary chunk of `chunk` tokens (the last may be shorter). q [R, V]."""
    full = q.shape[1] // chunk
    maxima = [q[:, : full * chunk].unflatten(1, (full, chunk)).amax(dim=2)] if full else []
    if q.shape[1] > full * chunk:
        maxima.append(q[:, full * chunk:].amax(dim=1, keepdim=True))
    return torch.cat(maxima, dim=1)


# maxima [B, L, C] chunk maxima; returns [B, L] probability below which no token is reachable
def reachability_threshold(maxima: torch.Tensor, budget: int) -> torch.Tensor:
    """The smallest probability a depth-d token of the top-`budget` tree can have.

    With S_{d-1} the best prefix score one depth up and tau a lower bound on the B-th best
    score, a reachable token has log q >= tau - S_{d-1}. tau: the B-th best of the distinct
    prefixes "argmax chain to depth d-1, then one chunk's best token".
    """
    B, L, C = maxima.shape
    best = maxima.amax(dim=2).double().log()  # [B, L]
    above = torch.cumsum(best, dim=1) - best  # [B, L] S_{d-1}, 0 at depth 1
    comb = (above[..., None] + maxima.double().log()).reshape(B, L * C)
    if L * C < budget:  # fewer such prefixes than the budget: keep every token
        return torch.zeros(B, L, dtype=maxima.dtype)
    tau = comb.topk(budget, dim=1).values[:, -1:]  # [B, 1]
    return (torch.exp(tau - above) * (1 - MARGIN)).to(maxima.dtype)


# q [B, L, V] marginals; root [B] bonus tokens
def best_first_tree(q: torch.Tensor, root: torch.Tensor, budget: int) -> DraftTree:
    """The optimal DDTree of `budget` nodes per prompt, rooted at the bonus token (node 0).

    Same tree as `best_first_tree_reference`; reads the vocabulary once (chunk maxima), then
    sorts only tokens at or above each depth's reachability threshold.
    """
    B, L, V = q.shape
    rows = q.float().reshape(B * L, V).contiguous()
    chunk = max(1, min(CHUNK, V * L // (2 * budget)))  # at least 2B chunk maxima feed the bound
    maxima = _chunk_maxima(rows, chunk)  # [B*L, C]
    threshold = reachability_threshold(maxima.reshape(B, L, -1), budget).reshape(B * L)
    hit_row, hit_chunk = (maxima >= threshold[:, None]).nonzero(as_tuple=True)  # chunks with candidates
    token = hit_chunk[:, None] * chunk + torch.arange(chunk)  # [H, chunk]
    inside = token < V
    values = rows.reshape(-1)[(hit_row[:, None] * V + token.clamp(max=V - 1))]
    hit, offset = (inside & (values >= threshold[hit_row, None])).nonzero(as_tuple=True)
    cand_row, cand_token, cand_q = hit_row[hit], token[hit, offset], values[hit, offset]
    # Candidates come in (row, token) order; two stable sorts give (row, q desc, token asc).
    order = torch.sort(cand_q, descending=True, stable=True).indices
    order = order[torch.sort(cand_row[order], stable=True).indices]
    cand_row, cand_token, cand_q = cand_row[order], cand_token[order], cand_q[order]
    found = torch.bincount(cand_row, minlength=B * L)
    starts = torch.cumsum(found, 0) - found
    counts = found.clamp(max=min(budget, V))  # Lemma 1: ranks past K = min(B, V) never enter
    keep_q, keep_ids = [], []
    for r, (start, count) in enumerate(zip(starts.tolist(), counts.tolist())):
        if r % L == 0:
            keep_q.append([])
            keep_ids.append([])
        keep_q[-1].append(cand_q[start : start + count])
        keep_ids[-1].append(cand_token[start : start + count])
    return _build(root, keep_q, keep_ids, budget, L)


# q [B, L, V] marginals; root [B] bonus tokens
def chain_tree(q: torch.Tensor, root: torch.Tensor) -> DraftTree:
    """The single-chain baseline (vanilla DFlash): the argmax token at every depth as one path."""
    return DraftTree.from_paths(root.cpu(), q.argmax(dim=-1).cpu()[:, None, :])


def surrogate_value(tree: DraftTree, q: torch.Tensor) -> torch.Tensor:
    """[B] sum over non-root nodes of the prefix mass prod_i q_i(u_i) (DDTree Prop. 1). q [B, L, V]."""
    B, N = tree.tokens.shape
    depth_index = (tree.depth - 1).clamp(min=0)  # [B, N]
    own = q.double().gather(2, tree.tokens[:, None, :].expand(B, q.shape[1], N)).gather(1, depth_index[:, None, :])[:, 0]
    mass = torch.ones(B, N, dtype=torch.float64)
    for node in range(1, N):
        parent = tree.parents[:, node].clamp(min=0)
        mass[:, node] = mass.gather(1, parent[:, None])[:, 0] * own[:, node]
    real = tree.valid & (tree.depth > 0)
    return (mass * real).sum(dim=1)


__all__ = ["best_first_ranks", "best_first_tree", "best_first_tree_reference", "chain_tree", "surrogate_value"]
