"""Greedy multi-path block verification, GBV (GBV paper, Sec. 5, Alg. 1).

Select one of the K i.i.d. drafted paths with the tree-based ranking of eq. 21 (the path
whose sequence of ratios p/q is lexicographically largest), compute the skewed draft
distribution q^Gamma of that selection rule along the chosen path (eq. 22-23), and run block
verification (BV Alg. 2) on the chosen path with target p and draft q^Gamma (Lemma 4.4).
With K = 1 the skewed draft is q and GBV is block verification.

Ranking ties: eq. 21's local order must be injective, so tokens with equal p/q are ordered by
token id (the larger id ranks higher); tokens with q = 0 rank as +inf (they are never drafted
and carry no draft mass, so their place does not change q^Gamma).
"""

from __future__ import annotations

import torch

from .block import block_outcome, block_verify_reference
from .decisions import Decisions, draw_uniforms
from .primitives import SinglePath, select_path, token_probs
from .verdict import Verdict, assemble_verdict


# p [..., V]; q [..., V]
def local_ranking(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """GBV eq. 21: pi(x) = p(x) / q(x), +inf where q(x) = 0 (ties broken by token id)."""
    return torch.where(q > 0, p / torch.where(q > 0, q, 1), torch.inf)


# ---------------------------------------------------------------- scalar reference


# paths [K, L]; p [K, L+1, V]; q [K, L, V]
def select_path_reference(paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor) -> int:
    """GBV Alg. 1 lines 1-3: the path with the lexicographically largest ranking O_k."""
    length = paths.shape[1]
    ratios = token_probs(local_ranking(p[:, :length], q), paths)  # [K, L]

    def ranking(k: int) -> tuple:
        return tuple((float(ratios[k, i]), int(paths[k, i])) for i in range(length))

    return max(range(paths.shape[0]), key=lambda k: (ranking(k), -k))


# draft [L]; p [L+1, V]; q [L, V] along one path
def skewed_draft_reference(draft: torch.Tensor, p: torch.Tensor, q: torch.Tensor, paths: int) -> torch.Tensor:
    """GBV eq. 22-23 literally: ``[L, V]`` conditionals q^Gamma(x | a_{1:t}) along the path."""
    mass = torch.tensor(1.0, dtype=torch.float64)  # q(a_{1:t})
    below = torch.tensor(0.0, dtype=torch.float64)  # sum_j q(a_{1:j}) sum_{pi(t) < pi(a_{j+1})} q(t)
    token_ids = torch.arange(q.shape[-1])
    rows = []
    for t in range(draft.shape[0]):
        pi = local_ranking(p[t], q[t])
        less = (pi[None, :] < pi[:, None]) | ((pi[None, :] == pi[:, None]) & (token_ids[None, :] < token_ids[:, None]))
        lower = below + mass * (less.double() @ q[t].double())
        upper = lower + mass * q[t]
        rows.append((upper ** paths - lower ** paths) / ((below + mass) ** paths - below ** paths))
        x = draft[t]
        below, mass = lower[x], mass * q[t, x]
    return torch.stack(rows)


# paths [K, L]; p [K, L+1, V]; q [K, L, V]
def gbv_verify_reference(paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor,
                         decisions: Decisions, carry: None = None) -> Verdict:
    """GBV Alg. 1: select k0, skew the draft along it, block-verify it."""
    k0 = select_path_reference(paths, p, q)
    skewed = skewed_draft_reference(paths[k0], p[k0], q[k0], paths.shape[0])
    verdict = block_verify_reference(paths[k0:k0 + 1], p[k0:k0 + 1], skewed[None], decisions)
    verdict.path = torch.tensor([k0])
    return verdict


# ---------------------------------------------------------------- batched


# paths [B, K, L]; p [B, K, L+1, V]; q [B, K, L, V]
def select_path_index(paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """GBV Alg. 1 lines 1-3, batched: ``[B]`` index of the lexicographically largest path."""
    length = paths.shape[2]
    ratios = local_ranking(token_probs(p[:, :, :length], paths), token_probs(q, paths)).to(torch.float64)
    candidate = torch.ones(paths.shape[:2], dtype=torch.bool, device=paths.device)
    for i in range(length):
        for key in (ratios[:, :, i], paths[:, :, i].to(torch.float64)):
            key = torch.where(candidate, key, -torch.inf)
            candidate &= key == key.amax(dim=1, keepdim=True)
    return candidate.to(torch.int8).argmax(dim=1)  # the lowest index among equal paths


# hi, lo [..., V]; paths: K
def power_difference_quotient(hi: torch.Tensor, lo: torch.Tensor, paths: int) -> torch.Tensor:
    """(hi^K - lo^K) / (hi - lo) = sum_{j<K} hi^j lo^(K-1-j): no cancellation, defined at hi = lo."""
    total, power = torch.ones_like(hi), torch.ones_like(hi)
    for _ in range(paths - 1):  # G_K = hi^(K-1) + lo G_{K-1}, G_1 = 1
        power = power * hi
        total = power + lo * total
    return total


# ranking [B, V]; q [B, V]
def mass_ranked_below(ranking: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """C(x) = sum of q(t) over tokens t with pi(t) < pi(x) (ties: smaller id first), via a sort."""
    order = torch.sort(ranking, dim=-1, stable=True).indices
    sorted_q = q.gather(-1, order)
    exclusive = sorted_q.cumsum(-1) - sorted_q
    return torch.empty_like(q).scatter_(-1, order, exclusive)


# qx [B, L] draft probability of each drafted token; cx [B, L] draft mass ranked below it
def selection_masses(qx: torch.Tensor, cx: torch.Tensor) -> torch.Tensor:
    """``[B, L]`` u_t = q(a_{1:t}) / (mass ranked at or below a_{1:t}'s subtree), u_0 = 1.

    u_{t+1} = u_t q(a_{t+1}) / hi(a_{t+1}) with hi(x) = 1 - u_t (1 - C(x)) + u_t q(x).
    """
    u = [torch.ones_like(qx[:, 0])]
    for t in range(qx.shape[1] - 1):
        hi = (1 - u[-1] * (1 - cx[:, t])) + u[-1] * qx[:, t]
        u.append(u[-1] * qx[:, t] / hi)
    return torch.stack(u, dim=1)


# path: the selected path (draft [B, L], p [B, L+1, V], q [B, L, V]); paths: K
def skewed_draft_probs(path: SinglePath, paths: int) -> torch.Tensor:
    """GBV eq. 22-23 along the selected path: ``[B, L, V]`` conditionals q^Gamma(x | a_{1:t}).

    With u_t = q(a_{1:t}) / (mass ranked at or below a_{1:t}'s subtree), every quantity is a
    fraction in [0, 1]: lo(x) = 1 - u (1 - C(x)), hi(x) = lo(x) + u q(x), and
    q^Gamma(x | a_{1:t}) = q(x) G(hi, lo) / G(1, 1 - u) with G the power difference quotient,
    so no difference of nearly equal powers is ever formed (stable for K up to 8 and beyond).
    All L positions share one batched sort; with K = 1 the skewed draft is q itself.
    """
    if paths == 1:
        return path.q
    length = path.draft.shape[1]
    below = mass_ranked_below(local_ranking(path.p[:, :length], path.q), path.q)  # C(x), [B, L, V]
    u = selection_masses(token_probs(path.q, path.draft), token_probs(below, path.draft)).unsqueeze(-1)
    lo = 1 - u * (1 - below)
    hi = lo + u * path.q
    return path.q * power_difference_quotient(hi, lo, paths) / power_difference_quotient(
        torch.ones_like(u), 1 - u, paths)


# paths [B, K, L]; p [B, K, L+1, V]; q [B, K, L, V]
def gbv_verify(paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor, *,
               rng: torch.Generator, carry: None = None) -> Verdict:
    """GBV (Alg. 1): path selection, skewed draft, block verification with it."""
    batch, count, length = paths.shape
    chosen = select_path_index(paths, p, q)
    path = select_path(paths, p, q, chosen)
    skewed = SinglePath(path.draft, path.p, skewed_draft_probs(path, count))
    outcome = block_outcome(skewed, draw_uniforms(rng, batch, length + 1, p.device))
    return assemble_verdict(path.draft, outcome, chosen)
