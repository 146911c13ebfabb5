"""Next-token distributions at the sampling temperature, and draft-side truncation.

Temperature 0 means greedy decoding: the distribution is one-hot at the argmax (ties go to
the lowest token id), so every verifier sees exact zeros and ones, never 0/0. Top-k and
top-p are for the draft only: verifiers use the truncated q that actually produced the
draft, which keeps verification lossless.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_k: int = 0  # draft only; 0 = no limit
    top_p: float = 1.0  # draft only
    # draft only: stop a round's drafting after a token whose draft probability is below this in every row
    # (0: never; `drafting.iid.sample_iid_paths`)
    confidence_stop: float = 0.0


def tempered_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """logits [..., V] -> probabilities [..., V] in float32 at `temperature` (0 = one-hot argmax)."""
    logits = logits.float()
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    return torch.softmax(logits / temperature, dim=-1)


def truncate_probs(probs: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Keep the top_k most likely tokens and the smallest top_p nucleus, renormalised.

    probs [..., V]; top_k 0 means no limit. The most likely token always survives.
    """
    if top_k <= 0 and top_p >= 1.0:
        return probs
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    keep = torch.ones_like(sorted_probs, dtype=torch.bool)
    if top_k > 0:
        keep[..., top_k:] = False
    if top_p < 1.0:
        # A token stays if the mass strictly before it is below top_p.
        keep &= (sorted_probs.cumsum(-1) - sorted_probs) < top_p
    kept = torch.zeros_like(probs).scatter(-1, order, sorted_probs * keep)
    return kept / kept.sum(-1, keepdim=True)


def draft_probs(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """The draft's sampling distribution: tempered, then truncated. logits [..., V]."""
    return truncate_probs(tempered_probs(logits, temperature), top_k, top_p)


def sample(probs: torch.Tensor, num_samples: int, rng: torch.Generator) -> torch.Tensor:
    """num_samples i.i.d. draws per row of probs [..., V] -> [..., num_samples] int64 (`sample_with`). The
    uniforms come from `rng` on its own device and move to probs' (the engine's generator lives on the
    CPU; a drafter's on its model's device, where they stay)."""
    u = torch.rand(*probs.shape[:-1], num_samples, generator=rng, dtype=torch.float64, device=rng.device)
    return sample_with(probs, u)


def sample_with(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Draws from probs [..., V] by the uniforms u [..., n] in [0, 1) -> [..., n] int64.

    Inverse CDF on (1 - u) * total: the threshold is in (0, total], so the first index with cdf >=
    threshold always exists and never has zero probability. On CPU this is ~10x cheaper than
    torch.multinomial at V = 4096, which matters once per drafted token."""
    cdf = probs.to(torch.float64).cumsum(-1)  # [..., V]
    return torch.searchsorted(cdf, (1 - u.to(probs.device)) * cdf[..., -1:])


def draft_uniforms(rng: torch.Generator, rows: int, paths: int, length: int) -> torch.Tensor:
    """A round's draft uniforms [B, K, L] in [0, 1), float64 on the generator's device: drawn whole, so a
    round's draft takes the same ones however it is computed (`sample_with`), drafted ahead or not."""
    return torch.rand(rows, paths, length, generator=rng, dtype=torch.float64, device=rng.device)
