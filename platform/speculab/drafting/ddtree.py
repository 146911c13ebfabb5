"""DDTree drafting: per-depth marginals from a drafter, turned into a tree by the loop.

`TreeDrafter` follows the engine's `Drafter` protocol around any source of marginals (the
draft role of `speculab.models`, in-process or a Ray actor proxy): the source returns q
[B, L, V] for the next L positions after its pending bonus token, and a tree builder (the
best-first DDTree of B nodes, or the single-chain baseline) turns them into a `Proposal`
without i.i.d. paths, which the engine verifies with the walk. `MarginalPathDrafter` turns
the same marginals into one drafted path for the path algorithms (token, block): the token
at depth j is drawn from q_j itself (argmax at T = 0), so q is exactly what produced the
draft and verification stays lossless. A DFlash2 source also returns its selector's law
(`drafting.selector`): the tree is then the selector's DDTree (or best path), and the drawn
paths (K of them, i.i.d.) are walks of its chain, each token's q its conditional given the token
before. `greedy_marginals` is the `ar_marginals` source: an autoregressive draft rolled out
greedily, one distribution per depth (L passes). Target features (DFlash) pass through to the
source untouched. Knows no model backend.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import torch

from speculab.drafting.best_first import best_first, chain_tree
from speculab.drafting.iid import ForestLM, step_nodes
from speculab.drafting.sampling import SamplingParams, draft_uniforms, sample, tempered_probs, truncate_probs
from speculab.drafting.selector import SelectorLaw, selector_chain, selector_paths, selector_tree
from speculab.drafting.tree import DraftTree, Proposal

BEST_FIRST, CHAIN = "best_first", "chain"  # algorithm.tree: the DDTree of `budget` nodes, or argmax per depth
TREES = (BEST_FIRST, CHAIN)


@dataclass(frozen=True)
class Marginals:
    root: torch.Tensor  # [B] the pending bonus token of every row
    q: torch.Tensor  # [B, L, V] the drafter's distribution at each depth after the root
    feature_bytes: int = 0  # target features absorbed for this draft (DFlash), bytes
    feature_s: float = 0.0  # seconds absorbing them (projection, context keys and values)
    selector: SelectorLaw | None = None  # DFlash2: the law its draft is drawn from (q: its marginals)


TreeBuilder = Callable[[Marginals], DraftTree]


class MarginalSource(Protocol):
    def prefill(
        self, contexts: list[list[int]], roots: list[int], seed: int, features: Any = None, room: int = 0
    ) -> None: ...
    def marginals(self, length: int, temperature: float) -> Marginals: ...
    def commit(self, emitted: list[list[int]], features: Any = None) -> None: ...
    def retain(self, rows: torch.Tensor) -> None: ...
    def kv_bytes(self) -> int: ...


def tree_builder(tree: str, budget: int | Callable[[], int]) -> TreeBuilder:
    """`best_first` (the DDTree of `budget` nodes) or `chain` (argmax per depth, one path), over the
    marginals or, from a DFlash2 source, over its selector's chain. `budget`: a number, or what gives each
    round's (`algorithm.budget=auto`: the adaptive policy's choice, `core.adaptive_budget`)."""
    if tree not in TREES:
        raise ValueError(f"algorithm.tree={tree!r}: must be one of {', '.join(TREES)}")
    return partial(build_tree, tree == CHAIN, budget if callable(budget) else partial(int, budget))


def build_tree(chain: bool, budget: Callable[[], int], m: Marginals) -> DraftTree:
    if m.selector is not None:
        return selector_chain(m.selector, m.root) if chain else selector_tree(m.selector, m.root, budget())
    return chain_tree(m.q, m.root) if chain else best_first(m.q, m.root, budget())


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


class MarginalDrafter:
    """What both drafters over a marginal source share: prefill, commit, retain pass through."""

    def __init__(self, source: MarginalSource) -> None:
        self.source = source

    def prefill(
        self, contexts: list[list[int]], roots: list[int], seed: int, features: Any = None, room: int = 0
    ) -> None:
        self.source.prefill(contexts, roots, seed, features=features, room=room)

    def commit(self, emitted: list[list[int]], features: Any = None) -> None:
        self.source.commit(emitted, features=features)

    def retain(self, rows: torch.Tensor) -> None:
        self.source.retain(rows)

    def kv_bytes(self) -> int:
        return self.source.kv_bytes()


class TreeDrafter(MarginalDrafter):
    """Drafter protocol: marginals from `source`, then one tree per prompt from `build`."""

    def __init__(self, source: MarginalSource, build: TreeBuilder) -> None:
        super().__init__(source)
        self.build = build

    def propose(self, num_paths: int, length: int, sampling: SamplingParams) -> Proposal:
        m = self.source.marginals(length, marginal_temperature(sampling.temperature))
        start = time.perf_counter()
        tree = self.build(m)
        build_s = time.perf_counter() - start
        return Proposal(tree, None, None, build_s, m.feature_bytes, m.feature_s, marginals=m.q)


class MarginalPathDrafter(MarginalDrafter):
    """Drafter protocol for the path algorithms: one path, token j drawn from q_j (K = 1); from a
    DFlash2 source, K i.i.d. walks of its selector's chain."""

    def __init__(self, source: MarginalSource, rng: torch.Generator) -> None:
        super().__init__(source)
        self.rng = rng

    def prefill(
        self, contexts: list[list[int]], roots: list[int], seed: int, features: Any = None, room: int = 0
    ) -> None:
        self.rng.manual_seed(seed)
        super().prefill(contexts, roots, seed, features, room)

    def propose(self, num_paths: int, length: int, sampling: SamplingParams) -> Proposal:
        m = self.source.marginals(length, sampling.temperature)  # one-hot at T = 0
        if m.selector is not None:
            law = m.selector.truncated(sampling.top_k, sampling.top_p)
            u = draft_uniforms(self.rng, m.root.shape[0], num_paths, length)  # [B, K, L]
            paths, q_paths = selector_paths(law, u.to(law.conditionals.device))  # [B, K, L], [B, K, L, V]
            return Proposal(
                DraftTree.from_paths(m.root.to(paths.device), paths), paths, q_paths, 0.0, m.feature_bytes, m.feature_s
            )
        q = truncate_probs(m.q, sampling.top_k, sampling.top_p)  # [B, L, V]
        path = sample(q, 1, self.rng).transpose(1, 2)  # [B, 1, L]
        tree = DraftTree.from_paths(m.root, path)
        return Proposal(tree, path, q[:, None], 0.0, m.feature_bytes, m.feature_s)
