"""DFlash: a one-pass block drafter conditioned on the target's hidden features (DDTree paper, Sec. 2 and 5).

The drafter drafts a whole block in one forward pass. Its queries are the block positions
[bonus, mask x (S - 1)] (embedded with the *target's* input embeddings); in every draft layer
the keys and values are [the context's target features ; the block positions]. The features
are the hidden states of a few target layers at every token the target has processed,
concatenated, projected by `fc` and normalised by `hidden_norm`; each layer turns them into
its own context keys and values, which `DFlashLM` keeps as the draft's KV cache (a `SlotCache`,
`models.slots`, as the target's; the block's entries are never cached). The layers run as the
target's do, through `models.lean` (norms, rotary, attention), and the block's mask is the parallel
drafter's (`models.parallel.block_allowed`). The block attends to every context slot and to itself
(bidirectional); the target's lm_head turns block position j into the marginal q_j of the
token j steps after the bonus.

Checkpoints are read in the layouts the DFlash authors publish: `config.json` (`model_type`
qwen3; the drafting settings in `dflash_config` or at the top level, models/dflash_layout.py)
and safetensors keys `layers.{i}.self_attn.{q,k,v,o}_proj`,
`layers.{i}.self_attn.{q,k}_norm`, `layers.{i}.mlp.{gate,up,down}_proj`,
`layers.{i}.{input,post_attention}_layernorm`, `fc`, `hidden_norm`, `norm`; no embedding and
no lm_head: those two tensors are read from the target's checkpoint alone.

DFlash2 (vLLM's `qwen3_dflash2.py` layout: `dflash_config` names `conv_kernel_size`,
`conv_group_size`, `selector_rank` and `selector_top_k`) adds, in every layer,
`layers.{i}.{attention,mlp}_conv.base_kernel` [2, taps, hidden] and `.kernel_projection` [2 taps G,
hidden], the dynamic block convolution the lean layers run around the attention and the MLP
(`models.lean.BlockConv`), and a `candidate_selector` with `predecessor_codebook`,
`successor_codebook` [V, r] and `hidden_projection` [r, hidden]. `DFlash2LM` drafts its law
(`drafting.selector.SelectorLaw`): the top K tokens of the block's logits at each drafted position,
scored given the candidate before (`selector_scores`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors import safe_open
from torch import nn
from transformers import Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer, Qwen3RMSNorm, Qwen3RotaryEmbedding

from speculab.device.graphs import Graphs
from speculab.device.hostreads import upload
from speculab.drafting.best_first import ranked
from speculab.drafting.sampling import tempered_probs
from speculab.drafting.selector import SelectorLaw
from speculab.models.dflash_layout import DFlash2Settings, DFlashLayout, checked_layout, read_layout
from speculab.models.families import layer_stack
from speculab.models.lean import BlockConv, LayerFn, LeanStack, Linear, key_values, lean_layer, lean_layers, rms_norm
from speculab.models.parallel import block_allowed
from speculab.models.rotary import recreate_rotary_buffers
from speculab.models.slots import DEFAULT_CAPACITY, FixedShape, SlotCache
from speculab.models.static_pass import check_passes, pass_layer
from speculab.models.weights import refuse_non_finite

KV = tuple[torch.Tensor, torch.Tensor]  # keys, values [B, H_kv, S, D], RoPE applied to keys
# (hidden [B, L, D] of the drafted positions, root [B], temperature) -> what a block pass returns
Draw = Callable[[torch.Tensor, torch.Tensor, float], tuple[torch.Tensor, ...]]


@dataclass(frozen=True)
class ContextLayer:
    """A lean layer's `LayerKV` in a block pass: it attends to its context's keys and values, then the
    block's own, which nothing keeps (the block is drafted anew every round)."""

    keys: torch.Tensor  # [B, H_kv, S, D]
    values: torch.Tensor

    # key_states, value_states [B, H_kv, Q, D] -> [B, H_kv, S + Q, D]
    def update(self, key_states: torch.Tensor, value_states: torch.Tensor) -> KV:
        return torch.cat([self.keys, key_states], dim=2), torch.cat([self.values, value_states], dim=2)


