"""Single-path verification of the BV paper (Sun et al., "Block Verification Accelerates
Speculative Decoding"): token verification (Alg. 1, eq. 3) and block verification (Alg. 2,
eq. 4-5). For K > 1 paths these verify path 0 only.

Each algorithm has a scalar reference (``*_reference``: one prompt, Python loop over the
positions, randomness through ``Decisions``) and a batched implementation (``*_verify``) that
consumes a table of uniforms in the reference's order. Greedy block verification lives in
``verify.greedy_block``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

from .contracts import DrawnPathVerifier
from .decisions import Decisions, sample_inverse_cdf
from .primitives import (
    SinglePath,
    clipped_ratio,
    positive_part,
    residual_mass,
    residual_or_target,
    select_positions,
    token_probs,
)
from .verdict import Outcome, Verdict, assemble_verdict, reference_verdict


# w [...] prefix weights; mass [...] residual mass sum_x max(w p - q, 0)
def block_acceptance(w: torch.Tensor, mass: torch.Tensor) -> torch.Tensor:
    """BV eq. 5: h = mass / (mass + 1 - w), and 1 where both terms vanish (w = 1, p = q)."""
    denominator = mass + 1 - w
    return torch.where(denominator > 0, mass / torch.where(denominator > 0, denominator, 1), 1.0)


# ---------------------------------------------------------------- scalar references


# paths [K, L]; p [K, L+1, V]; q [K, L, V]
def token_verify_reference(
    paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor, decisions: Decisions, carry: None = None
) -> Verdict:
    """BV Alg. 1 on path 0: accept token by token, stop at the first rejection."""
    draft, p, q = paths[0], p[0], q[0]
    length = draft.shape[0]
    tau = 0
    for i in range(length):
        x = draft[i]
        if not decisions.bernoulli(clipped_ratio(p[i, x], q[i, x])):  # BV eq. 1
            break
        tau = i + 1
    if tau == length:
        return reference_verdict(draft, tau, decisions.categorical(p[length]), 0)
    residual = positive_part(1, p[tau], 1, q[tau])  # BV eq. 3
    return reference_verdict(draft, tau, decisions.categorical(residual_or_target(residual, p[tau])), 0)


# paths [K, L]; p [K, L+1, V]; q [K, L, V]
def block_verify_reference(
    paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor, decisions: Decisions, carry: None = None
) -> Verdict:
    """BV Alg. 2 on path 0: accept each sub-block independently, keep the longest."""
    draft, p, q = paths[0], p[0], q[0]
    length = draft.shape[0]
    weights = [torch.tensor(1.0, dtype=torch.float64)]  # p_0 = 1
    tau = 0
    for i in range(1, length + 1):
        x = draft[i - 1]
        w = clipped_ratio(weights[-1] * p[i - 1, x], q[i - 1, x])  # line 4: min(p_{i-1} M_b/M_s, 1)
        weights.append(w)
        # h_gamma = p_gamma at the last position, else eq. 5
        h = w if i == length else block_acceptance(w, positive_part(w, p[i], 1, q[i]).sum())
        if decisions.bernoulli(h):
            tau = i
    if tau == length:
        return reference_verdict(draft, tau, decisions.categorical(p[length]), 0)
    residual = positive_part(weights[tau], p[tau], 1, q[tau])  # eq. 4
    return reference_verdict(draft, tau, decisions.categorical(residual_or_target(residual, p[tau])), 0)


# ---------------------------------------------------------------- batched


# px, qx [B, L] target and draft probabilities of the drafted tokens
def block_weights(px: torch.Tensor, qx: torch.Tensor) -> torch.Tensor:
    """BV Alg. 2 line 4 / GBV eq. 3: ``[B, L+1]`` float64 weights w_0 = 1,
    w_i = min(1, w_{i-1} p(x_i) / q(x_i))."""
    weights = [torch.ones_like(px[:, 0], dtype=torch.float64)]
    for i in range(px.shape[1]):
        weights.append(clipped_ratio(weights[-1] * px[:, i], qx[:, i].to(torch.float64)))
    return torch.stack(weights, dim=1)


# path: one path per prompt; a, s [B] residual coefficients; u [B]
def sample_extra(
    path: SinglePath, tau: torch.Tensor, a: torch.Tensor, s: torch.Tensor, u: torch.Tensor
) -> torch.Tensor:
    """Sample the extra token at position tau from max(a p - s q, 0), else from p.

    At tau = L the caller passes s = 0 (there is no draft distribution), giving the bonus
    token from p; below L this is the correction token from the residual.
    """
    length = path.draft.shape[1]
    p_tau = select_positions(path.p, tau)
    q_tau = select_positions(path.q, tau.clamp_max(length - 1))
    dtype = p_tau.dtype
    residual = positive_part(a.to(dtype).unsqueeze(-1), p_tau, s.to(dtype).unsqueeze(-1), q_tau)
    return sample_inverse_cdf(residual_or_target(residual, p_tau), u)


# accept [B, L] bool: accept[:, i-1] says whether the sub-block of length i was accepted
def longest_accepted(accept: torch.Tensor) -> torch.Tensor:
    """tau = the largest accepted sub-block length, 0 if none (BV Alg. 2 lines 5-6)."""
    lengths = torch.arange(1, accept.shape[1] + 1, device=accept.device)
    return (accept * lengths).amax(dim=1)


# path: one path per prompt; u [B, L+1] uniforms: eta_1..eta_L, then the extra token's
def block_outcome(path: SinglePath, u: torch.Tensor) -> Outcome:
    """Batched BV Alg. 2 (eq. 4-5); GBV runs it with its skewed draft as ``path.q``."""
    length = path.draft.shape[1]
    w = block_weights(token_probs(path.p[:, :length], path.draft), token_probs(path.q, path.draft))
    inner = w[:, 1:length].to(path.p.dtype).unsqueeze(-1)
    mass = residual_mass(inner, path.p[:, 1:length], 1, path.q[:, 1:length])
    h = torch.cat([block_acceptance(w[:, 1:length], mass.to(torch.float64)), w[:, length:]], dim=1)
    tau = longest_accepted(u[:, :length] < h)
    full = tau == length
    a = torch.where(full, 1.0, select_positions(w, tau))
    return Outcome(tau, sample_extra(path, tau, a, (~full).double(), u[:, length]))


# path: one path per prompt; u [B, L+1] uniforms consumed left to right
def token_outcome(path: SinglePath, u: torch.Tensor) -> Outcome:
    """Batched BV Alg. 1: tau = number of leading accepted tokens."""
    length = path.draft.shape[1]
    ratio = clipped_ratio(token_probs(path.p[:, :length], path.draft), token_probs(path.q, path.draft))
    accept = u[:, :length] < ratio.to(torch.float64)
    tau = accept.long().cumprod(dim=1).sum(dim=1)
    full = tau == length
    # the reference draws the extra token right after the first rejection's uniform
    u_extra = select_positions(u, (tau + 1).clamp_max(length))
    return Outcome(tau, sample_extra(path, tau, torch.ones_like(u_extra), (~full).double(), u_extra))


def single_path_uniforms(count: int, length: int) -> int:
    """Uniforms per row of a single-path verifier: eta_1..eta_L, then the extra token's."""
    return length + 1


# paths [B, K, L]; p [B, K, L+1, V]; q [B, K, L, V]; u [B, L+1]
def first_path_decision(
    paths: torch.Tensor,
    p: torch.Tensor,
    q: torch.Tensor,
    u: torch.Tensor,
    carry: None = None,
    *,
    outcome: Callable[[SinglePath, torch.Tensor], Outcome],
) -> Verdict:
    """Run a single-path ``outcome`` on path 0 of every prompt."""
    first = torch.zeros(paths.shape[0], dtype=torch.int64, device=paths.device)
    path = SinglePath(paths[:, 0], p[:, 0], q[:, 0])  # views: no copy of the rows
    return assemble_verdict(path.draft, outcome(path, u), first)


# token verification (BV Alg. 1) and block verification (BV Alg. 2) of path 0 of every prompt
token_verify = DrawnPathVerifier(partial(first_path_decision, outcome=token_outcome), single_path_uniforms)
block_verify = DrawnPathVerifier(partial(first_path_decision, outcome=block_outcome), single_path_uniforms)
