"""Greedy block verification (BV paper App. C): Alg. 4 with the distribution modification of
Alg. 5 carried into the next round (Alg. 6).

It accepts at least as many tokens as block verification in one round (BV Thm. 3), but the
next round's first L - tau - 1 positions must follow the modified target of BV eq. 31; the
verdict's carry (``modification.ModifiedTarget``) holds that state and this verifier applies
it to the next round's target rows. The drafter samples from q as usual.
"""

from __future__ import annotations

import torch

from .block import longest_accepted, sample_extra, single_path_uniforms
from .contracts import DrawnPathVerifier
from .decisions import Decisions
from .modification import JointMasses, ModifiedTarget, joint_masses, modify_path, next_carry
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


# remain, rej [...] the masses sum_x max(p~ p - q, 0) and sum_x max(q - p~ p, 0)
def greedy_acceptance(remain: torch.Tensor, rej: torch.Tensor) -> torch.Tensor:
    """BV Alg. 4 line 5: h_i = p_remain / p_rej (eq. 32-33), 1 when nothing is rejected."""
    return torch.where(rej > 0, remain / torch.where(rej > 0, rej, 1), 1.0)


def _empty_carry(carry: ModifiedTarget | None, batch: int, length: int, device: torch.device) -> ModifiedTarget:
    return ModifiedTarget.empty(batch, length - 1, 1, device) if carry is None else carry


# paths [K, L]; p [K, L+1, V]; q [K, L, V]; carry: batch-of-one ModifiedTarget or None
def greedy_block_verify_reference(
    paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor, decisions: Decisions, carry: ModifiedTarget | None = None
) -> Verdict:
    """BV Alg. 4 on path 0, against the target as modified by earlier rounds (Alg. 6 line 6)."""
    draft, q = paths[0], q[0]
    length = draft.shape[0]
    carry = _empty_carry(carry, 1, length, p.device)
    modified = modify_path(carry, draft[None], p[:1], q[None])
    target = modified.p[0]
    p_tilde = [torch.tensor(1.0, dtype=torch.float64)]
    tau = 0
    for i in range(1, length + 1):
        x = draft[i - 1]
        p_tilde.append(p_tilde[-1] * target[i - 1, x] / q[i - 1, x])  # lines 4 and 12
        if i < length:
            remain = positive_part(p_tilde[i], target[i], 1, q[i]).sum()  # eq. 32
            rej = positive_part(1, q[i], p_tilde[i], target[i]).sum()  # eq. 33
            accepted = decisions.bernoulli(greedy_acceptance(remain, rej))  # lines 5-7
        else:
            accepted = decisions.bernoulli(p_tilde[length])  # line 13
        tau = i if accepted else tau
    if tau == length:
        y = decisions.categorical(target[length])  # line 14
    else:
        residual = positive_part(p_tilde[tau], target[tau], 1, q[tau])  # line 16
        y = decisions.categorical(residual_or_target(residual, target[tau]))
    carry = next_carry(
        carry,
        modified,
        p[:1],
        q[None],
        torch.tensor([tau]),
        torch.tensor([y]),
        p_tilde[tau].reshape(1),
        torch.ones(1, dtype=torch.float64),
    )
    return reference_verdict(draft, tau, y, 0, carry)


# path: target rows already modified by the carry; masses: joint masses along the path
# u [B, L+1] uniforms: eta_1..eta_L, then the extra token's
def greedy_block_outcome(path: SinglePath, masses: JointMasses, u: torch.Tensor) -> Outcome:
    """Batched BV Alg. 4 with p~_t = a_t / s_t kept as a normalised pair (no overflow)."""
    length = path.draft.shape[1]
    dtype = path.p.dtype
    a = masses.a[:, 1:length].to(dtype).unsqueeze(-1)
    s = masses.s[:, 1:length].to(dtype).unsqueeze(-1)
    inner_p, inner_q = path.p[:, 1:length], path.q[:, 1:length]
    remain = residual_mass(a, inner_p, s, inner_q).to(torch.float64)
    rej = residual_mass(s, inner_q, a, inner_p).to(torch.float64)
    last = clipped_ratio(masses.a[:, length:], masses.s[:, length:])
    h = torch.cat([greedy_acceptance(remain, rej), last], dim=1)
    tau = longest_accepted(u[:, :length] < h)
    full = tau == length
    coef_a = torch.where(full, 1.0, select_positions(masses.a, tau))
    coef_s = torch.where(full, 0.0, select_positions(masses.s, tau))
    return Outcome(tau, sample_extra(path, tau, coef_a, coef_s, u[:, length]))


# paths [B, K, L]; p [B, K, L+1, V]; q [B, K, L, V]; u [B, L+1]
def greedy_block_decision(
    paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor, u: torch.Tensor, carry: ModifiedTarget | None = None
) -> Verdict:
    """Greedy block verification (BV Alg. 4-6) of path 0; the carry holds BV eq. 31's state."""
    batch, _, length = paths.shape
    first = torch.zeros(batch, dtype=torch.int64, device=paths.device)
    path = SinglePath(paths[:, 0], p[:, 0], q[:, 0])  # views: no copy of the rows
    carry = _empty_carry(carry, batch, length, p.device)
    modified = modify_path(carry, path.draft, path.p, path.q)
    target_path = SinglePath(path.draft, modified.p, path.q)
    masses = joint_masses(token_probs(modified.p[:, :length], path.draft), token_probs(path.q, path.draft))
    outcome = greedy_block_outcome(target_path, masses, u)
    new_carry = next_carry(
        carry,
        modified,
        path.p,
        path.q,
        outcome.tau,
        outcome.extra,
        select_positions(masses.a, outcome.tau),
        select_positions(masses.s, outcome.tau),
    )
    return assemble_verdict(path.draft, outcome, first, new_carry)


greedy_block_verify = DrawnPathVerifier(greedy_block_decision, single_path_uniforms)
