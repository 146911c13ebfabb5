"""The carry of greedy block verification and SpecTr-GBV: pending target modifications.

After a greedy round that accepted tau of L tokens and emitted the extra token Y, the next
L - tau - 1 positions must follow a modified target (BV App. C, Alg. 5 eq. 31; SpecTr-GBV
Alg. 2). With the joint target and draft masses a = p(X^tau, Y, z^{t}), s = q(X^tau, Y, z^{t})
of everything decoded since that round started, the modified next-token distribution is

    greedy block (power 1):  p_new(x) ∝ max(a p(x) - s q(x), 0)                      (BV eq. 31)
    SpecTr-GBV  (power K):   p_new(x) ∝ a p(x) (1 - min(s q(x) / (a p(x)), 1))^K      (its Alg. 2)

(the SpecTr-GBV paper writes p for the draft and q for the target; this module uses the BV
names). Only the pair (a, s) up to a common scale matters, so it is stored normalised to
max(a, s) = 1. Modifications nest: a round's target is the previous round's modified target,
so up to L - 1 of them can be pending at once; ``ModifiedTarget`` keeps one slot per recent
round, oldest first, each applied on top of the ones before it.

The drafter needs nothing: it samples from its own q as usual; the verifier applies the carry
to the target rows of the next round itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from speculab.device.hostreads import reads_free

from .primitives import positive_part, residual_or_target, select_positions, token_probs


@dataclass
class ModifiedTarget:
    """Pending target modifications, one slot per recent round (oldest first)."""

    a: torch.Tensor  # [B, M] float64 joint target mass of the slot's decoded prefix (max(a, s) = 1)
    s: torch.Tensor  # [B, M] float64 joint draft mass of the same prefix
    remaining: torch.Tensor  # [B, M] int64 leading positions of the next round it modifies (0: none)
    power: int = 1  # K in (1 - min(q/p, 1))^K: 1 for greedy block verification

    def select(self, rows: torch.Tensor) -> ModifiedTarget:
        """Keep the given batch rows (the engine drops finished prompts)."""
        return ModifiedTarget(self.a[rows], self.s[rows], self.remaining[rows], self.power)

    @classmethod
    def empty(cls, batch: int, slots: int, power: int, device: torch.device) -> ModifiedTarget:
        """No pending modification (the first round)."""
        ones = torch.ones(batch, slots, dtype=torch.float64, device=device)
        return cls(ones, ones.clone(), torch.zeros_like(ones, dtype=torch.int64), power)


# a, s [...] joint masses
def normalize_pair(a: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rescale (a, s) to max(a, s) = 1 so long products neither overflow nor underflow."""
    scale = torch.maximum(a, s)
    scale = torch.where(scale > 0, scale, 1)
    return a / scale, s / scale


# a, s [B] joint masses; p, q [B, V] next-token target and draft
def modification_weights(
    a: torch.Tensor, p: torch.Tensor, s: torch.Tensor, q: torch.Tensor, power: int
) -> torch.Tensor:
    """Unnormalised modified target (BV eq. 31 for power 1, SpecTr-GBV Alg. 2 for power K)."""
    a, s = a.to(p.dtype).unsqueeze(-1), s.to(p.dtype).unsqueeze(-1)
    if power == 1:
        return positive_part(a, p, s, q)
    joint = a * p
    excess = (joint - s * q).clamp_min_(0)  # positive_part(a, p, s, q), a p computed once
    # (a p - s q)_+^K / (a p)^(K-1) without 0/0: excess is 0 wherever a p is 0
    return (excess / torch.where(joint > 0, joint, 1)).pow_(power - 1).mul_(excess)


@dataclass
class LevelStep:
    """The target row after applying every active slot at one position, and what each slot saw."""

    row: torch.Tensor  # [B, V] fully modified target row
    seen: torch.Tensor  # [B, M] probability of the position's token under the row each slot modified


# carry: pending slots; a, s [B, M] slot states at this position; position: int or [B] index
# in the round; p_row, q_row [B, V] original target and draft rows; tokens [B] at this position
def apply_slots(
    carry: ModifiedTarget,
    a: torch.Tensor,
    s: torch.Tensor,
    position: int | torch.Tensor,
    p_row: torch.Tensor,
    q_row: torch.Tensor,
    tokens: torch.Tensor,
) -> LevelStep:
    """Apply the slots oldest first: each modifies the row the older ones produced.

    Where host reads are free, a slot that modifies this position in no row is skipped (one
    read for all slots): usually only the last round's slot, and in a first round none, is
    still pending. Elsewhere every slot is applied, leaving the rows it does not modify as they are.
    """
    row = p_row
    seen = []
    active = carry.remaining > torch.as_tensor(position, device=p_row.device).reshape(-1, 1)  # [B, M]
    pending = active.any(0).tolist() if reads_free(active) else [True] * active.shape[1]
    for j in range(carry.a.shape[1]):
        seen.append(token_probs(row, tokens).to(torch.float64))
        if not pending[j]:
            continue
        weights = modification_weights(a[:, j], row, s[:, j], q_row, carry.power)
        modified = residual_or_target(weights, row)
        modified = modified / modified.sum(-1, keepdim=True)
        row = torch.where(active[:, j : j + 1], modified, row)
    return LevelStep(row, torch.stack(seen, dim=1) if seen else a[:, :0])


