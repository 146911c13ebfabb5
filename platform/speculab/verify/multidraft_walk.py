"""Top-down tree walks over the tree formed by K i.i.d. paths: SpecTr (K-SEQ), SpecInfer, NSS.

From the root, a ``NodeRule`` turns the children drafted at the current node into a verified
token y; the walk moves to the child with token y (keeping every path through it), or stops
and emits y as the correction token. At depth L it emits a bonus token from p. Prefix
sharing is rebuilt from ``paths``: the paths alive at depth d are those whose first d tokens
equal the accepted ones; the reported path is the lowest alive index.

``multidraft_walk`` is the scalar reference for one prompt and accepts any ``NodeRule`` (also the
optimal-transport rules); ``walk_decision`` is the batched walk for the batched rules.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

from .contracts import DrawnPathVerifier
from .decisions import Decisions, as_decisions, sample_inverse_cdf
from .node_rules import NodeDecision, NodeRule, batched_kseq, batched_nss, batched_specinfer
from .primitives import rows_to_step
from .verdict import Outcome, Verdict, assemble_verdict, reference_verdict

BatchedRule = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], NodeDecision]


# paths [K, L]; p [K, L+1, V]; q [K, L, V]
def multidraft_walk(
    paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor, rule: NodeRule, rng: torch.Generator | Decisions
) -> Verdict:
    """Walk one prompt's draft tree top-down with ``rule`` at every node."""
    decisions = as_decisions(rng)
    alive = list(range(paths.shape[0]))
    length = paths.shape[1]
    for depth in range(length):
        node = alive[0]
        y = rule(p[node, depth], q[node, depth], paths[alive, depth], decisions)
        matching = [k for k in alive if int(paths[k, depth]) == y]
        if not matching:
            return reference_verdict(paths[node], depth, y, node)
        alive = matching
    node = alive[0]
    return reference_verdict(paths[node], length, decisions.categorical(p[node, length]), node)


def multidraft_walk_reference(rule: NodeRule) -> Callable[..., Verdict]:
    """``multidraft_walk`` with a fixed rule, in the reference signature ``verify.exact`` enumerates."""

    def reference(
        paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor, decisions: Decisions, carry: None = None
    ) -> Verdict:
        return multidraft_walk(paths, p, q, rule, decisions)

    return reference


# alive [B, K]
def first_alive(alive: torch.Tensor) -> torch.Tensor:
    """``[B]`` the lowest alive path index."""
    return alive.to(torch.int8).argmax(dim=1)


def walk_uniforms(count: int, length: int) -> int:
    """Uniforms per row of a batched walk: up to K + 1 per depth, the bonus token's, and slack
    for the window each depth reads (``u[used : used + K + 1]``)."""
    return length * (count + 1) + count + 2


# paths [B, K, L]; p [B, K, L+1, V]; q [B, K, L, V]; u [B, walk_uniforms(K, L)]
def walk_decision(
    paths: torch.Tensor,
    p: torch.Tensor,
    q: torch.Tensor,
    u: torch.Tensor,
    carry: None = None,
    *,
    rule: BatchedRule,
) -> Verdict:
    """The batched top-down walk; each row consumes its uniforms in ``multidraft_walk``'s order.

    Each depth steps the rows `rows_to_step` names; a row that stopped keeps its state.
    """
    batch, count, length = paths.shape
    rows = torch.arange(batch, device=paths.device)
    used = torch.zeros(batch, dtype=torch.int64, device=paths.device)
    alive = torch.ones(batch, count, dtype=torch.bool, device=paths.device)
    tau = torch.full((batch,), length, dtype=torch.int64, device=paths.device)
    extra = torch.zeros(batch, dtype=torch.int64, device=paths.device)
    window = torch.arange(count + 1, device=paths.device)
    for depth in range(length):
        live = rows_to_step(tau == length)  # [n]
        if live.numel() == 0:
            break
        tau_live, alive_live = tau[live], alive[live]
        walking = tau_live == length
        drafts = paths[live, :, depth]
        node = first_alive(alive_live)
        decision = rule(
            p[live, node, depth],
            q[live, node, depth],
            drafts,
            alive_live,
            u[live].gather(1, used[live].unsqueeze(1) + window),
        )
        matching = alive_live & (drafts == decision.token.unsqueeze(1))
        going = walking & matching.any(dim=1)
        stops = walking ^ going
        tau[live] = torch.where(stops, depth, tau_live)
        extra[live] = torch.where(stops, decision.token, extra[live])
        alive[live] = torch.where(going.unsqueeze(1), matching, alive_live)
        used[live] += decision.consumed  # read again only while the row walks
    node = first_alive(alive)
    full = rows_to_step(tau == length)  # the rows that take a bonus token (where it is free to say which)
    bonus = sample_inverse_cdf(p[full, node[full], length], u[full].gather(1, used[full].unsqueeze(1)).squeeze(1))
    extra = torch.where(tau == length, extra.index_put((full,), bonus), extra)
    return assemble_verdict(paths[rows, node], Outcome(tau, extra), node)


# paths [B, K, L]; p [B, K, L+1, V]; q [B, K, L, V]
def rowwise_walk_verify(
    paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor, *, rng: torch.Generator, carry: None = None, rule: NodeRule
) -> Verdict:
    """``multidraft_walk`` row by row, for rules with no batched form (the optimal-transport solvers)."""
    verdicts = [multidraft_walk(paths[b], p[b], q[b], rule, rng) for b in range(paths.shape[0])]
    return Verdict(*(torch.cat([getattr(v, field) for v in verdicts]) for field in ("tokens", "num_tokens", "path")))


spectr_verify = DrawnPathVerifier(partial(walk_decision, rule=batched_kseq), walk_uniforms)
specinfer_verify = DrawnPathVerifier(partial(walk_decision, rule=batched_specinfer), walk_uniforms)
nss_verify = DrawnPathVerifier(partial(walk_decision, rule=batched_nss), walk_uniforms)
