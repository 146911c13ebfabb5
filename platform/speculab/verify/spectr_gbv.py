"""SpecTr-GBV (Lin et al., "SpecTr-GBV: Multi-Draft Block Verification"): Alg. 1 with eq. 2-4,
and the distribution modification of Alg. 2 carried into the next round (Alg. 3).

CAREFUL: that paper writes p for the DRAFT and q for the TARGET. This module uses the BV names
throughout (p target, q draft); with T(x^i), D(x^i) the joint target and draft masses of a
prefix since the round started (under the round's modified target) and
R(y) = T(y) (1 - min(D(y) / T(y), 1))^K:

    eq. 2   h_i = (sum_x R(x^i x) - R(x^i)) / (1 - (1 - D(x^i))^K - T(x^i) + sum_x R(x^i x))
    eq. 3   h_L = T(x^L) [1 - (1 - min(D(x^L) / T(x^L), 1))^K] / (1 - (1 - D(x^L))^K)
    eq. 4   y ~ R(x^tau .) normalised        (Alg. 2 modifies the next L - tau - 1 positions alike)

Each distinct drafted prefix gets one coin: a prefix rejected on one path is skipped on the
others (the set H of Alg. 1). For K = 1 this is greedy block verification: lossless over rounds
and at the Lemma 5.1 bound. For K >= 2 this scan is NOT lossless and is therefore not registered:
Lemma A.1 (eq. 7) adds the acceptance masses of sibling sub-blocks as if at most one were drafted,
but two i.i.d. drafts can carry two siblings whose coins both succeed, and only one is kept (at
L = 1, K = 2, target (1/2, 1/2), draft (0.9, 0.1) the first token comes out (0.457, 0.543)). A
selection accepting each sub-block v with probability A(v) - sum_x A(v x) exists and makes eq. 4
and Alg. 2 lossless at the bound (tests/verify/test_spectr_gbv.py finds it by an LP over every
drafted tuple); a closed form for it is open.
"""

from __future__ import annotations

import torch

from .decisions import Decisions
from .modification import ModifiedPath, ModifiedTarget, modification_weights, modify_path, next_carry
from .primitives import residual_or_target, token_probs
from .verdict import Verdict, reference_verdict


# tokens [..., L]; p [..., L, V] (rows before each token); q [..., L, V]
def absolute_masses(tokens: torch.Tensor, p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``[..., L+1]`` float64 joint masses T(x^i), D(x^i) (eq. 2-3 need them unscaled)."""
    ones = torch.ones_like(tokens[..., :1], dtype=torch.float64)
    target = token_probs(p, tokens).to(torch.float64).cumprod(-1)
    draft = token_probs(q, tokens).to(torch.float64).cumprod(-1)
    return torch.cat([ones, target], -1), torch.cat([ones, draft], -1)


# target, draft [...] joint masses T, D; paths: K
def own_residual(target: torch.Tensor, draft: torch.Tensor, paths: int) -> torch.Tensor:
    """R(x^i) = T (1 - min(D / T, 1))^K = (T - D)_+^K / T^(K-1), 0 where T = 0."""
    excess = (target - draft).clamp_min(0)
    return excess * (excess / torch.where(target > 0, target, 1)) ** (paths - 1)


# draft [...]; paths: K
def some_draft_has(draft: torch.Tensor, paths: int) -> torch.Tensor:
    """1 - (1 - D)^K, the chance a prefix of mass D is among K i.i.d. drafts (stable for tiny D)."""
    return -torch.expm1(paths * torch.log1p(-draft.clamp_max(1)))


# target, draft [...] joint masses; p, q [..., V] next-token rows; paths: K
def children_residual(
    target: torch.Tensor, draft: torch.Tensor, p: torch.Tensor, q: torch.Tensor, paths: int
) -> torch.Tensor:
    """sum_x R(x^i x), computed on the pair scaled to max(T, D) = 1 (no underflow in float32)."""
    scale = torch.maximum(target, draft)
    scale = torch.where(scale > 0, scale, 1)
    weights = modification_weights(target / scale, p, draft / scale, q, paths)
    return scale * weights.sum(-1).to(torch.float64)


# target, draft, children [...]; paths: K
def subblock_acceptance(target: torch.Tensor, draft: torch.Tensor, children: torch.Tensor, paths: int) -> torch.Tensor:
    """SpecTr-GBV eq. 2 (1 where the event it conditions on has probability 0)."""
    numerator = children - own_residual(target, draft, paths)
    denominator = some_draft_has(draft, paths) - target + children
    return torch.where(denominator > 0, numerator / torch.where(denominator > 0, denominator, 1), 1.0)


# target, draft [...] joint masses of the whole block; paths: K
def block_acceptance_full(target: torch.Tensor, draft: torch.Tensor, paths: int) -> torch.Tensor:
    """SpecTr-GBV eq. 3."""
    denominator = some_draft_has(draft, paths)
    numerator = target - own_residual(target, draft, paths)
    return torch.where(denominator > 0, numerator / torch.where(denominator > 0, denominator, 1), 1.0)


def _carry_for_paths(
    carry: ModifiedTarget | None, batch: int, paths: int, length: int, device: torch.device
) -> ModifiedTarget:
    if carry is None:
        carry = ModifiedTarget.empty(batch, length - 1, paths, device)
    return carry


# modified: rows of B*K flattened paths; index [B] flattened row of each prompt's chosen path
def _chosen(modified: ModifiedPath, index: torch.Tensor) -> ModifiedPath:
    return ModifiedPath(modified.p[index], modified.a[index], modified.s[index])


# paths [K, L]; p [K, L+1, V]; q [K, L, V]; carry: batch-of-one ModifiedTarget or None
def spectr_gbv_verify_reference(
    paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor, decisions: Decisions, carry: ModifiedTarget | None = None
) -> Verdict:
    """SpecTr-GBV Alg. 1 for one prompt, against the target modified by earlier rounds."""
    count, length = paths.shape
    carry = _carry_for_paths(carry, 1, count, length, p.device)
    modified = modify_path(carry.select(torch.zeros(count, dtype=torch.int64)), paths, p, q)
    target_rows = modified.p
    t_mass, d_mass = absolute_masses(paths, target_rows[:, :length], q)
    rejected: set[tuple[int, ...]] = set()  # H
    tau, f = 0, 0
    for k in range(count):
        for i in range(tau + 1, length + 1):
            prefix = tuple(paths[k, :i].tolist())
            if prefix in rejected:
                continue
            if i < length:
                children = children_residual(t_mass[k, i], d_mass[k, i], target_rows[k, i], q[k, i], count)
                h = subblock_acceptance(t_mass[k, i], d_mass[k, i], children, count)  # eq. 2
            else:
                h = block_acceptance_full(t_mass[k, i], d_mass[k, i], count)  # eq. 3
            if decisions.bernoulli(h):
                tau, f = i, k
            else:
                rejected.add(prefix)
        if tau == length:
            break
    if tau == length:
        y = decisions.categorical(target_rows[f, length])
    else:
        weights = modification_weights(t_mass[f, tau], target_rows[f, tau], d_mass[f, tau], q[f, tau], count)
        y = decisions.categorical(residual_or_target(weights, target_rows[f, tau]))  # eq. 4
    chosen = torch.tensor([f])
    new_carry = next_carry(
        carry,
        _chosen(modified, chosen),
        p[chosen],
        q[chosen],
        torch.tensor([tau]),
        torch.tensor([y]),
        t_mass[f, tau].reshape(1),
        d_mass[f, tau].reshape(1),
    )
    return reference_verdict(paths[f], tau, y, f, new_carry)
