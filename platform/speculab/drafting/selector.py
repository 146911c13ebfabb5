"""DFlash2's draft law: K candidate tokens per block position, each drawn given the one before it.

DFlash2's candidate selector keeps the top K tokens of the drafter's logits at every drafted
position d and scores candidate c given the candidate p drafted at d - 1 (at d = 0, given the root:
the bonus token every block starts from). At the sampling temperature T the draft of depth d is
drawn from softmax(score[d, p, :] / T) over the K candidates, given the p drawn before it; at T = 0
it is the argmax (the selector's best path, walked from the root). The draft is therefore a Markov
chain over the candidates: q(x_d | x_<d) = q_d(x_d | x_{d-1}), explicit for every drafted token,
which is what the path verifiers (token, block, greedy block, the multi-path walks with i.i.d.
paths) need, scattered into the vocabulary (zero outside the candidates).

A DDTree over the selector (`selector_tree`) holds the `budget` prefixes of highest probability
under this chain: a prefix's probability is the product of its conditionals, not of per-depth
marginals. Best-first: pop the best node, push its first child (the best candidate given it) and its
next sibling (the next candidate given its parent); each row of conditionals is ranked once. The
tree is a deterministic function of the law, so the DDTree walk (`speculab.verify.ddtree_walk`),
which samples the target, is lossless on it at every temperature.

This module knows no model: the law comes from `models.dflash.DFlash2LM`.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import torch

from speculab.drafting.best_first import padded_tree
from speculab.drafting.sampling import sample_with, truncate_probs
from speculab.drafting.tree import DraftTree


@dataclass(frozen=True)
class SelectorLaw:
    """A block's draft law at one temperature (one-hot rows at T = 0)."""

    candidates: torch.Tensor  # [B, L, K] int64 distinct tokens at each depth
    # [B, L, K, K] float32 q(candidate c at depth d | candidate p at depth d - 1), row p; at depth 0
    # every row is the same (given the root)
    conditionals: torch.Tensor
    vocab_size: int

    def truncated(self, top_k: int, top_p: float) -> SelectorLaw:
        """The law with each conditional row truncated for the draft (`sampling.truncate_probs`)."""
        return SelectorLaw(self.candidates, truncate_probs(self.conditionals, top_k, top_p), self.vocab_size)


