"""transformers backend: a causal LM from a local path, decoded over trees with a KV cache.

`TreeLM` is the one piece that talks to transformers. Its cache is a `SlotCache` (`models.slots`,
the DFlash drafter's too): a padded batch of preallocated slots written in place, with a validity
mask per slot, so prompts of different lengths and different numbers of accepted tokens share
one tensor; `reset` takes the capacity of the batch's workload, and the holes are repacked away
before a forward would pass it, so a cache sized by `workload_capacity` keeps its buffers for
the whole batch. Uncommitted nodes (a draft tree being scored, or the K paths being drafted)
form a forest after the committed slots; one forward pass extends it with explicit position
ids and a causal mask (chains) or a 4-D additive tree mask, and `commit` keeps chosen nodes
(`SlotCache.commit`: a crop for a kept prefix, else a gather of the forest's slots).
Given `feature_layers`, it also keeps every forest node's hidden states at those layers
(transformers' `hidden_states[id + 1]`, concatenated) and `commit` leaves the kept nodes' ones
in `features`: what a DFlash drafter is conditioned on. Without them nothing is captured.
The target and drafter roles (`models.roles`) drive it.
Loading happens here, or, for a Llama or Qwen3 checkpoint whose layers all run lean, without transformers'
model classes (`models.checkpoint_lm`: the faster start); what to load and how to validate it is the
config's business.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch
from transformers import AutoModelForCausalLM
from transformers.utils import logging as hf_logging

from speculab.device.graphs import Graphs
from speculab.device.hostreads import reads_free, upload
from speculab.drafting.tree import DraftTree
from speculab.models.checkpoint_lm import CheckpointLM, transformers_twin
from speculab.models.families import lean_stack, own_decoder
from speculab.models.lean import decoder_forward, layer_features, lean_layers
from speculab.models.slots import DEFAULT_CAPACITY, FixedShape, SlotCache
from speculab.models.static_pass import StaticPasses, check_passes, pass_layer
from speculab.models.weights import refuse_non_finite

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def load_causal_lm(path: str | Path, dtype: str = "float32", device: str = "cpu") -> PreTrainedModel:
    """AutoModelForCausalLM from a local directory, with an attention that takes 4-D masks."""
    hf_logging.disable_progress_bar()  # per-shard bars would interleave with the run's own progress
    model = AutoModelForCausalLM.from_pretrained(
        str(path), dtype=getattr(torch, dtype), attn_implementation="sdpa", local_files_only=True
    )
    refuse_non_finite(path, model.named_parameters())
    # typeshed's functools.wraps (on PreTrainedModel.to) does not bind self: mypy takes device for it
    return model.to(device).eval()  # type: ignore[arg-type]


def padded_rows(rows: list[list[int]], device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Right-aligned token rows: tokens [B, N] and valid [B, N] (left padding is invalid)."""
    width = max((len(r) for r in rows), default=0)
    tokens = torch.zeros(len(rows), width, dtype=torch.long)
    valid = torch.zeros(len(rows), width, dtype=torch.bool)
    for b, row in enumerate(rows):
        if row:
            tokens[b, width - len(row) :] = torch.tensor(row)
            valid[b, width - len(row) :] = True
    return upload(tokens, device), upload(valid, device)


