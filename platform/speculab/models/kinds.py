"""The kinds of model behind the roles (`models.roles`), as runtime-checkable protocols.

The roles tell them apart with isinstance. Every kind resets, retains rows and reports its KV
cache's peak (`SlotLM`); a `DecoderLM` (`models.hf.TreeLM`, `models.toy.BigramLM`) is fed tokens
and extends forests of draft nodes; a `OnePassDrafterLM` (`models.parallel.ParallelDraftLM`) drafts
the marginals of every position of a block in one pass, and a `FeatureConditionedLM`
(`models.dflash.DFlashLM`) is one that reads its context as the target's hidden features
(`FeatureSource`) instead of tokens; a `SelectorDrafterLM` (`models.dflash.DFlash2LM`) also drafts
its selector's law (`drafting.selector`).
An isinstance against one of them looks up every member by name (~10 us in Python 3.11).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch

from speculab.drafting.selector import SelectorLaw
from speculab.drafting.tree import DraftTree

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from speculab.models.lean import LeanStack


@runtime_checkable
class SlotLM(Protocol):
    def reset(self, batch_size: int, capacity: int) -> None: ...  # capacity: slots per row (models.slots)
    def retain(self, rows: torch.Tensor) -> None: ...
    @property
    def peak_bytes(self) -> int: ...  # largest KV cache footprint since reset


@runtime_checkable
class TokenLM(SlotLM, Protocol):
    """Reads its context as tokens (every kind but a feature-conditioned drafter)."""

    def feed(self, rows: list[list[int]]) -> torch.Tensor: ...  # logits [B, V]
    def commit(self, keep: torch.Tensor) -> None: ...  # keep [B, M]


@runtime_checkable
class DecoderLM(TokenLM, Protocol):
    def extend(self, nodes: DraftTree) -> torch.Tensor: ...  # logits [B, N, V]


@runtime_checkable
class OnePassDrafterLM(SlotLM, Protocol):
    """Drafts the marginals of a block after the bonus in one pass (`models.parallel`, `models.dflash`)."""

    def block_marginals(self, pending: list[list[int]], length: int, temperature: float) -> torch.Tensor: ...


@runtime_checkable
class FeatureConditionedLM(OnePassDrafterLM, Protocol):
    """Reads its context as the target's hidden features of it (DFlash), not as tokens."""

    def absorb(self, features: torch.Tensor, valid: torch.Tensor) -> None: ...  # [B, T, n * hidden], [B, T]


@runtime_checkable
class SelectorDrafterLM(FeatureConditionedLM, Protocol):
    """Draws its block from a candidate selector's chain (DFlash2), whose law it returns."""

    def block_law(self, pending: list[list[int]], length: int, temperature: float) -> SelectorLaw: ...


@runtime_checkable
class FeatureSource(Protocol):
    """A target that keeps the hidden features of the nodes its last commit kept (None: no feature layers)."""

    features: torch.Tensor | None  # [B, M, n * hidden]


@runtime_checkable
class TransformersLM(Protocol):
    """A model over a transformers causal LM, loaded by transformers or read from its checkpoint without its
    classes (`loaded`: `models.checkpoint_lm`), and its layers as the lean stack reads them (`lean`, None where
    they run as transformers' modules). `model` is transformers' model either way (what `baseline_hf`
    generates with); for a checkpoint it is built on first use, so an isinstance check, which looks up
    every member of a runtime protocol, must not name it."""

    loaded: Any
    lean: LeanStack | None

    if TYPE_CHECKING:

        @property
        def model(self) -> PreTrainedModel: ...