# law; u [B, P, L] uniforms in [0, 1) -> (indices [B, P, L] into each depth's candidates, rows [B, P, L, K])
def walk(law: SelectorLaw, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """P paths a row, depth d drawn by u[..., d] from the conditional row its depth d - 1 draw picks
    (inverse CDF, `sampling.sample_with`): one-hot rows walk the best path whatever u is."""
    B, L, K, _ = law.conditionals.shape
    P = u.shape[1]
    previous = torch.zeros(B, P, dtype=torch.long, device=law.conditionals.device)
    indices, rows = [], []
    for d in range(L):
        row = law.conditionals[:, d].gather(1, previous[..., None].expand(B, P, K))  # [B, P, K]
        previous = sample_with(row, u[:, :, d : d + 1])[..., 0].clamp(max=K - 1)  # [B, P]
        indices.append(previous)
        rows.append(row)
    return torch.stack(indices, dim=2), torch.stack(rows, dim=2)


# indices [B, P, L] -> tokens [B, P, L]
def tokens_of(law: SelectorLaw, indices: torch.Tensor) -> torch.Tensor:
    B, P, L = indices.shape
    return law.candidates[:, None].expand(B, P, L, -1).gather(3, indices[..., None])[..., 0]


# rows [B, P, L, K] -> [B, P, L, V]
def scattered(law: SelectorLaw, rows: torch.Tensor) -> torch.Tensor:
    """Conditional rows over the candidates as distributions over the vocabulary (zero elsewhere)."""
    B, P, L, K = rows.shape
    out = torch.zeros(B, P, L, law.vocab_size, dtype=rows.dtype, device=rows.device)
    return out.scatter_(3, law.candidates[:, None].expand(B, P, L, K), rows)


# u [B, P, L] -> (paths [B, P, L], q [B, P, L, V])
def selector_paths(law: SelectorLaw, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """P i.i.d. paths drawn from the chain, and the q that drew each of their tokens."""
    indices, rows = walk(law, u)
    return tokens_of(law, indices), scattered(law, rows)


def selector_marginals(law: SelectorLaw) -> torch.Tensor:
    """q [B, L, V]: the probability that the draft's depth-d token is each token (the chain's
    marginals, by the forward recursion), for what the loop reports of a tree's depths."""
    m = law.conditionals[:, 0, 0]  # [B, K]
    marginals = [m]
    for d in range(1, law.conditionals.shape[1]):
        m = (m[:, None, :] @ law.conditionals[:, d])[:, 0]  # [B, K]
        marginals.append(m)
    return scattered(law, torch.stack(marginals, dim=1)[:, None])[:, 0]


def _ranked_rows(logq: list[list[list[float]]], ids: list[list[int]]) -> list[list[list[int]]]:
    """Per depth and predecessor, the candidate indices by (log q descending, token id ascending)."""
    return [
        [sorted(range(len(row)), key=lambda c: (-row[c], ids[d][c])) for row in rows] for d, rows in enumerate(logq)
    ]


def selector_ranks(logq: list[list[list[float]]], ids: list[list[int]], budget: int) -> list[tuple[int, ...]]:
    """The top-`budget` prefixes of one row as candidate-index tuples, in pop order.

    logq[d][p][c]: log q(candidate c at depth d | candidate p at depth d - 1); ids[d][c] its token.
    Ties are broken by (depth ascending, ranks lexicographic), the ranks being each node's place among
    its siblings: a parent and an earlier sibling precede a node, so the popped set is a tree. Only
    candidates of positive probability enter it."""
    order = _ranked_rows(logq, ids)
    # (-score, depth, ranks, path of candidate indices, parent's score)
    heap: list[tuple[float, int, tuple[int, ...], tuple[int, ...], float]] = []

    def push(parent_score: float, ranks: tuple[int, ...], path: tuple[int, ...]) -> None:
        """The node of `ranks` under the parent `path` (candidate indices), if it exists."""
        d, predecessor = len(ranks) - 1, path[-1] if path else 0  # depth 0: every row is the root's
        siblings = order[d][predecessor]
        if ranks[-1] < len(siblings):
            c = siblings[ranks[-1]]
            logp = logq[d][predecessor][c]
            if logp > -float("inf"):
                heapq.heappush(heap, (-(parent_score + logp), d + 1, ranks, (*path, c), parent_score))

    if order:
        push(0.0, (0,), ())
    popped: list[tuple[int, ...]] = []
    while heap and len(popped) < budget:
        neg_score, depth, ranks, path, parent_score = heapq.heappop(heap)
        popped.append(path)
        push(parent_score, (*ranks[:-1], ranks[-1] + 1), path[:-1])  # next sibling
        if depth < len(order):
            push(-neg_score, (*ranks, 0), path)  # first child
    return popped


def _rows(paths: list[tuple[int, ...]], ids: list[list[int]]) -> tuple[list[int], list[int], list[int]]:
    """Token, parent and depth lists of the non-root nodes, from candidate paths in pop order."""
    node_of: dict[tuple[int, ...], int] = {(): 0}
    tokens, parents, depths = [], [], []
    for node, path in enumerate(paths, start=1):
        node_of[path] = node
        tokens.append(ids[len(path) - 1][path[-1]])
        parents.append(node_of[path[:-1]])
        depths.append(len(path))
    return tokens, parents, depths


# root [B] the bonus tokens
def selector_tree(law: SelectorLaw, root: torch.Tensor, budget: int) -> DraftTree:
    """DDTree over the selector: per row, the `budget` most probable prefixes under the chain."""
    logq = law.conditionals.double().log().cpu().tolist()  # [B][L][K][K]
    ids = law.candidates.cpu().tolist()  # [B][L][K]
    rows = [_rows(selector_ranks(lq, row_ids, budget), row_ids) for lq, row_ids in zip(logq, ids)]
    return padded_tree(rows, root, law.candidates.shape[1])


# root [B]
def selector_chain(law: SelectorLaw, root: torch.Tensor) -> DraftTree:
    """The selector's best path (the argmax walk from the root) as a one-path tree."""
    B, L = law.candidates.shape[:2]
    greedy = SelectorLaw(law.candidates, _one_hot_rows(law.conditionals), law.vocab_size)
    u = torch.zeros(B, 1, L, dtype=torch.float64, device=law.conditionals.device)  # one-hot rows: any u
    return DraftTree.from_paths(root.to(law.candidates.device), tokens_of(greedy, walk(greedy, u)[0]))


def _one_hot_rows(probs: torch.Tensor) -> torch.Tensor:
    """[..., K] one-hot at each row's argmax (ties to the lower index)."""
    return torch.nn.functional.one_hot(probs.argmax(-1), probs.shape[-1]).to(probs.dtype)