class TreeLM:
    """A causal LM plus a padded KV cache whose uncommitted tail is a forest of nodes."""

    def __init__(
        self,
        model: PreTrainedModel | CheckpointLM,
        feature_layers: tuple[int, ...] = (),
        passes: str = "eager",
        compile: bool = False,
    ) -> None:
        """passes: "eager" (each pass at its own shapes), "static" (fixed shapes, `models.static_pass`,
        run eagerly: the CPU check of what graphs replay) or "graphs" (fixed shapes replayed from CUDA
        graphs). Fixed shapes need the lean stack; other models always run eagerly. compile: the
        fixed-shape passes' layers compiled by inductor (`compiled_pass`); eager passes never are."""
        check_passes(passes)
        self.loaded = model  # transformers' model, or a checkpoint read without its classes (`models.checkpoint_lm`)
        self.transformers: PreTrainedModel | None = None if isinstance(model, CheckpointLM) else model
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.lean = lean_stack(model)  # None: its layers run as transformers' modules (`models.families` says when)
        self.feature_layers = feature_layers
        # None: transformers' own forward runs it (another architecture, a sliding-window layer)
        self.decoder = own_decoder(model, self.lean)
        self.static: StaticPasses | None = None
        fixed = None  # the static passes' cache buffers are allocated at reset, and kept while (B, C) stays
        if passes != "eager" and self.lean is not None and self.decoder is not None:
            graphs = Graphs(passes == "graphs")
            self.static = StaticPasses(self.lean, self.decoder, feature_layers, graphs, pass_layer(compile))
            fixed = FixedShape(self.lean.kv_heads, self.lean.head_dim, self.dtype)
        layers = model.config.get_text_config(decoder=True).num_hidden_layers
        self.slots = SlotCache(layers, self.device, fixed)
        self.reset(0)

    @property
    def model(self) -> PreTrainedModel:
        """transformers' model: the one loaded, or the twin of a checkpoint read without its classes, built
        around its tensors on first use (`generate`, transformers' own forward; never in a lean decode)."""
        if self.transformers is None:
            assert isinstance(self.loaded, CheckpointLM)
            self.transformers = transformers_twin(self.loaded)
        return self.transformers

    def reset(self, batch_size: int, capacity: int = DEFAULT_CAPACITY) -> None:
        """An empty cache for batch_size rows, with room for `capacity` slots per row."""
        self.slots.reset(batch_size, capacity)
        self.forest: DraftTree | None = None  # uncommitted nodes, the slots after the committed ones
        self.forest_features: torch.Tensor | None = None  # [B, F, n * hidden] at feature_layers
        self.features: torch.Tensor | None = None  # [B, M, n * hidden] of the nodes the last commit kept

    @property
    def peak_bytes(self) -> int:
        """The largest cache footprint since reset."""
        return self.slots.peak_bytes

    def _tree_allowed(self, forest: DraftTree, N: int) -> torch.Tensor:
        """[B, N, S + N] bool: what the last N forest nodes attend to: valid committed slots, then
        their forest ancestors and themselves."""
        allowed_forest = forest.ancestor_mask()[:, -N:, :]  # [B, N, F]
        allowed_context = self.slots.valid[:, None, : self.slots.committed] & forest.valid[:, -N:, None]
        return torch.cat([allowed_context, allowed_forest], dim=2)

    def _tree_mask(self, forest: DraftTree, N: int) -> torch.Tensor:
        """[B, 1, N, S + N] additive mask of `_tree_allowed`."""
        allowed = self._tree_allowed(forest, N)
        mask = torch.zeros(allowed.shape, dtype=self.dtype, device=self.device)
        return mask.masked_fill_(~allowed, torch.finfo(self.dtype).min)[:, None]

    @torch.inference_mode()
    def extend(self, nodes: DraftTree, last_only: bool = False) -> torch.Tensor:
        """Run nodes [B, N] (parents index the current forest, -1 = context); logits [B, N, V],
        or [B, 1, V] at the last column with last_only (right-aligned rows: each row's last)."""
        nodes = nodes.to(self.device)
        self.slots.add(nodes.valid)
        forest = nodes if self.forest is None else _concat_forest(self.forest, nodes)
        N = nodes.tokens.shape[1]
        positions = self.slots.context_len[:, None] + nodes.depth
        # A chain's ancestors are exactly the valid slots before it: a causal mask is exact there. The
        # tree mask is exact for a chain too: where the check would read the device, it is skipped. A lone
        # node (each autoregressive step) is a chain without the check's ten small ops.
        chain = reads_free(forest.valid) and (forest.tokens.shape[1] == 1 or forest.is_chain())
        out = None
        if self.static is not None:
            allowed = causal_allowed(self.slots.valid, N) if chain else self._tree_allowed(forest, N)
            out = self.static.run(self.slots.buffers(), nodes.tokens, positions, allowed, last_only)
            if out is not None:  # the pass wrote its N slots itself
                self.slots.advance(N)
        if out is None:
            mask = causal_mask(self.slots.valid, N) if chain else self._tree_mask(forest, N)
            out = self._forward(nodes.tokens, mask, positions, last_only)
        logits, features = out
        if features is not None:
            old = self.forest_features if self.forest is not None else None
            self.forest_features = features if old is None else torch.cat([old, features], dim=1)
        self.forest = forest
        return logits

    def _forward(
        self, tokens: torch.Tensor, mask: torch.Tensor | None, position_ids: torch.Tensor, last_only: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(logits, features [B, N, n * hidden] or None) of tokens [B, N] after the cache; mask
        [B, 1, N, S + N] or None (attend to all)."""
        if self.decoder is None:
            out = self.model(
                input_ids=tokens,
                attention_mask=mask,
                position_ids=position_ids,
                past_key_values=self.slots.cache,
                use_cache=True,
                logits_to_keep=1 if last_only else 0,
                output_hidden_states=bool(self.feature_layers),
            )
            features = layer_features(out.hidden_states, self.feature_layers) if self.feature_layers else None
            return out.logits, features

        # The model's own weights, without transformers' per-call wrappers and module calls
        # (models/lean.py): a fifth of a tiny model's step; the logits are the same.
        def layers(
            hidden: torch.Tensor,
            cos: torch.Tensor | None,
            sin: torch.Tensor | None,
            outputs: list[torch.Tensor] | None,
        ) -> torch.Tensor:
            if self.lean is not None:
                return lean_layers(self.lean, hidden, cos, sin, mask, self.slots.layers.__getitem__, outputs)
            assert cos is not None and sin is not None  # only rotary stacks run their layers as modules
            for layer in self.model.model.layers:  # not a lean stack (an AutoTP shard, whose projections all-reduce)
                hidden = layer(
                    hidden,
                    attention_mask=mask,
                    position_ids=position_ids,
                    past_key_values=self.slots.cache,
                    use_cache=True,
                    position_embeddings=(cos, sin),
                )
                if outputs is not None:
                    outputs.append(hidden)
            return hidden

        def pick(hidden: torch.Tensor) -> torch.Tensor:
            return hidden[:, -1:] if last_only else hidden

        return decoder_forward(self.decoder, layers, tokens, position_ids, self.feature_layers, pick)

    @torch.inference_mode()
    def commit(self, keep: torch.Tensor) -> None:
        """Keep forest nodes keep [B, M] (forest indices, -1 = none) after the committed slots."""
        kept = self.slots.commit(keep.to(self.device))
        if self.forest_features is not None:
            self.features = self.forest_features.gather(
                1, kept[..., None].expand(-1, -1, self.forest_features.shape[2])
            )
        self.forest = None
        self.forest_features = None

    @torch.inference_mode()
    def commit_forest(self) -> None:
        """Commit every forest node in slot order (used for chains of committed tokens)."""
        if self.forest_features is not None:
            self.features = self.forest_features
        self.slots.commit_all()
        self.forest = None
        self.forest_features = None

    @torch.inference_mode()
    def retain(self, rows: torch.Tensor) -> None:
        """Keep only batch rows [R] (finished prompts leave the batch)."""
        self.slots.retain(rows.to(self.device))

    def feed(self, rows: list[list[int]]) -> torch.Tensor:
        """Run and commit committed tokens per row (right-aligned chain); logits at each row's last."""
        tokens, valid = padded_rows(rows, self.device)
        logits = self.extend(DraftTree.chain(tokens, valid), last_only=True)
        self.commit_forest()
        return logits[:, -1]

    def kv_bytes(self) -> int:
        return self.slots.nbytes()


# slot_valid [B, S + N]: committed slots, then N new chain nodes
def causal_allowed(slot_valid: torch.Tensor, N: int) -> torch.Tensor:
    """[B, N, S + N] bool: valid slots up to each new node."""
    S = slot_valid.shape[1] - N
    cols = torch.arange(S + N, device=slot_valid.device)
    causal = cols[None, :] <= S + torch.arange(N, device=slot_valid.device)[:, None]  # [N, S + N]
    return slot_valid[:, None, :] & causal


def causal_mask(slot_valid: torch.Tensor, N: int) -> torch.Tensor | None:
    """[B, 1, N, S + N] bool `causal_allowed`; None when one node sees every slot (the decoding step
    of generate, which needs no mask)."""
    if N == 1 and reads_free(slot_valid) and bool(slot_valid.all()):
        return None
    return causal_allowed(slot_valid, N)[:, None]


def _concat_forest(old: DraftTree, new: DraftTree) -> DraftTree:
    """Forest of old nodes followed by new ones (new parents already index the joint forest)."""
    return DraftTree(
        torch.cat([old.tokens, new.tokens], 1),
        torch.cat([old.parents, new.parents], 1),
        torch.cat([old.depth, new.depth], 1),
        torch.cat([old.valid, new.valid], 1),
    )
