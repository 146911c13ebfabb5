"""Paired (counterfactual) comparison of verifiers on the same drafts (`algorithm.compare`).

Every round, the drafts the run just verified (the same paths, p and q) are also verified by
each compared verifier `repeats` times in one batched call, while decoding goes on with the
configured verifier and its own randomness (so the decoded tokens are the same with or without
the comparison). Common random numbers: each round, every compared verifier gets a generator
with the same fresh seed, so verifiers that draw the same uniforms (token and block draw one
per position) decide on the same ones; each verifier's own law is unchanged. Verifiers that
carry a modified target into the next round (greedy_block, spectr_gbv) start from a fresh
carry every round here, so they are compared as one-round rules. A single-path verifier given
K > 1 paths verifies the first.

The unit of the statistics is one sequence-round: its accepted length averaged over the
repeats. Differences are taken unit by unit against the configured verifier, which is always
among the compared ones, so draft-to-draft variation cancels out of them: that is what makes
small differences measurable (docs/algorithms.md, "Paired comparison").
"""

from __future__ import annotations

import torch

from speculab.engine import Verifier


class PairedComparison:
    """The engine's `PairedCheck`: collects, per compared verifier, the mean accepted length of every unit."""

    def __init__(self, verifiers: dict[str, Verifier], repeats: int, seed: int) -> None:
        self.verifiers = verifiers
        self.repeats = repeats
        self.rng = torch.Generator().manual_seed(seed)
        self.accepted: dict[str, list[torch.Tensor]] = {name: [] for name in verifiers}  # per round: [B] float64

    # paths [B, K, L]; p [B, K, L+1, V]; q [B, K, L, V]
    def __call__(self, paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor) -> None:
        batch = paths.shape[0]
        tiled = [x.repeat(self.repeats, *([1] * (x.dim() - 1))) for x in (paths, p, q)]  # repeat-major [R*B, ...]
        seed = int(torch.randint(2**62, (), generator=self.rng))
        for name, verify in self.verifiers.items():
            verdict = verify(*tiled, rng=torch.Generator().manual_seed(seed), carry=None)
            taus = (verdict.num_tokens - 1).to(torch.float64).view(self.repeats, batch)
            self.accepted[name].append(taus.mean(0).cpu())

    def units(self) -> dict[str, torch.Tensor]:
        """Per verifier, [U] the mean accepted length of every sequence-round so far."""
        return {name: torch.cat(rounds) if rounds else torch.empty(0) for name, rounds in self.accepted.items()}
