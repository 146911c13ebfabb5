"""The result of verifying one round: ``Verdict``, and how verifiers assemble it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

PAD = -1


@dataclass
class Verdict:
    """Per prompt: the accepted draft tokens then the extra token, and the carry.

    The engine commits ``tokens[b, :num_tokens[b]]``; the first ``num_tokens - 1`` of them
    are the accepted prefix of ``paths[b, path[b]]``.
    """

    tokens: torch.Tensor  # [B, L+1] int64: accepted tokens, then the extra token, then PAD (-1)
    num_tokens: torch.Tensor  # [B] int64: tau + 1
    path: torch.Tensor  # [B] int64: index of the path whose prefix was accepted
    carry: Any = None  # next round's state (a dataclass with ``select(rows)``), or None

    @property
    def tau(self) -> torch.Tensor:
        """``[B]`` number of accepted draft tokens."""
        return self.num_tokens - 1

    @classmethod
    def make_dummy(cls, rows: Sequence[Sequence[int]], draft_length: int, path: Sequence[int] | None = None) -> Verdict:
        """A verdict from explicit token lists (accepted tokens then the extra token), for tests."""
        tokens = torch.full((len(rows), draft_length + 1), PAD, dtype=torch.int64)
        for b, row in enumerate(rows):
            tokens[b, : len(row)] = torch.tensor(row, dtype=torch.int64)
        num_tokens = torch.tensor([len(row) for row in rows], dtype=torch.int64)
        path_t = torch.zeros(len(rows), dtype=torch.int64) if path is None else torch.tensor(path)
        return cls(tokens, num_tokens, path_t)

    def rows(self) -> list[list[int]]:
        """The committed tokens of every prompt, as Python lists: one host read in all (on a GPU each
        read waits for the queued kernels), not one per row."""
        return [row[: row[-1]] for row in torch.cat([self.tokens, self.num_tokens[:, None]], dim=1).tolist()]


@dataclass
class Outcome:
    """What a single-path verification decided, before it becomes a ``Verdict``."""

    tau: torch.Tensor  # [B] int64 number of accepted draft tokens
    extra: torch.Tensor  # [B] int64 the correction or bonus token


# draft [B, L] tokens of the chosen path; path [B] its index
def assemble_verdict(draft: torch.Tensor, outcome: Outcome, path: torch.Tensor, carry: Any = None) -> Verdict:
    """Write ``draft[:, :tau]`` then the extra token into a padded ``[B, L+1]`` tensor."""
    length = draft.shape[1]
    tau, extra = outcome.tau.to(torch.int64), outcome.extra.to(torch.int64)
    padded = torch.nn.functional.pad(draft, (0, 1), value=PAD).scatter_(1, tau.unsqueeze(-1), extra.unsqueeze(-1))
    # the draft before tau, the extra token at tau, PAD after it
    tokens = padded.masked_fill_(torch.arange(length + 1, device=draft.device) > tau.unsqueeze(-1), PAD)
    return Verdict(tokens, tau + 1, path.to(torch.int64), carry)


# draft [L] tokens of the chosen path
def reference_verdict(draft: torch.Tensor, tau: int, extra: int, path: int, carry: Any = None) -> Verdict:
    """The batch-of-one verdict a scalar reference implementation returns."""
    outcome = Outcome(torch.tensor([tau]), torch.tensor([extra]))
    return assemble_verdict(draft.unsqueeze(0).cpu(), outcome, torch.tensor([path]), carry)
