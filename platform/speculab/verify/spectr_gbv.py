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
and at the Lemma 5.1 bound. For K >= 2 this scan is NOT lossless, and the registry marks it so
(`algorithm.allow_lossy=true` runs it): Lemma A.1 (eq. 7) adds the acceptance masses of sibling
sub-blocks as if at most one were drafted, but two i.i.d. drafts can carry two siblings whose
coins both succeed, and only one is kept (at L = 1, K = 2, target (1/2, 1/2), draft (0.9, 0.1)
the first token comes out (0.457, 0.543)). A selection accepting each sub-block v with
probability A(v) - sum_x A(v x) exists and makes eq. 4 and Alg. 2 lossless at the bound
(tests/verify/test_spectr_gbv.py finds it by an LP over every drafted tuple); a closed form
for it is open.
"""

from __future__ import annotations

import torch

from .contracts import DrawnPathVerifier
from .decisions import Decisions, sample_inverse_cdf
from .modification import ModifiedPath, ModifiedTarget, modification_weights, modify_path, next_carry
from .primitives import residual_or_target, token_probs
from .verdict import Outcome, Verdict, assemble_verdict, reference_verdict


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


# t_mass, d_mass [N, L+1] joint masses along N paths; target_rows [N, L+1, V]; q [N, L, V]
def scan_acceptances(
    t_mass: torch.Tensor, d_mass: torch.Tensor, target_rows: torch.Tensor, q: torch.Tensor, paths: int
) -> torch.Tensor:
    """``[N, L]`` the coin h_i of every sub-block x^i, i = 1..L: eq. 2 below L, eq. 3 at L."""
    length = q.shape[1]
    inner = t_mass[:, 1:length], d_mass[:, 1:length]
    children = children_residual(*inner, target_rows[:, 1:length], q[:, 1:length], paths)
    below = subblock_acceptance(*inner, children, paths)
    return torch.cat([below, block_acceptance_full(t_mass[:, length:], d_mass[:, length:], paths)], dim=1)


# paths [B, K, L] -> [B, K, K, L]
def shared_prefixes(paths: torch.Tensor) -> torch.Tensor:
    """``[b, j, k, i-1]``: paths j and k of row b start with the same i tokens."""
    return (paths[:, :, None, :] == paths[:, None, :, :]).cumprod(-1).bool()


def spectr_gbv_uniforms(count: int, length: int) -> int:
    """Uniforms per row: at most one coin per (path, depth), then the extra token's."""
    return count * length + 1


# paths [B, K, L]; p [B, K, L+1, V]; q [B, K, L, V]; uniforms [B, K L + 1]
def spectr_gbv_decision(
    paths: torch.Tensor,
    p: torch.Tensor,
    q: torch.Tensor,
    uniforms: torch.Tensor,
    carry: ModifiedTarget | None = None,
) -> Verdict:
    """SpecTr-GBV Alg. 1-3 over a batch: the reference's scan, one (path, depth) step for all rows at a time.

    Each row consumes its uniforms in the reference's order (one per coin tossed, then one for
    the extra token), so ``replay_decisions(uniforms[b])`` reproduces row b."""
    batch, count, length = paths.shape
    flat = batch * count
    carry = _carry_for_paths(carry, batch, count, length, p.device)
    rows = torch.arange(batch, device=p.device)
    drafts, q_rows = paths.reshape(flat, length), q.reshape(flat, length, -1)
    modified = modify_path(carry.select(rows.repeat_interleave(count)), drafts, p.reshape(flat, length + 1, -1), q_rows)
    t_mass, d_mass = absolute_masses(drafts, modified.p[:, :length], q_rows)  # [B*K, L+1]
    h = scan_acceptances(t_mass, d_mass, modified.p, q_rows, count).reshape(batch, count, length)
    shared = shared_prefixes(paths)
    tau = torch.zeros(batch, dtype=torch.int64, device=p.device)
    chosen = torch.zeros_like(tau)
    used = torch.zeros_like(tau)  # uniforms consumed per row
    failed = torch.zeros(batch, count, length, dtype=torch.bool, device=p.device)  # the coin of (k, i) came up 0
    for k in range(count):
        scanning = tau < length  # the reference stops at the first path accepted whole
        for i in range(1, length + 1):
            in_h = (shared[:, :k, k, i - 1] & failed[:, :k, i - 1]).any(dim=1)  # rejected on an earlier path
            toss = scanning & (tau < i) & ~in_h
            heads = toss & (uniforms.gather(1, used[:, None])[:, 0] < h[:, k, i - 1])
            failed[:, k, i - 1] = toss & ~heads
            tau = torch.where(heads, i, tau)
            chosen = torch.where(heads, k, chosen)
            used += toss.long()
    index = rows * count + chosen  # the chosen path's flattened row
    t_tau, d_tau = t_mass[index, tau], d_mass[index, tau]
    row_tau = modified.p[index, tau]  # [B, V]
    q_tau = q_rows[index, tau.clamp_max(length - 1)]
    correction = residual_or_target(modification_weights(t_tau, row_tau, d_tau, q_tau, count), row_tau)  # eq. 4
    weights = torch.where((tau == length)[:, None], row_tau, correction)
    extra = sample_inverse_cdf(weights, uniforms.gather(1, used[:, None])[:, 0])
    new_carry = next_carry(carry, _chosen(modified, index), p[rows, chosen], q[rows, chosen], tau, extra, t_tau, d_tau)
    return assemble_verdict(paths[rows, chosen], Outcome(tau, extra), chosen, new_carry)


spectr_gbv_verify = DrawnPathVerifier(spectr_gbv_decision, spectr_gbv_uniforms)
