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

from speculab.device.hostreads import reads_free

from .block import (
    block_acceptance,
    block_outcome,
    block_verify_reference,
    block_weights,
    longest_accepted,
    single_path_uniforms,
)
from .contracts import DrawnPathVerifier
from .decisions import Decisions, sample_inverse_cdf
from .primitives import (
    SinglePath,
    packed_columns,
    residual_mass,
    residual_or_target,
    rows_to_step,
    select_path,
    select_positions,
    token_probs,
)
from .verdict import Outcome, Verdict, assemble_verdict


# p [..., V]; q [..., V]
def local_ranking(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """GBV eq. 21: pi(x) = p(x) / q(x), +inf where q(x) = 0 (ties broken by token id).

    Never -0.0, so that ``ranking_bits`` orders the values like the floats.
    """
    ranking = torch.nan_to_num_(p / q, nan=torch.inf, posinf=torch.inf)  # x / 0 = inf, 0 / 0 = nan
    return ranking.add_(0.0)  # -0.0 + 0.0 = +0.0


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
        rows.append((upper**paths - lower**paths) / ((below + mass) ** paths - below**paths))
        x = draft[t]
        below, mass = lower[x], mass * q[t, x]
    return torch.stack(rows)


# paths [K, L]; p [K, L+1, V]; q [K, L, V]
def gbv_verify_reference(
    paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor, decisions: Decisions, carry: None = None
) -> Verdict:
    """GBV Alg. 1: select k0, skew the draft along it, block-verify it."""
    k0 = select_path_reference(paths, p, q)
    skewed = skewed_draft_reference(paths[k0], p[k0], q[k0], paths.shape[0])
    verdict = block_verify_reference(paths[k0 : k0 + 1], p[k0 : k0 + 1], skewed[None], decisions)
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


# ranking [...] non-negative floats (+inf allowed, no -0.0: ``local_ranking`` values)
def ranking_bits(ranking: torch.Tensor) -> torch.Tensor:
    """The bit patterns of the values as integers of their width (a view, no copy):
    non-negative floats order like them."""
    integer = {
        torch.float16: torch.int16,
        torch.bfloat16: torch.int16,
        torch.float32: torch.int32,
        torch.float64: torch.int64,
    }[ranking.dtype]
    return ranking.view(integer)


# ranking [R, N] non-negative (+inf allowed)
def ranking_order(ranking: torch.Tensor) -> torch.Tensor:
    """``[R, N]`` indices sorting each row ascending, ties by position (a stable argsort).

    On CPU each row is sorted as a 1-D integer key (``ranking_bits``), which PyTorch sorts by
    radix sort: several times faster than a row-wise float sort over a 128k vocabulary (and
    than one combined int64 key for all rows). Elsewhere the row-wise float sort is used.
    """
    if ranking.device.type != "cpu":
        return torch.sort(ranking, dim=-1, stable=True).indices
    return torch.stack([torch.sort(row, stable=True).indices for row in ranking_bits(ranking)])


# ranking [R, V]; q [R, V]
def mass_ranked_below(ranking: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """C(x) = sum of q(t) over tokens t with pi(t) < pi(x) (ties: smaller id first), via a sort."""
    order = ranking_order(ranking)
    sorted_q = q.gather(-1, order)
    exclusive = sorted_q.cumsum(-1) - sorted_q
    return torch.empty_like(q).scatter_(-1, order, exclusive)


# ranking [R, V]; q [R, V]; tokens [R]
def mass_ranked_below_token(ranking: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``[R]`` C(x) of one token per row, by a masked sum (no sort)."""
    bits = ranking_bits(ranking)
    # t ranks below x iff bits(t) < bits(x) + [t < x] (ties: smaller id first)
    ids = torch.arange(q.shape[-1], device=q.device)
    threshold = (ids < tokens.unsqueeze(-1)).to(bits.dtype)
    threshold += token_probs(bits, tokens).unsqueeze(-1)  # in place: each [R, V] temporary costs
    return q.mul(bits < threshold).sum(-1)


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


# q [...]; below [...] C(x); u [...] broadcastable; paths: K
def skewed_probs(q: torch.Tensor, below: torch.Tensor, u: torch.Tensor, paths: int) -> torch.Tensor:
    """GBV eq. 22-23 for tokens with draft mass q and ranked-below mass C, at selection mass u.

    With lo = 1 - u (1 - C) and hi = lo + u q, all fractions in [0, 1],
    q^Gamma = (hi^K - lo^K) / (1 - (1 - u)^K) = q G(hi, lo) / G(1, 1 - u) with G the power
    difference quotient: no difference of nearly equal powers is formed (stable for K = 8).
    """
    lo = 1 - u * (1 - below)
    return (
        q
        * power_difference_quotient(lo + u * q, lo, paths)
        / power_difference_quotient(torch.ones_like(u), 1 - u, paths)
    )


# p, q [R, V] one position's rows; u [R]; paths: K
def skewed_rows(p: torch.Tensor, q: torch.Tensor, u: torch.Tensor, paths: int) -> torch.Tensor:
    """``[R, V]`` full skewed draft rows (one sort per row)."""
    below = mass_ranked_below(local_ranking(p, q), q)
    return skewed_probs(q, below, u.to(q.dtype).unsqueeze(-1), paths)


# path: the selected path (draft [B, L], p [B, L+1, V], q [B, L, V]); paths: K
def skewed_draft_probs(path: SinglePath, paths: int) -> torch.Tensor:
    """GBV eq. 22-23 along the selected path: ``[B, L, V]`` conditionals q^Gamma(x | a_{1:t}).

    With K = 1 the skewed draft is q itself. (The verifier itself needs only a few of these
    values: see ``skewed_residual_mass``.)
    """
    if paths == 1:
        return path.q
    batch, length = path.draft.shape
    p, q = path.p[:, :length].flatten(0, 1), path.q.flatten(0, 1)
    ranking = local_ranking(p, q)
    below = mass_ranked_below_token(ranking, q, path.draft.flatten()).view(batch, length)
    u = selection_masses(token_probs(path.q, path.draft), below)
    return skewed_rows(p, q, u.flatten(), paths).view_as(path.q)


# ranking, q [R, V]; w, u [R, 1] float64; paths: K
def bound_classes(
    ranking: torch.Tensor, q: torch.Tensor, w: torch.Tensor, u: torch.Tensor, paths: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Tokens whose residual max(w p - q^Gamma, 0) bounds on C(x) already decide.

    q^Gamma(x) = q(x) phi(x) with phi = G(hi, lo) / G1 between K lo^(K-1) / G1 and
    K hi^(K-1) / G1 (G1 = G(1, 1 - u)), so the residual is 0 where pi = p / q <= phi_min / w
    (bottom) and w p - q^Gamma > 0 where pi > phi_max / w (top). Both are sets of the ranking
    (lower, upper), which is what the telescoping sums need. A second pass tightens the
    bounds with the first pass's masses (C >= bottom mass above the bottom; C + q <= bottom +
    band mass inside the band). Returns bottom, top ``[R, V]`` bool and their complements'
    masses: bottom mass, band mass ``[R, 1]`` float64.
    """
    g1 = power_difference_quotient(torch.ones_like(u), 1 - u, paths)
    bottom_mass, band_mass = torch.zeros_like(u), torch.ones_like(u)
    for _ in range(2):
        lo, hi = 1 - u * (1 - bottom_mass), 1 - u * (1 - bottom_mass - band_mass)
        bottom = ranking <= (paths * lo ** (paths - 1) / g1 / w).to(ranking.dtype)
        top = ranking > (paths * hi ** (paths - 1) / g1 / w).to(ranking.dtype)
        bottom_mass = torch.where(bottom, q, 0).sum(-1, keepdim=True).to(torch.float64)
        band_mass = (1 - bottom_mass - torch.where(top, q, 0).sum(-1, keepdim=True).to(torch.float64)).clamp_min(0)
    return bottom, top, bottom_mass, band_mass


# p, q, ranking [R, V]; members [R, V] bool, every token ranked above the bottom or a band;
# bottom_mass, w, u [R, 1] float64; paths: K
def member_residuals(
    p: torch.Tensor,
    q: torch.Tensor,
    ranking: torch.Tensor,
    members: torch.Tensor,
    bottom_mass: torch.Tensor,
    w: torch.Tensor,
    u: torch.Tensor,
    paths: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[R, W]`` tokens and their max(w p - q^Gamma, 0), 0 in the slots past a row's members,
    with C(x) from sorting the members only (`packed_columns`: W the most members of a row
    where that can be read, else V).

    The members must be contiguous in the ranking right above the bottom, so that C(x) is the
    bottom mass plus the members ranked below x.
    """
    # pack each row's members left in a table, sort the rows of the table by (pi, id) and take
    # exclusive cumulative sums along them; the padding (+inf, last) sorts after a real +inf and
    # the sort is stable, so the members keep the leading ``filled`` slots
    columns, filled = packed_columns(members)
    order = ranking_order(torch.where(filled, ranking.gather(-1, columns), torch.inf))
    ids = columns.gather(-1, order)
    q_sorted = torch.where(filled, q.gather(-1, ids), 0).to(torch.float64)
    exclusive = q_sorted.cumsum(-1) - q_sorted
    skewed = skewed_probs(q_sorted, bottom_mass + exclusive, u, paths)
    residual = (w * p.gather(-1, ids).to(torch.float64) - skewed).clamp_min(0)
    return ids, torch.where(filled, residual, 0)


# p, q, ranking [R, V]; w, u [R] float64; paths: K
def skewed_residual_mass(
    p: torch.Tensor, q: torch.Tensor, ranking: torch.Tensor, w: torch.Tensor, u: torch.Tensor, paths: int
) -> torch.Tensor:
    """``[R]`` sum_x max(w p(x) - q^Gamma(x), 0) without sorting the whole vocabulary.

    Bottom tokens add 0; the top's q^Gamma telescopes to (1 - lo_top^K) / (1 - (1 - u)^K) =
    (1 - C_top) G(1, lo_top) / G1 (C_top: the draft mass ranked below the top); only the band
    between them is sorted (``bound_classes``).
    """
    w, u = w.unsqueeze(-1), u.unsqueeze(-1)
    bottom, top, bottom_mass, band_mass = bound_classes(ranking, q, w, u, paths)
    below_top = bottom_mass + band_mass
    above = (1 - below_top).clamp_min(0)  # a float32 sum of q can round past 1
    top_q = (
        above
        * power_difference_quotient(torch.ones_like(u), 1 - u * above, paths)
        / power_difference_quotient(torch.ones_like(u), 1 - u, paths)
    )
    top_p = torch.where(top, p, 0).sum(-1, keepdim=True).to(torch.float64)
    mass = (w * top_p - top_q).clamp_min(0).squeeze(-1)
    _, residual = member_residuals(p, q, ranking, ~(bottom | top), bottom_mass, w, u, paths)
    return mass + residual.sum(-1)


# p, q, ranking [R, V]; w, u [R] float64; paths: K
def skewed_residual_rows(
    p: torch.Tensor, q: torch.Tensor, ranking: torch.Tensor, w: torch.Tensor, u: torch.Tensor, paths: int
) -> torch.Tensor:
    """``[R, V]`` max(w p - q^Gamma, 0) (BV eq. 4 with the skewed draft), sorting only the
    tokens above the bottom, whose residual is 0."""
    w, u = w.unsqueeze(-1), u.unsqueeze(-1)
    bottom, _, bottom_mass, _ = bound_classes(ranking, q, w, u, paths)
    # mostly undecided (u near 1): sorting whole rows costs less than packing them first
    if reads_free(bottom) and 2 * int((~bottom).sum(-1).max()) > p.shape[-1]:
        return (w * p.to(torch.float64) - skewed_rows(p, q, u.squeeze(-1), paths).to(torch.float64)).clamp_min(0)
    ids, residual = member_residuals(p, q, ranking, ~bottom, bottom_mass, w, u, paths)
    return torch.zeros(p.shape, dtype=torch.float64, device=p.device).scatter_(-1, ids, residual)


# p, q [R, V]; w, u [R] float64; paths: K
def residual_mass_bounds(
    p: torch.Tensor, q: torch.Tensor, w: torch.Tensor, u: torch.Tensor, paths: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[R]`` lower and upper bounds on sum_x max(w p(x) - q^Gamma(x), 0), one pass, no C(x).

    q^Gamma = q phi with K (1 - u)^(K-1) / G1 <= phi <= K / G1 whatever C(x) is (see
    ``bound_classes``), and the mass is w sum_x max(p - (phi / w) q, 0). The factors phi / w are
    rounded outwards (a tiny one to 0, a huge one to a 0 lower bound) so that the float32 pass
    never meets subnormal numbers (slow on CPU); a margin covers the rounding, so the bounds
    hold for the mass that ``skewed_residual_mass`` computes.
    """
    g1 = power_difference_quotient(torch.ones_like(u), 1 - u, paths)
    alive = w > 0
    w_safe = torch.where(alive, w, 1)
    low_factor = paths * (1 - u) ** (paths - 1) / g1 / w_safe
    high_factor = paths / g1 / w_safe
    low_factor = torch.where(low_factor < 1e-20, 0, low_factor).clamp_max(1e30).to(q.dtype).unsqueeze(-1)
    upper = residual_mass(1, p, low_factor, q).to(torch.float64)
    lower = residual_mass(1, p, high_factor.clamp_max(1e30).to(q.dtype).unsqueeze(-1), q).to(torch.float64)
    lower = torch.where(alive & (high_factor <= 1e30), w * lower * (1 - 1e-3) - 1e-12, 0)
    return lower, torch.where(alive, w * upper * (1 + 1e-3) + 1e-12, 0)


# p, q, ranking [B, L-1, V] positions 1..L-1; w [B, L+1]; u [B, L] float64; eta [B, L]; paths: K
def longest_accepted_lazily(
    p: torch.Tensor,
    q: torch.Tensor,
    ranking: torch.Tensor,
    w: torch.Tensor,
    u: torch.Tensor,
    eta: torch.Tensor,
    paths: int,
) -> torch.Tensor:
    """``[B]`` tau of BV Alg. 2 (largest i with eta_i < h_i), computing exact residual masses
    (eq. 5) only where bounds on h_i leave the comparison open and no larger i is surely
    accepted: tau is a maximum, so the positions below a sure acceptance never matter."""
    batch, length = eta.shape
    w_mid, u_mid = w[:, 1:length].flatten(), u[:, 1:].flatten()
    lower, upper = residual_mass_bounds(p.flatten(0, 1), q.flatten(0, 1), w_mid, u_mid, paths)
    h_low = block_acceptance(w[:, 1:length], lower.view(batch, -1).clamp_min(0))
    h_high = block_acceptance(w[:, 1:length], upper.view(batch, -1))
    sure = torch.cat([eta[:, :-1] < h_low, eta[:, -1:] < w[:, length:]], dim=1)  # [B, L]
    surely_accepted = longest_accepted(sure)
    open_ = (
        (eta[:, :-1] < h_high)
        & ~sure[:, :-1]
        & (torch.arange(1, length, device=eta.device) > surely_accepted.unsqueeze(-1))
    )  # [B, L-1]
    h = torch.cat([sure[:, :-1].to(torch.float64), w[:, length:]], dim=1)  # 1: surely accepted
    rows = rows_to_step(open_.flatten())  # the open positions, or all (a static shape)
    if rows.numel():
        mass = skewed_residual_mass(
            p.flatten(0, 1)[rows], q.flatten(0, 1)[rows], ranking.flatten(0, 1)[rows], w_mid[rows], u_mid[rows], paths
        )
        h_mid = h[:, :-1].flatten()
        exact = torch.where(open_.flatten()[rows], block_acceptance(w_mid[rows], mass), h_mid[rows])
        h[:, :-1] = h_mid.index_put((rows,), exact).view(batch, -1)
    return longest_accepted(eta < h)


# path: the selected path; paths: K; uniforms [B, L+1]
def gbv_outcome(path: SinglePath, paths: int, uniforms: torch.Tensor) -> Outcome:
    """Block verification (BV Alg. 2, eq. 4-5) of the selected path with draft q^Gamma.

    Needs q^Gamma only at the drafted tokens (one masked sum per position), the residual masses
    of positions 1..L-1 and the residual row at tau for the extra token, each sorting only the
    tokens whose residual bounds on C(x) leave open.
    """
    if paths == 1:
        return block_outcome(path, uniforms)
    batch, length = path.draft.shape
    p, q = path.p[:, :length], path.q
    ranking = local_ranking(p, q)  # [B, L, V]
    qx = token_probs(q, path.draft).to(torch.float64)
    cx = mass_ranked_below_token(ranking.flatten(0, 1), q.flatten(0, 1), path.draft.flatten()).view(batch, length)
    u = selection_masses(qx, cx.to(torch.float64))
    w = block_weights(token_probs(p, path.draft), skewed_probs(qx, cx.to(torch.float64), u, paths))
    tau = longest_accepted_lazily(p[:, 1:], q[:, 1:], ranking[:, 1:], w, u, uniforms[:, :length], paths)
    full = tau == length
    p_tau = select_positions(path.p, tau)
    at = tau.clamp_max(length - 1)
    residual = skewed_residual_rows(
        select_positions(p, at),
        select_positions(q, at),
        select_positions(ranking, at),
        select_positions(w, at),
        select_positions(u, at),
        paths,
    )
    residual = torch.where(full.unsqueeze(-1), p_tau.to(torch.float64), residual)
    return Outcome(tau, sample_inverse_cdf(residual_or_target(residual, p_tau.to(torch.float64)), uniforms[:, length]))


# paths [B, K, L]; p [B, K, L+1, V]; q [B, K, L, V]; u [B, L+1]
def gbv_decision(paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor, u: torch.Tensor, carry: None = None) -> Verdict:
    """GBV (Alg. 1): path selection, skewed draft, block verification with it."""
    chosen = select_path_index(paths, p, q)
    path = select_path(paths, p, q, chosen)
    return assemble_verdict(path.draft, gbv_outcome(path, paths.shape[1], u), chosen)


gbv_verify = DrawnPathVerifier(gbv_decision, single_path_uniforms)
