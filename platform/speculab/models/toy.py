"""Analytic toy language models: next-token distributions that depend on the last token only.

A `BigramLM` holds a table [V, V] of next-token probabilities given the previous token
(rows all equal: a context-free model). It implements the same decoder interface as the
transformers backend, so the real engine runs on it in microseconds per round: exact
tests and large statistical tests use it. It has no KV cache, so commits are free.
"""

from __future__ import annotations

import torch

from speculab.drafting.tree import DraftTree


class BigramLM:
    def __init__(self, table: torch.Tensor) -> None:
        # table [V, V]: row u is the next-token distribution after token u.
        self.log_table = table.double().log()
        self.batch = 0
        self.peak_bytes = 0  # no KV cache

    def reset(self, batch_size: int, capacity: int = 0) -> None:
        self.batch = batch_size  # a bigram table keeps no cache: nothing to size

    def feed(self, rows: list[list[int]]) -> torch.Tensor:
        """logits [B, V] after each row's last token (an empty row reads row 0: unused)."""
        return self.log_table[torch.tensor([row[-1] if row else 0 for row in rows])]

    def extend(self, nodes: DraftTree) -> torch.Tensor:
        """logits [B, N, V] after each node's token."""
        return self.log_table[nodes.tokens]

    def commit(self, keep: torch.Tensor) -> None:
        pass

    def retain(self, rows: torch.Tensor) -> None:
        self.batch = len(rows)


def random_bigram(vocab: int, generator: torch.Generator, zeros: bool = False) -> torch.Tensor:
    """A random table [V, V] with rows on the simplex; `zeros` knocks out some entries per row."""
    table = torch.rand(vocab, vocab, generator=generator, dtype=torch.float64)
    if zeros:
        knock = torch.rand(vocab, vocab, generator=generator) < 0.3
        knock[torch.arange(vocab), torch.randint(vocab, (vocab,), generator=generator)] = False
        table = table.masked_fill(knock, 0.0)
    return table / table.sum(dim=1, keepdim=True)
