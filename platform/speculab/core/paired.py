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

What is kept is summed per prompt (`PromptSums`): a prompt's rounds share its context, so they are
not independent, and the figures are ratios of these sums over prompts with intervals over prompts
(`speculab.results.figures.paired_figures`). Ratios are taken prompt by prompt against the
configured verifier, which is always among the compared ones, so draft-to-draft variation cancels
out of them: that is what makes small differences measurable (docs/algorithms.md, "Paired
comparison").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from speculab.core.engine import Verifier


@dataclass(frozen=True)
class PromptSums:
    """Per prompt, in prompt order: the sequence-rounds that drafted and, per compared verifier, its
    accepted draft tokens over those rounds (each round's mean over the repeats)."""

    rounds: torch.Tensor  # [P] float64
    accepted: dict[str, torch.Tensor]  # verifier -> [P] float64

    @classmethod
    def concat(cls, parts: list[PromptSums]) -> PromptSums:
        """Consecutive units' sums as one point's, prompts in order."""
        return cls(
            torch.cat([part.rounds for part in parts]),
            {name: torch.cat([part.accepted[name] for part in parts]) for name in parts[0].accepted},
        )


class PairedComparison:
    """The engine's `PairedCheck`: sums, per prompt and compared verifier, the accepted length of every
    round (averaged over the repeats) and the rounds themselves."""

    def __init__(self, verifiers: dict[str, Verifier], repeats: int, seed: int, prompts: int) -> None:
        self.verifiers = verifiers
        self.repeats = repeats
        self.rng = torch.Generator().manual_seed(seed)
        self.rounds = torch.zeros(prompts, dtype=torch.float64)
        self.accepted = {name: torch.zeros(prompts, dtype=torch.float64) for name in verifiers}

    # paths [B, K, L]; p [B, K, L+1, V]; q [B, K, L, V]; rows: the prompt each of the B rows decodes
    def __call__(self, paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor, rows: list[int]) -> None:
        batch = paths.shape[0]
        tiled = [x.repeat(self.repeats, *([1] * (x.dim() - 1))) for x in (paths, p, q)]  # repeat-major [R*B, ...]
        seed = int(torch.randint(2**62, (), generator=self.rng))
        index = torch.tensor(rows, dtype=torch.long)
        self.rounds.index_add_(0, index, torch.ones(batch, dtype=torch.float64))
        for name, verify in self.verifiers.items():
            verdict = verify(*tiled, rng=torch.Generator().manual_seed(seed), carry=None)
            taus = (verdict.num_tokens - 1).to(torch.float64).view(self.repeats, batch)
            self.accepted[name].index_add_(0, index, taus.mean(0).cpu())

    def sums(self) -> PromptSums:
        return PromptSums(self.rounds.clone(), {name: sums.clone() for name, sums in self.accepted.items()})