@dataclass
class ModifiedPath:
    """A round's target rows with the carry applied, and the slot states along the path."""

    p: torch.Tensor  # [B, L+1, V] modified target rows (position L is never modified)
    a: torch.Tensor  # [B, L+1, M] slot joint target masses before each position's token
    s: torch.Tensor  # [B, L+1, M] slot joint draft masses


# draft [B, L]; p [B, L+1, V]; q [B, L, V]
def modify_path(carry: ModifiedTarget, draft: torch.Tensor, p: torch.Tensor, q: torch.Tensor) -> ModifiedPath:
    """Apply the pending modifications to the target rows along a drafted path."""
    length = draft.shape[1]
    rows, a_hist, s_hist = [], [carry.a], [carry.s]
    for t in range(length):
        step = apply_slots(carry, a_hist[-1], s_hist[-1], t, p[:, t], q[:, t], draft[:, t])
        rows.append(step.row)
        qx = token_probs(q[:, t], draft[:, t]).to(torch.float64).unsqueeze(-1)
        a_next, s_next = normalize_pair(a_hist[-1] * step.seen, s_hist[-1] * qx)
        a_hist.append(a_next)
        s_hist.append(s_next)
    rows.append(p[:, length])
    return ModifiedPath(torch.stack(rows, dim=1), torch.stack(a_hist, dim=1), torch.stack(s_hist, dim=1))


# modified: this round's path; draft [B, L]; q [B, L, V]; tau [B]; extra [B]
# round_a, round_s [B] joint masses of the accepted prefix under this round's target and q
def next_carry(
    carry: ModifiedTarget,
    modified: ModifiedPath,
    p: torch.Tensor,
    q: torch.Tensor,
    tau: torch.Tensor,
    extra: torch.Tensor,
    round_a: torch.Tensor,
    round_s: torch.Tensor,
) -> ModifiedTarget:
    """Advance the surviving slots over the committed tokens and push this round's slot.

    The oldest slot always expires (every round commits at least one token), so the slots
    shift left by one and this round's modification (L - tau - 1 positions) enters last.
    """
    length = q.shape[1]
    before = tau.clamp_max(length - 1)
    a_tau, s_tau = select_positions(modified.a, tau), select_positions(modified.s, tau)
    q_tau = select_positions(q, before)
    step = apply_slots(carry, a_tau, s_tau, tau, select_positions(p, tau), q_tau, extra)
    qy = token_probs(q_tau, extra).to(torch.float64)
    a_old, s_old = normalize_pair(a_tau * step.seen, s_tau * qy.unsqueeze(-1))
    y_prob = token_probs(select_positions(modified.p, tau), extra).to(torch.float64)
    a_new, s_new = normalize_pair(round_a * y_prob, round_s * qy)
    remaining_old = (carry.remaining - tau.unsqueeze(-1) - 1).clamp_min(0)
    remaining_new = (length - tau - 1).clamp_min(0)
    return ModifiedTarget(
        torch.cat([a_old[:, 1:], a_new.unsqueeze(-1)], dim=1),
        torch.cat([s_old[:, 1:], s_new.unsqueeze(-1)], dim=1),
        torch.cat([remaining_old[:, 1:], remaining_new.unsqueeze(-1)], dim=1),
        carry.power,
    )


@dataclass
class JointMasses:
    """Joint target and draft masses of every prefix of a path, as normalised pairs."""

    a: torch.Tensor  # [B, L+1] float64 target mass of the first t tokens (max(a, s) = 1)
    s: torch.Tensor  # [B, L+1] float64 draft mass of the first t tokens


# px, qx [B, L] target and draft probabilities of the drafted tokens
def joint_masses(px: torch.Tensor, qx: torch.Tensor) -> JointMasses:
    """Running products p(x^t) and q(x^t) from the round start; their ratio is BV's p~_t."""
    a = [torch.ones_like(px[:, 0], dtype=torch.float64)]
    s = [a[0]]
    for t in range(px.shape[1]):
        a_t, s_t = normalize_pair(a[-1] * px[:, t], s[-1] * qx[:, t].to(torch.float64))
        a.append(a_t)
        s.append(s_t)
    return JointMasses(torch.stack(a, dim=1), torch.stack(s, dim=1))
