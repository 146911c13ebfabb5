"""DDTree drafting: per-depth marginals from a drafter, turned into a tree by the coordinator.

`TreeDrafter` follows the engine's `Drafter` protocol around any source of marginals (the
draft role of `speculab.models`, in-process or a Ray actor proxy): the source returns q
[B, L, V] for the next L positions after its pending bonus token, and a tree builder (the
best-first DDTree of B nodes, or the single-chain baseline) turns them into a `Proposal`
without i.i.d. paths, which the engine verifies with the walk. `greedy_marginals` is the
`ar_marginals` source: an autoregressive draft rolled out greedily, one distribution per
depth (L passes). Knows no model backend.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Protocol

import torch

from speculab.drafting.best_first import best_first_tree, chain_tree
from speculab.drafting.iid import ForestLM, step_nodes
from speculab.drafting.sampling import SamplingParams, tempered_probs
from speculab.drafting.tree import DraftTree, Proposal

TREES = ("best_first", "chain")
TreeBuilder = Callable[[torch.Tensor, torch.Tensor], DraftTree]  # (q [B, L, V], root [B]) -> tree


class MarginalSource(Protocol):
    def prefill(self, contexts: list[list[int]], roots: list[int], seed: int) -> None: ...
    def marginals(
        self, length: int, temperature: float
    ) -> tuple[torch.Tensor, torch.Tensor]: ...  # root [B], q [B, L, V]
    def commit(self, emitted: list[list[int]]) -> None: ...
    def retain(self, rows: torch.Tensor) -> None: ...
    def kv_bytes(self) -> int: ...


def tree_builder(tree: str, budget: int) -> TreeBuilder:
    """`best_first` (the DDTree of `budget` nodes) or `chain` (argmax per depth, one path)."""
    if tree == "chain":
        return chain_tree
    if tree == "best_first":
        return partial(best_first_tree, budget=budget)
    raise ValueError(f"algorithm.tree={tree!r}: must be one of {', '.join(TREES)}")


def marginal_temperature(temperature: float) -> float:
    """The tree ranks tokens by the drafter's distribution: at T = 0 its plain softmax (T = 1),
    since one-hot marginals would tie every token but the argmax."""
    return temperature if temperature > 0 else 1.0


def greedy_marginals(lm: ForestLM, root_logits: torch.Tensor, length: int, temperature: float) -> torch.Tensor:
    """q [B, L, V]: the draft's distribution at each depth along its own greedy continuation."""
    qs = [tempered_probs(root_logits, temperature)]  # [B, V]
    token = root_logits.argmax(dim=-1, keepdim=True)  # [B, 1]
    for step in range(length - 1):
        logits = lm.extend(step_nodes(token, step))[:, 0]  # [B, V]
        qs.append(tempered_probs(logits, temperature))
        token = logits.argmax(dim=-1, keepdim=True)
    return torch.stack(qs, dim=1)


class TreeDrafter:
    """Drafter protocol: marginals from `source`, then one tree per prompt from `build`."""

    def __init__(self, source: MarginalSource, build: TreeBuilder) -> None:
        self.source = source
        self.build = build

    def prefill(self, contexts: list[list[int]], roots: list[int], seed: int) -> None:
        self.source.prefill(contexts, roots, seed)

    def propose(self, num_paths: int, length: int, sampling: SamplingParams) -> Proposal:
        root, q = self.source.marginals(length, marginal_temperature(sampling.temperature))
        start = time.perf_counter()
        tree = self.build(q, root)
        return Proposal(tree, None, None, time.perf_counter() - start)

    def commit(self, emitted: list[list[int]]) -> None:
        self.source.commit(emitted)

    def retain(self, rows: torch.Tensor) -> None:
        self.source.retain(rows)

    def kv_bytes(self) -> int:
        return self.source.kv_bytes()
