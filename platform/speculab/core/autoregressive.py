"""The engine's autoregressive baseline: the same loop (`speculab.core.engine.decode`) with a drafter that
proposes only the root (L = 0) and a verifier that samples the target's next token, so both methods
are timed and truncated by the same code, on the same target, prompts and batching.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from speculab.core.engine import DecodeSettings, Features, TargetModel, decode
from speculab.core.records import PromptRecord, RunResult
from speculab.drafting.sampling import SamplingParams, sample
from speculab.drafting.tree import DraftTree, Proposal
from speculab.verify.verdict import Verdict


class RootOnlyDrafter:
    """The autoregressive baseline's drafter: every round proposes the root alone (L = 0)."""

    def __init__(self) -> None:
        self.roots: list[int] = []

    def prefill(
        self, contexts: list[list[int]], roots: list[int], seed: int, features: Features = None, room: int = 0
    ) -> None:
        self.roots = list(roots)

    def propose(self, num_paths: int, length: int, sampling: SamplingParams) -> Proposal:
        paths = torch.empty(len(self.roots), 1, 0, dtype=torch.long)
        return Proposal(
            DraftTree.from_paths(torch.tensor(self.roots), paths), paths, torch.empty(len(self.roots), 1, 0, 0)
        )

    def commit(self, emitted: list[list[int]], features: Features = None) -> None:
        self.roots = [row[-1] for row in emitted]

    def retain(self, rows: torch.Tensor) -> None:
        self.roots = [self.roots[r] for r in rows.tolist()]

    def kv_bytes(self) -> int:
        return 0


# paths [B, 1, 0]; p [B, 1, 1, V]; q [B, 1, 0, 0]
def sample_target(
    paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor, *, rng: torch.Generator, carry: Any = None
) -> Verdict:
    """Autoregressive decoding in verifier form: the next token drawn from p at the root."""
    token = sample(p[:, 0, 0], 1, rng)  # [B, 1]
    zeros = torch.zeros(len(token), dtype=torch.long, device=token.device)
    return Verdict(token, zeros + 1, zeros)


def autoregressive(
    target: TargetModel,
    prompts: list[list[int]],
    settings: DecodeSettings,
    on_prompt_done: Callable[[PromptRecord], None] | None = None,
) -> RunResult:
    """The baseline: one target call per token, same prompts, batching and truncation."""
    settings = replace(settings, num_paths=1, length=0, tree_nodes=1)  # a round's tree is its root
    return decode(target, RootOnlyDrafter(), sample_target, prompts, settings, on_prompt_done)
