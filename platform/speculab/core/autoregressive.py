"""The engine's autoregressive baseline: the same loop (`speculab.core.engine.decode`) with a drafter that
proposes only the root (L = 0) and a verifier that samples the target's next token, so both methods
are timed and truncated by the same code, on the same target, prompts and batching.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch

from speculab.core.engine import DecodeSettings, Features, TargetModel, decode, root_proposal, sample_target
from speculab.core.records import PromptRecord, RunResult
from speculab.drafting.sampling import SamplingParams
from speculab.drafting.tree import Proposal


class RootOnlyDrafter:
    """The autoregressive baseline's drafter: every round proposes the root alone (L = 0)."""

    def __init__(self) -> None:
        self.roots: list[int] = []

    def prefill(
        self, contexts: list[list[int]], roots: list[int], seed: int, features: Features = None, room: int = 0
    ) -> None:
        self.roots = list(roots)

    def propose(self, num_paths: int, length: int, sampling: SamplingParams) -> Proposal:
        return root_proposal(self.roots)

    def commit(self, emitted: list[list[int]], features: Features = None) -> None:
        self.roots = [row[-1] for row in emitted]

    def retain(self, rows: torch.Tensor) -> None:
        self.roots = [self.roots[r] for r in rows.tolist()]

    def kv_bytes(self) -> int:
        return 0


def autoregressive(
    target: TargetModel,
    prompts: list[list[int]],
    settings: DecodeSettings,
    on_prompt_done: Callable[[PromptRecord], None] | None = None,
) -> RunResult:
    """The baseline: one target call per token, same prompts, batching and truncation."""
    settings = replace(settings, num_paths=1, length=0, tree_nodes=1)  # a round's tree is its root
    return decode(target, RootOnlyDrafter(), sample_target, prompts, settings, on_prompt_done)
