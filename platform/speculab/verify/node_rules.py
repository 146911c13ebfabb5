"""Per-node multi-draft rules for the top-down tree walks (``verify.multidraft_walk``).

At a node of the tree formed by the K paths, the walk hands a rule the target p and draft q
at that node and the tokens of the n i.i.d. drafted children (one entry per path through the
node, so repeated tokens appear repeatedly). The rule returns the verified token y, whose
distribution must be p; the walk moves to the child with token y, or stops and emits y.

Scalar rules (``NodeRule``) draw through ``Decisions`` so that ``verify.exact`` can enumerate
them; any further rule (the optimal-transport rules under ``verify/ot/``) plugs into the same
walk. The batched rules (``batched_*``) decide the node of every prompt at once and say how
many uniforms each row consumed, in the scalar rule's order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import torch

from .decisions import Decisions, sample_inverse_cdf
from .primitives import clipped_ratio, packed_columns, positive_part, residual_or_target


class NodeRule(Protocol):
    # p [V] target at this node; q [V] draft at this node; drafts [n] int64 tokens of the n
    # i.i.d. drafted children (with multiplicity); returns the verified token y
    def __call__(self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, rng: Decisions) -> int: ...


# p, q [..., V]; k [...] number of drafts (float)
def kseq_rho(p: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """SpecTr K-SEQ: rho* in [1, k] with 1 - (1 - beta)^k = rho beta, beta = sum_x min(q, p / rho).

    Bisection: f(rho) = 1 - (1 - beta)^k - rho beta is >= 0 at rho = 1 and <= 0 at rho = k.
    Only tokens with q < p < k q switch between the two sides of the min inside [1, k]; the
    others are summed once, so each bisection step reads that active set (packed, `packed_columns`;
    the whole vocabulary, zeros outside it, where its size cannot be read). Iterates to the
    precision of p's dtype (a fixed count: no host read).
    """
    shape, vocab = k.shape, p.shape[-1]
    p, q, k = p.reshape(-1, vocab), q.reshape(-1, vocab), k.reshape(-1).to(torch.float64)
    saturated = p >= q * k.to(q.dtype).unsqueeze(1)  # min(q, p / rho) = q for every rho <= k
    unsaturated = p <= q  # = p / rho for every rho >= 1
    fixed_q = torch.where(saturated, q, 0).sum(-1, dtype=torch.float64)
    fixed_p = torch.where(unsaturated & ~saturated, p, 0).sum(-1, dtype=torch.float64)
    columns, filled = packed_columns(~saturated & ~unsaturated)  # [R, W]
    active_p = torch.where(filled, p.gather(1, columns), 0).to(torch.float64)
    active_q = torch.where(filled, q.gather(1, columns), 0).to(torch.float64)
    lo, hi = torch.ones_like(k), k.clamp_min(1)
    steps = int(-math.log2(torch.finfo(p.dtype).eps)) + 4
    for _ in range(steps):
        rho = (lo + hi) / 2
        active = torch.minimum(active_q, active_p / rho.unsqueeze(1)).sum(-1)  # 0 in the unfilled slots
        beta = fixed_q + fixed_p / rho + active
        above = 1 - (1 - beta) ** k - rho * beta >= 0
        lo, hi = torch.where(above, rho, lo), torch.where(above, hi, rho)
    return ((lo + hi) / 2).reshape(shape)


def kseq_rule(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, rng: Decisions) -> int:
    """SpecTr K-SEQ: accept draft i with prob min(1, p(x_i) / (rho* q(x_i))) in order, else
    emit from [p - rho* q]_+ (SpecTr-GBV paper Sec. 3.2, p and q swapped back)."""
    rho = kseq_rho(p, q, torch.tensor(float(drafts.shape[0]), dtype=torch.float64))
    for x in drafts:
        if rng.bernoulli(clipped_ratio(p[x], rho * q[x])):
            return int(x)
    return rng.categorical(residual_or_target(positive_part(1, p, rho.to(p.dtype), q), p))


def specinfer_rule(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, rng: Decisions) -> int:
    """SpecInfer multi-step speculative sampling: try the children in order against a target
    that becomes the normalised residual [P - q]_+ after every rejection."""
    target = p
    for x in drafts:
        if rng.bernoulli(clipped_ratio(target[x], q[x])):
            return int(x)
        target = specinfer_residual(target, q)
    return rng.categorical(target)


# target, q [..., V]
def specinfer_residual(target: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The normalised [P - q]_+ (P itself if that is empty)."""
    residual = residual_or_target(positive_part(1, target, 1, q), target)
    return residual / residual.sum(-1, keepdim=True)


