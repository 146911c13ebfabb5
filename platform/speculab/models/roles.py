"""The target and drafter roles over any decoder backend (transformers or toy).

`TreeTarget` and `DraftModel` implement the engine's `TargetModel` and `Drafter` protocols (docs/architecture.md).
They build their decoder from an `LMSpec` inside the process that owns them, so a Ray actor
wrapping either one loads weights on its own side and ships only tokens and probabilities.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch

from speculab.drafting.ddtree import greedy_marginals
from speculab.drafting.iid import sample_iid_paths
from speculab.drafting.sampling import SamplingParams, tempered_probs
from speculab.drafting.tree import DraftTree, Proposal

if TYPE_CHECKING:
    from speculab.baselines import BaselineResult
    from speculab.engine import DecodeSettings
    from speculab.models.block import BlockLM


class DecoderLM(Protocol):
    def reset(self, batch_size: int) -> None: ...
    def feed(self, rows: list[list[int]]) -> torch.Tensor: ...  # logits [B, V]
    def extend(self, nodes: DraftTree) -> torch.Tensor: ...  # logits [B, N, V]
    def commit(self, keep: torch.Tensor) -> None: ...  # keep [B, M]
    def retain(self, rows: torch.Tensor) -> None: ...
    @property
    def peak_bytes(self) -> int: ...  # largest KV cache footprint since reset


@dataclass(frozen=True)
class LMSpec:
    """What to load: `hf` (a local transformers checkpoint), `block` (a block drafter) or `toy` (a bigram table)."""

    backend: str
    path: str = ""
    dtype: str = "float32"
    device: str = "cpu"
    threads: int = 0  # torch CPU threads in the owning process; 0 = leave as is
    tp_size: int = 1  # > 1: this process holds one AutoTP shard (its TP world must exist already)
    table: torch.Tensor | None = field(default=None, compare=False)  # toy: [V, V]


def build_lm(spec: LMSpec) -> DecoderLM | BlockLM:
    if spec.threads:
        torch.set_num_threads(spec.threads)
    if spec.backend == "hf":
        from speculab.models.hf import TreeLM, load_causal_lm

        if spec.tp_size > 1:
            from speculab.models.tp import load_tp_causal_lm

            return TreeLM(load_tp_causal_lm(spec.path, spec.dtype, spec.device, spec.tp_size))
        return TreeLM(load_causal_lm(spec.path, spec.dtype, spec.device))
    if spec.backend == "toy":
        from speculab.models.toy import BigramLM

        assert spec.table is not None  # a toy model is its bigram table
        return BigramLM(spec.table)
    if spec.backend == "block":
        from speculab.models.block import BlockLM

        return BlockLM(spec.path, spec.dtype, spec.device)
    raise ValueError(f"model backend must be one of hf, toy, block; got {spec.backend!r}")


class TreeTarget:
    """TargetModel: prefill, score a batch of trees in one pass, commit the accepted path."""

    def __init__(self, spec: LMSpec) -> None:
        lm = build_lm(spec)
        assert not hasattr(lm, "block_marginals"), "a block drafter cannot score trees"
        self.lm = lm

    def prefill(self, contexts: list[list[int]]) -> None:
        """Process each prompt but its last token (the first round's root)."""
        self.lm.reset(len(contexts))
        if any(contexts):
            self.lm.feed(contexts)

    def score(self, tree: DraftTree, temperature: float) -> torch.Tensor:
        """Target probabilities p [B, N, V] at every node, in one forward pass."""
        return tempered_probs(self.lm.extend(tree), temperature)

    def commit(self, accepted_nodes: torch.Tensor) -> None:
        """accepted_nodes [B, M]: tree nodes to keep, root first, -1 padded."""
        self.lm.commit(accepted_nodes)

    def retain(self, rows: torch.Tensor) -> None:
        self.lm.retain(rows)

    def kv_bytes(self) -> int:
        """Peak KV-cache bytes since the last prefill (tree or drafted paths included)."""
        return self.lm.peak_bytes

    def hf_generate(self, prompts: list[list[int]], settings: DecodeSettings) -> BaselineResult:
        """transformers' `generate` on this target's own model (the `baseline_hf` of a run); leaves the
        tree cache alone."""
        from speculab.baselines import generate

        model = getattr(self.lm, "model", None)  # a transformers backend's model (toy tables have none)
        if model is None:
            raise ValueError("baseline_hf needs a transformers target (model.backend=hf)")
        return generate(model, prompts, settings)


class DraftModel:
    """Drafter: K i.i.d. paths of length L per prompt from an autoregressive draft model.

    Tokens committed since the last round (accepted tokens, then the extra token) are fed at
    the start of the next proposal, in the same pass that yields the first draft step.
    """

    def __init__(self, spec: LMSpec) -> None:
        self.lm = build_lm(spec)
        self.pending: list[list[int]] = []
        self.rng = torch.Generator(device=spec.device)

    def prefill(self, contexts: list[list[int]], roots: list[int], seed: int) -> None:
        """Process each prompt but its last token; the roots wait for the first proposal."""
        self.lm.reset(len(contexts))
        self.rng.manual_seed(seed)
        if any(contexts):
            self.lm.feed(contexts)
        self.pending = [[root] for root in roots]

    def propose(self, num_paths: int, length: int, sampling: SamplingParams) -> Proposal:
        assert not hasattr(self.lm, "block_marginals"), "a block drafter drafts marginals, not paths"
        root_logits = self.lm.feed(self.pending)
        root = self._root().to(root_logits.device)
        proposal = sample_iid_paths(self.lm, root, root_logits, num_paths, length, sampling, self.rng)
        self._drop_forest(root_logits.device)
        return proposal

    def marginals(self, length: int, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(root [B], q [B, L, V]) for DDTree: a block drafter's one pass, or the greedy rollout
        of an autoregressive draft (`ar_marginals`, L passes)."""
        if hasattr(self.lm, "block_marginals"):
            return self._root(), self.lm.block_marginals(self.pending, length, temperature).cpu()
        q = greedy_marginals(self.lm, self.lm.feed(self.pending), length, temperature)
        self._drop_forest(q.device)
        return self._root(), q.cpu()

    def _root(self) -> torch.Tensor:
        """[B] the pending bonus token of every row."""
        return torch.tensor([row[-1] for row in self.pending])

    def _drop_forest(self, device: torch.device) -> None:
        """Discard drafted nodes: the next round feeds what was actually committed."""
        self.lm.commit(torch.empty(len(self.pending), 0, dtype=torch.long, device=device))

    def commit(self, emitted: list[list[int]]) -> None:
        """Tokens each row committed this round (accepted, then the extra token)."""
        self.pending = emitted

    def retain(self, rows: torch.Tensor) -> None:
        self.lm.retain(rows)
        self.pending = [self.pending[r] for r in rows.tolist()]

    def kv_bytes(self) -> int:
        """Peak KV-cache bytes since the last prefill (tree or drafted paths included)."""
        return self.lm.peak_bytes