class GroupedConv(nn.Module):
    """A DFlash2 block convolution's weights, under the published names (`models.lean.BlockConv` runs it)."""

    def __init__(self, hidden: int, taps: int, group: int, block: int) -> None:
        super().__init__()
        self.group, self.block = group, block
        # identity at tap 0, no correction: a fresh one passes its sublayer through (what training starts from)
        self.base_kernel = nn.Parameter(torch.zeros(2, taps, hidden))
        with torch.no_grad():
            self.base_kernel[:, 0] = 1.0
        self.kernel_projection = nn.Linear(hidden, 2 * taps * (hidden // group), bias=False)
        nn.init.zeros_(self.kernel_projection.weight)

    def lean(self) -> BlockConv:
        return BlockConv(self.base_kernel, Linear(self.kernel_projection.weight), self.group, self.block)


class CandidateSelector(nn.Module):
    """DFlash2's selector weights: codebooks of each token as a predecessor and as a successor, and the
    projection of a position's hidden state that modulates their product."""

    def __init__(self, hidden: int, vocab: int, rank: int) -> None:
        super().__init__()
        self.predecessor_codebook = nn.Parameter(torch.randn(vocab, rank) * rank**-0.5)
        self.successor_codebook = nn.Parameter(torch.randn(vocab, rank) * rank**-0.5)
        self.hidden_projection = nn.Linear(hidden, rank, bias=False)
        nn.init.zeros_(self.hidden_projection.weight)  # a fresh selector scores by the logits alone


# hidden [B, L, D] the drafted positions' last hidden states; candidates [B, L, K]; unary [B, L, K]; root [B]
def selector_scores(
    selector: CandidateSelector, hidden: torch.Tensor, candidates: torch.Tensor, unary: torch.Tensor, root: torch.Tensor
) -> torch.Tensor:
    """[B, L, K, K] float32: score of candidate c at depth d given candidate p at depth d - 1 (row p; at
    depth 0 every row is the root's) = unary[d, c] + sum_r A[p, r] h[d, r] S[c, r], where A and S are
    the predecessor and successor codebooks and h the hidden projection."""
    B, _, K = candidates.shape
    h = F.linear(hidden, selector.hidden_projection.weight)  # [B, L, r]
    predecessors = torch.cat([root[:, None, None].expand(B, 1, K), candidates[:, :-1]], dim=1)  # [B, L, K]
    pred = F.embedding(predecessors, selector.predecessor_codebook) * h[:, :, None]  # [B, L, K, r]
    succ = F.embedding(candidates, selector.successor_codebook)  # [B, L, K, r]
    return unary.float()[:, :, None, :] + (pred @ succ.transpose(-1, -2)).float()


# hidden [B, L, D] the drafted positions' last hidden states; logits [B, L, V] their draft logits; root [B]
def selector_law(
    selector: CandidateSelector,
    hidden: torch.Tensor,
    logits: torch.Tensor,
    root: torch.Tensor,
    top_k: int,
    temperature: float,
) -> SelectorLaw:
    """The selector's law at `temperature`: the top K by the logits, ties to the lower token id (one total
    order on every device), and the conditionals of their scores (`selector_scores`)."""
    candidates = ranked(torch.softmax(logits.float(), dim=-1).contiguous(), top_k)[1]  # [B, L, K]
    scores = selector_scores(selector, hidden, candidates, logits.gather(-1, candidates), root)
    return SelectorLaw(candidates, tempered_probs(scores, temperature), logits.shape[-1])


def _conv(layer: nn.Module, name: str) -> BlockConv:
    conv = getattr(layer, name)
    assert isinstance(conv, GroupedConv)  # `DFlashDraft._add_dflash2` set it
    return conv.lean()


def _with_convs(stack: LeanStack, layers: nn.ModuleList) -> LeanStack:
    """The stack with each layer's DFlash2 convolutions, read from the modules that hold them."""
    convs = [
        replace(w, attn_conv=_conv(layer, "attention_conv"), mlp_conv=_conv(layer, "mlp_conv"))
        for w, layer in zip(stack.layers, layers)
    ]
    return replace(stack, layers=tuple(convs))


class DFlashDraft(nn.Module):
    """The drafter's own weights (parameter names are the checkpoint's keys), run by the lean layers
    (`models.lean`): the same norm, rotary and attention functions as the target's; a DFlash2 one's
    layers with their convolutions, and its selector."""

    def __init__(self, config: Qwen3Config, layout: DFlashLayout | None = None) -> None:
        super().__init__()
        self.config = config
        self.layout = layout or checked_layout(config.to_dict(), "DFlash config")
        self.layer_ids = list(self.layout.target_layer_ids)
        # transformers' Qwen3 layers hold the weights under the checkpoint's names; their forward never runs
        self.layers = nn.ModuleList(Qwen3DecoderLayer(config, i) for i in range(int(config.num_hidden_layers)))
        self.fc = nn.Linear(len(self.layer_ids) * config.hidden_size, config.hidden_size, bias=False)
        self.hidden_norm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.norm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(config)  # inv_freq is a non-persistent buffer: no key
        # Built once: it holds the parameters themselves, which moving or casting the module and loading
        # a state dict update in place.
        self.stack = layer_stack(self.layers, config)
        settings = self.layout.dflash2
        if settings is not None:
            self._add_dflash2(config, settings)

    def _add_dflash2(self, config: Qwen3Config, settings: DFlash2Settings) -> None:
        hidden, block = config.hidden_size, self.layout.block_size
        for layer in self.layers:
            layer.attention_conv = GroupedConv(hidden, settings.conv_taps, settings.conv_group, block)
            layer.mlp_conv = GroupedConv(hidden, settings.conv_taps, settings.conv_group, block)
        self.candidate_selector = CandidateSelector(hidden, config.vocab_size, settings.selector_rank)
        self.stack = _with_convs(self.stack, self.layers)

    # features [B, T, n * hidden] target hidden states, positions [B, T] -> per layer (K, V) [B, H_kv, T, D]
    def context_kv(self, features: torch.Tensor, positions: torch.Tensor) -> list[KV]:
        context = rms_norm(self.fc(features), self.hidden_norm.weight, self.stack.eps)
        cos, sin = self.rotary_emb(context, positions)
        return [key_values(self.stack, w, context, cos[:, None], sin[:, None]) for w in self.stack.layers]

    # block [B, Q, hidden] embedded tokens, positions [B, Q], allowed [B, 1, Q, S + Q] -> [B, Q, hidden]
    def forward(
        self,
        block: torch.Tensor,
        positions: torch.Tensor,
        context: list[KV],
        allowed: torch.Tensor,
        layer: LayerFn = lean_layer,
    ) -> torch.Tensor:
        """The block's last hidden states, each layer run by `layer` (`lean_layer`, or it compiled)."""
        cos, sin = self.rotary_emb(block, positions)
        hidden = lean_layers(self.stack, block, cos, sin, allowed, lambda i: ContextLayer(*context[i]), layer=layer)
        return rms_norm(hidden, self.norm.weight, self.stack.eps)


def _safetensors_files(path: Path) -> list[Path]:
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{path}: no *.safetensors file")
    return files


def load_dflash(path: str | Path, dtype: torch.dtype = torch.float32, device: str = "cpu") -> DFlashDraft:
    """A DFlash checkpoint dir; ValueError naming any missing or unexpected key. The rotary buffers
    stay in float32 under a bfloat16 ``dtype``, as the authors' `from_pretrained` keeps them."""
    path = Path(path)
    model = DFlashDraft(Qwen3Config.from_dict(json.loads((path / "config.json").read_text())), read_layout(path))
    state: dict[str, torch.Tensor] = {}
    for file in _safetensors_files(path):
        with safe_open(str(file), framework="pt") as f:
            state |= {key: f.get_tensor(key) for key in f.keys()}  # noqa: SIM118 (safe_open is not a dict)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"{path}: not a DFlash checkpoint (missing keys {missing}, unexpected keys {unexpected})")
    refuse_non_finite(path, model.named_parameters())
    model.to(device=device, dtype=dtype)
    recreate_rotary_buffers(model, device)
    return model.eval()


def load_target_head(path: str | Path, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(input embeddings [V, hidden], lm_head [V, hidden]) read from the target checkpoint alone
    (`safe_open` on just those keys; tied embeddings share one tensor)."""
    path = Path(path)
    config = json.loads((path / "config.json").read_text())
    names = {"embed": "model.embed_tokens.weight", "head": "lm_head.weight"}
    if config.get("tie_word_embeddings", False):
        names["head"] = names["embed"]
    index = path / "model.safetensors.index.json"
    weight_map = json.loads(index.read_text())["weight_map"] if index.is_file() else {}
    tensors = {}
    for role, key in names.items():
        file = path / weight_map.get(key, "model.safetensors")
        with safe_open(str(file), framework="pt") as f:
            tensors[role] = f.get_tensor(key).to(device=device, dtype=dtype)
    return tensors["embed"], tensors["head"]


# hidden [B, L, hidden], head [V, hidden] -> logits [B, L, V]
def draft_logits(hidden: torch.Tensor, head: torch.Tensor, layout: DFlashLayout) -> torch.Tensor:
    """The target's lm_head on the block, with the authors' optional output multiplier and soft cap."""
    logits = (hidden @ head.T) * layout.output_multiplier
    if layout.logit_softcap is not None:
        logits = torch.tanh(logits / layout.logit_softcap) * layout.logit_softcap
    return logits


@dataclass(frozen=True)
class BlockInputs:
    """What a fixed-shape block pass reads besides the weights and the context buffers, allocated once
    per (batch size, capacity): a captured graph reads these very tensors."""

    tokens: torch.Tensor  # [B, Q] long: the bonus, then mask tokens
    positions: torch.Tensor  # [B, Q] long
    allowed: torch.Tensor  # [B, 1, Q, C + Q] bool: the valid context slots of the whole capacity, and the block


class DFlashLM:
    """A `DFlashDraft` with the target's embeddings and head, and a padded KV cache of context features.

    passes (`models.static_pass.PASSES`): "eager" runs the block pass over the valid context slots; "static"
    and "graphs" run it over the cache's whole capacity (fixed shapes), "graphs" replaying a CUDA
    graph per (batch size, capacity, length, temperature); compile: that fixed-shape block pass's layers
    compiled by inductor (`models.static_pass.compiled_pass`). Absorbing features stays eager."""

    def __init__(
        self,
        path: str | Path,
        target_path: str | Path,
        dtype: str = "float32",
        device: str = "cpu",
        passes: str = "eager",
        compile: bool = False,
    ) -> None:
        check_passes(passes)
        torch_dtype = getattr(torch, dtype)
        self.model = load_dflash(path, torch_dtype, device)
        self.embed, self.head = load_target_head(target_path, torch_dtype, device)
        layout = self.model.layout
        self.layer_ids, self.block_size = list(layout.target_layer_ids), layout.block_size
        self.mask_token_id = layout.mask_token_id
        self.device, self.dtype = torch.device(device), torch_dtype
        self.graphs = None if passes == "eager" else Graphs(passes == "graphs")
        stack = self.model.stack
        # fixed shapes: the context buffers are allocated at reset, and kept while (B, C) stays
        fixed = None if self.graphs is None else FixedShape(stack.kv_heads, stack.head_dim, torch_dtype)
        self.slots = SlotCache(len(stack.layers), self.device, fixed)  # per draft layer, its context keys and values
        self.block_inputs: dict[tuple[float, ...], BlockInputs] = {}
        # how the fixed-shape block pass runs each layer: compiled, or as it is
        self.layer = pass_layer(compile and self.graphs is not None)

    def reset(self, batch_size: int, capacity: int = DEFAULT_CAPACITY) -> None:
        """No context yet for batch_size rows, with room for `capacity` context slots per row."""
        self.slots.reset(batch_size, capacity)

    @property
    def peak_bytes(self) -> int:
        """The largest cache footprint since reset."""
        return self.slots.peak_bytes

    @torch.inference_mode()
    def absorb(self, features: torch.Tensor, valid: torch.Tensor) -> None:
        """Append the context keys/values of features [B, T, n * hidden] at valid [B, T] slots."""
        valid = upload(valid, self.device)
        self.slots.add(valid)
        positions = self.slots.context_len[:, None] + (valid.cumsum(dim=1) - 1).clamp(min=0)
        new = self.model.context_kv(features.to(self.device, self.dtype), positions)
        for layer, (keys, values) in zip(self.slots.layers, new):
            layer.update(keys, values)
        self.slots.commit_all()

    @torch.inference_mode()
    def block_marginals(self, pending: list[list[int]], length: int, temperature: float) -> torch.Tensor:
        """q [B, L, V] after each row's last pending token (the bonus); the context is the absorbed features."""
        (q,) = self._block(pending, length, temperature, self._marginals)
        return q

    def _block(self, pending: list[list[int]], length: int, temperature: float, draw: Draw) -> tuple[torch.Tensor, ...]:
        """`draw`'s outputs after each row's last pending token (the bonus), by the block pass."""
        B, S = len(pending), self.block_size
        tokens = torch.full((B, S), self.mask_token_id, dtype=torch.long, device=self.device)
        tokens[:, 0] = upload(torch.tensor([row[-1] for row in pending]), self.device)
        positions = self.slots.context_len[:, None] + torch.arange(S, device=self.device)
        if self.graphs is not None:
            return self._fixed_shape_block(tokens, positions, length, temperature, draw)
        context = self._context() or self.model.context_kv(
            torch.zeros(B, 0, self.model.fc.in_features, dtype=self.dtype, device=self.device), positions[:, :0]
        )
        allowed = block_allowed(self.slots.valid, S)
        return self._block_outputs(tokens, positions, context, allowed, length, temperature, draw)

    def _context(self) -> list[KV]:
        """Per layer, the cached context keys and values [B, H_kv, S, D]; [] before the first absorb."""
        return [
            (layer.keys, layer.values)
            for layer in self.slots.filled()
            if layer.keys is not None and layer.values is not None
        ]

    # tokens, positions [B, Q]; context per layer [B, H_kv, S, D]; allowed [B, 1, Q, S + Q]
    def _block_outputs(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        context: list[KV],
        allowed: torch.Tensor,
        length: int,
        temperature: float,
        draw: Draw,
    ) -> tuple[torch.Tensor, ...]:
        """The block pass, and what `draw` makes of its drafted positions."""
        block = F.embedding(tokens, self.embed) * self.model.layout.embedding_scale
        hidden = self.model(block, positions, context, allowed, self.layer)
        return draw(hidden[:, 1 : 1 + length], tokens[:, 0], temperature)

    # hidden [B, L, D] the drafted positions; root [B] -> (q [B, L, V],)
    def _marginals(self, hidden: torch.Tensor, root: torch.Tensor, temperature: float) -> tuple[torch.Tensor, ...]:
        """Each position's softmax of the draft logits (DFlash's draft)."""
        return (tempered_probs(draft_logits(hidden, self.head, self.model.layout), temperature),)

    def _fixed_shape_block(
        self, tokens: torch.Tensor, positions: torch.Tensor, length: int, temperature: float, draw: Draw
    ) -> tuple[torch.Tensor, ...]:
        """The block pass over the whole capacity C of the context buffers (slots past the valid ones
        masked), from inputs kept per shape: a CUDA graph replays it."""
        assert self.graphs is not None
        buffers = self.slots.buffers()
        (B, Q), C = tokens.shape, buffers[0][0].shape[2]
        key = (B, C, length, temperature)
        self.graphs.bind(buffers[0][0])
        inputs = self.block_inputs.get(key)
        if inputs is None:
            allowed = torch.empty(B, 1, Q, C + Q, dtype=torch.bool, device=self.device)
            inputs = self.block_inputs[key] = BlockInputs(
                torch.zeros_like(tokens), torch.zeros_like(positions), allowed
            )
        inputs.tokens.copy_(tokens)
        inputs.positions.copy_(positions)
        S = self.slots.valid.shape[1]
        inputs.allowed.copy_(block_allowed(F.pad(self.slots.valid, (0, C - S)), Q))  # the slots past S masked
        forward = partial(
            self._block_outputs, inputs.tokens, inputs.positions, buffers, inputs.allowed, length, temperature, draw
        )
        outputs = self.graphs.run((*key, draw.__name__), forward)  # a graph per draw: marginals or the law
        return tuple(out for out in outputs if out is not None)  # a block pass has no None output

    @torch.inference_mode()
    def retain(self, rows: torch.Tensor) -> None:
        self.slots.retain(rows.to(self.device))


class DFlash2LM(DFlashLM):
    """A DFlash2 drafter: the DFlash block pass (its layers with their convolutions), then the candidate
    selector over the top K tokens of each drafted position (`block_law`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        settings = self.model.layout.dflash2
        assert settings is not None  # `load_dflash_lm` builds this class for DFlash2 checkpoints only
        self.top_k = settings.selector_top_k

    @torch.inference_mode()
    def block_law(self, pending: list[list[int]], length: int, temperature: float) -> SelectorLaw:
        """The law of the L tokens after each row's last pending token (the bonus), at `temperature`."""
        candidates, conditionals = self._block(pending, length, temperature, self._law)
        return SelectorLaw(candidates, conditionals, self.head.shape[0])

    # hidden [B, L, D]; root [B] -> (candidates [B, L, K], conditionals [B, L, K, K])
    def _law(self, hidden: torch.Tensor, root: torch.Tensor, temperature: float) -> tuple[torch.Tensor, ...]:
        """The selector over each position's top K (`block_marginals` stops at the logits' softmax)."""
        logits = draft_logits(hidden, self.head, self.model.layout)  # [B, L, V], multiplied and capped
        law = selector_law(self.model.candidate_selector, hidden, logits, root, self.top_k, temperature)
        return law.candidates, law.conditionals  # tensors only: a captured graph's outputs


def load_dflash_lm(
    path: str | Path,
    target_path: str | Path,
    dtype: str = "float32",
    device: str = "cpu",
    passes: str = "eager",
    compile: bool = False,
) -> DFlashLM:
    """A DFlash drafter, or a DFlash2 one where its config.json names the selector (`DFlash2LM`)."""
    kind = DFlash2LM if read_layout(path).dflash2 is not None else DFlashLM
    return kind(path, target_path, dtype, device, passes, compile)
