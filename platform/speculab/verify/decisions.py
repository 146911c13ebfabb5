"""Randomness for verifiers: the decisions interface and the uniforms the batched code consumes.

Every random choice a verifier makes is either a Bernoulli(prob) or a categorical draw from
non-negative weights. The scalar reference implementations make these choices through a
``Decisions`` object, so that a test can swap in an enumerator (``verify.exact``) and obtain
the exact output distribution, or a replay of given uniforms and compare with the batched
implementation draw for draw.

Both kinds of choice consume one uniform u in [0, 1): Bernoulli(prob) is ``u < prob``, a
categorical draw is the inverse CDF at u. A batched verifier draws a ``[B, n]`` table of
uniforms and each row consumes its uniforms left to right in the order the reference does,
so ``replay_decisions(uniforms[b])`` reproduces row b exactly. Nothing here touches global
random state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import torch

from speculab.device.hostreads import upload


class Decisions(Protocol):
    """The random choices of a scalar reference verifier."""

    def bernoulli(self, prob: float | torch.Tensor) -> bool: ...

    # weights [V] non-negative, not necessarily normalised, positive sum
    def categorical(self, weights: torch.Tensor) -> int: ...


def draw_uniforms(rng: torch.Generator, rows: int, count: int, device: torch.device) -> torch.Tensor:
    """``[rows, count]`` float64 uniforms from ``rng`` (on its device), moved to ``device``."""
    u = torch.rand(rows, count, generator=rng, dtype=torch.float64, device=rng.device)
    return upload(u, device)


# weights [B, V] non-negative with positive row sums; u [B] uniforms
def sample_inverse_cdf(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Batched inverse-CDF sampling: the first index whose cumulative weight exceeds u * total.

    Zero-weight entries are never chosen (their cumulative weight equals their predecessor's).
    Returns ``[B]`` int64.
    """
    cdf = weights.cumsum(-1, dtype=torch.float64)
    threshold = u.to(torch.float64) * cdf[:, -1]
    index = torch.searchsorted(cdf, threshold.unsqueeze(-1), right=True).squeeze(-1)  # #{cdf <= threshold}
    return index.clamp_max(weights.shape[-1] - 1)


class UniformDecisions:
    """Decisions driven by a stream of uniforms: ``next_uniform()`` returns the next one."""

    def __init__(self, next_uniform: Callable[[], float]) -> None:
        self.next_uniform = next_uniform

    def bernoulli(self, prob: float | torch.Tensor) -> bool:
        return self.next_uniform() < float(prob)

    # weights [V]
    def categorical(self, weights: torch.Tensor) -> int:
        u = torch.tensor([self.next_uniform()], dtype=torch.float64, device=weights.device)
        return int(sample_inverse_cdf(weights.unsqueeze(0), u)[0])


def generator_decisions(rng: torch.Generator) -> UniformDecisions:
    """Decisions drawn from a ``torch.Generator`` (how a reference runs outside tests)."""
    return UniformDecisions(lambda: float(torch.rand((), generator=rng, dtype=torch.float64, device=rng.device)))


def replay_decisions(uniforms: Sequence[float] | torch.Tensor) -> UniformDecisions:
    """Decisions replaying given uniforms in order (one row of a batched verifier's table)."""
    stream = iter([float(u) for u in uniforms])
    return UniformDecisions(lambda: next(stream))


def as_decisions(rng: torch.Generator | Decisions) -> Decisions:
    """Wrap a generator; pass a ``Decisions`` through unchanged."""
    return generator_decisions(rng) if isinstance(rng, torch.Generator) else rng
