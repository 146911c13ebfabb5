"""Tensor building blocks shared by the verifiers (batched and reference alike).

The reference implementations call these on single rows so that both implementations do the
same arithmetic; every function is safe for zeros in p or q (no 0/0 anywhere).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from speculab.device.hostreads import reads_free


# walking [B] bool
def rows_to_step(walking: torch.Tensor) -> torch.Tensor:
    """``[n]`` the rows a batched loop steps next.

    Where host reads are free, only the walking rows (the finished ones cost nothing, and
    n = 0 ends the loop); elsewhere every row, a static shape, and the caller leaves the
    finished rows' state as it is.
    """
    if reads_free(walking):
        return walking.nonzero().squeeze(1)
    return torch.arange(walking.shape[0], device=walking.device)


# mask [R, V] bool
def packed_columns(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's marked columns packed left, in order: ``[R, W]`` column indices and ``[R, W]``
    bool whether the slot holds a marked one (the rest hold unmarked columns).

    W is the most marked columns of any row where host reads are free (so the caller works on
    the sparse set only), else V (a static shape). Places come from one running count, a
    permutation of every row: no sort.
    """
    marked = mask.long().cumsum(-1)
    count = marked[:, -1:]
    index = torch.arange(mask.shape[-1], device=mask.device)
    # an unmarked column j goes after the marked ones, at its rank among the unmarked: j - marked
    place = torch.where(mask, marked - 1, (count + index) - marked)
    columns = torch.empty_like(place).scatter_(1, place, index.expand_as(place))
    width = max(int(count.max()), 1) if reads_free(mask) else mask.shape[-1]
    return columns[:, :width], torch.arange(width, device=mask.device) < count


# dist [..., V]; tokens [...] int64
def token_probs(dist: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``dist[..., tokens]``: the probability of each token under its own distribution."""
    return dist.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


# num [...]; den [...] non-negative
def clipped_ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """``min(1, num / den)``, with 1 where ``den == 0`` (a drafted token never has q = 0)."""
    return torch.where(num >= den, torch.ones_like(num), num / torch.where(den > 0, den, 1))


# a [..., 1] or scalar; p [..., V]; s [..., 1] or scalar; q [..., V]
def positive_part(a: torch.Tensor | float, p: torch.Tensor, s: torch.Tensor | float, q: torch.Tensor) -> torch.Tensor:
    """``max(a p - s q, 0)`` elementwise: the unnormalised residual of BV eq. 3-5 and App. C."""
    return (a * p - s * q).clamp_min(0)


# Elements per slice of ``residual_mass`` (4 MiB of float32): small enough to stay in cache.
SLICE_ELEMENTS = 1 << 20


# a, s: numbers or tensors [N, ..., 1] (p's dtype) broadcasting against p; p, q [N, ..., V]
def residual_mass(a: torch.Tensor | float, p: torch.Tensor, s: torch.Tensor | float, q: torch.Tensor) -> torch.Tensor:
    """``[N, ...]`` sum_x max(a p(x) - s q(x), 0), equal to ``positive_part(a, p, s, q).sum(-1)``.

    Computed a few leading rows at a time in two reused buffers: at batch sizes where [B, L, V]
    temporaries reach hundreds of MB, fresh memory (page faults, cache misses) costs several
    times the arithmetic.
    """
    step = max(1, SLICE_ELEMENTS // max(p.shape[1:].numel(), 1))
    scaled_p = p.new_empty((min(step, p.shape[0]), *p.shape[1:]))
    scaled_q = torch.empty_like(scaled_p)
    mass = p.new_empty(p.shape[:-1])
    for start in range(0, p.shape[0], step):
        rows = slice(start, min(start + step, p.shape[0]))
        count = rows.stop - rows.start
        x = torch.mul(p[rows], _rows_of(a, rows, p), out=scaled_p[:count])
        y = torch.mul(q[rows], _rows_of(s, rows, p), out=scaled_q[:count])
        torch.sum(x.sub_(y).clamp_min_(0), -1, out=mass[rows])
    return mass


def _rows_of(factor: torch.Tensor | float, rows: slice, p: torch.Tensor) -> torch.Tensor | float:
    """A factor's slice along p's leading rows (numbers and broadcast factors as they are)."""
    if isinstance(factor, torch.Tensor) and factor.dim() == p.dim() and factor.shape[0] == p.shape[0]:
        return factor[rows]
    return factor


# weights [..., V] non-negative; target [..., V]
def residual_or_target(weights: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``weights`` where they have mass, else ``target``.

    An empty residual is a probability-zero event that rounding can make reachable; falling
    back to the target keeps the sample defined instead of dividing 0 by 0.
    """
    return torch.where(weights.sum(-1, keepdim=True) > 0, weights, target)


# x [B, L, ...]; index [B] int64 in [0, L)
def select_positions(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``x[b, index[b]]`` for every row b: ``[B, ...]``."""
    rows = torch.arange(x.shape[0], device=x.device)
    return x[rows, index]


@dataclass
class SinglePath:
    """One drafted path per prompt, with its target and draft distributions."""

    draft: torch.Tensor  # [B, L] int64 drafted tokens
    p: torch.Tensor  # [B, L+1, V] target distribution after each prefix of the path
    q: torch.Tensor  # [B, L, V] draft distribution that produced each drafted token


# paths [B, K, L]; p [B, K, L+1, V]; q [B, K, L, V]; index [B] int64 in [0, K)
def select_path(paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor, index: torch.Tensor) -> SinglePath:
    """Path ``index[b]`` of every prompt b."""
    return SinglePath(select_positions(paths, index), select_positions(p, index), select_positions(q, index))