def nss_rule(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, rng: Decisions) -> int:
    """Naive speculative sampling: draw y from p; the walk follows a child with that token."""
    return rng.categorical(p)


NODE_RULES: dict[str, NodeRule] = {"kseq": kseq_rule, "specinfer": specinfer_rule, "nss": nss_rule}


# ---------------------------------------------------------------- batched rules


@dataclass
class NodeDecision:
    """A batched rule's result at one depth."""

    token: torch.Tensor  # [B] int64 verified token y
    consumed: torch.Tensor  # [B] int64 uniforms the row used (the scalar rule's count)


# drafts [B, K] children tokens; alive [B, K] which slots are children of the node
def child_rank(alive: torch.Tensor) -> torch.Tensor:
    """``[B, K]`` order of each alive child among the node's children (its uniform's index)."""
    return (alive.long().cumsum(dim=1) - 1).clamp_min(0)


# tested [B, K] bool which children a rule accepted; rank [B, K]; fallback [B] tokens
def first_accepted(
    tested: torch.Tensor, drafts: torch.Tensor, rank: torch.Tensor, count: torch.Tensor, fallback: torch.Tensor
) -> NodeDecision:
    """The first accepted child, or the fallback after all ``count`` children were rejected."""
    any_accepted = tested.any(dim=1)
    first = tested.to(torch.int8).argmax(dim=1, keepdim=True)
    token = torch.where(any_accepted, drafts.gather(1, first).squeeze(1), fallback)
    consumed = torch.where(any_accepted, rank.gather(1, first).squeeze(1) + 1, count + 1)
    return NodeDecision(token, consumed)


# p, q [B, V]; drafts, alive [B, K]; u [B, K+1] the row's next uniforms
def batched_kseq(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, alive: torch.Tensor, u: torch.Tensor
) -> NodeDecision:
    """``kseq_rule`` for every prompt at once."""
    count = alive.sum(dim=1)
    rho = kseq_rho(p, q, count.to(torch.float64))
    rank = child_rank(alive)
    accept = clipped_ratio(
        p.gather(1, drafts).to(torch.float64), rho.unsqueeze(1) * q.gather(1, drafts).to(torch.float64)
    )
    tested = alive & (u.gather(1, rank) < accept)
    residual = residual_or_target(positive_part(1, p, rho.to(p.dtype).unsqueeze(1), q), p)
    fallback = sample_inverse_cdf(residual, u.gather(1, count.unsqueeze(1)).squeeze(1))
    return first_accepted(tested, drafts, rank, count, fallback)


# p, q [B, V]; drafts, alive [B, K]; u [B, K+1]
def batched_specinfer(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, alive: torch.Tensor, u: torch.Tensor
) -> NodeDecision:
    """``specinfer_rule`` for every prompt at once (a loop over the K child slots)."""
    count = alive.sum(dim=1)
    rank = child_rank(alive)
    target = p
    tested = torch.zeros_like(alive)
    for j in range(drafts.shape[1]):
        x = drafts[:, j : j + 1]
        ratio = clipped_ratio(target.gather(1, x), q.gather(1, x)).squeeze(1).to(torch.float64)
        tested[:, j] = alive[:, j] & (u.gather(1, rank[:, j : j + 1]).squeeze(1) < ratio)
        rejected = (alive[:, j] & ~tested[:, : j + 1].any(dim=1)).unsqueeze(1)
        target = torch.where(rejected, specinfer_residual(target, q), target)
    fallback = sample_inverse_cdf(target, u.gather(1, count.unsqueeze(1)).squeeze(1))
    return first_accepted(tested, drafts, rank, count, fallback)


# p, q [B, V]; drafts, alive [B, K]; u [B, K+1]
def batched_nss(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, alive: torch.Tensor, u: torch.Tensor
) -> NodeDecision:
    """``nss_rule`` for every prompt at once."""
    return NodeDecision(sample_inverse_cdf(p, u[:, 0]), torch.ones_like(drafts[:, 0]))
