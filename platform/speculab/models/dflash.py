"""DFlash: a block drafter conditioned on the target's hidden features (DDTree paper, Sec. 2 and 5).

The drafter drafts a whole block in one forward pass. Its queries are the block positions
[bonus, mask x (S - 1)] (embedded with the *target's* input embeddings); in every draft layer
the keys and values are [the context's target features ; the block positions]. The features
are the hidden states of a few target layers at every token the target has processed,
concatenated, projected by `fc` and normalised by `hidden_norm`; each layer turns them into
its own context keys and values, which `DFlashLM` keeps as the draft's KV cache (the block's
entries are never cached). The block attends to every context slot and to itself
(bidirectional); the target's lm_head turns block position j into the marginal q_j of the
token j steps after the bonus.

Checkpoints are read in the layouts the DFlash authors publish: `config.json` (`model_type`
qwen3; the drafting settings in `dflash_config` or at the top level, models/dflash_layout.py)
and safetensors keys `layers.{i}.self_attn.{q,k,v,o}_proj`,
`layers.{i}.self_attn.{q,k}_norm`, `layers.{i}.mlp.{gate,up,down}_proj`,
`layers.{i}.{input,post_attention}_layernorm`, `fc`, `hidden_norm`, `norm`; no embedding and
no lm_head: those two tensors are read from the target's checkpoint alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import cast

import torch
import torch.nn.functional as F
from safetensors import safe_open
from torch import nn
from transformers import Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import Qwen3MLP, Qwen3RMSNorm, Qwen3RotaryEmbedding, rotate_half

from speculab.drafting.sampling import tempered_probs
from speculab.models.dflash_layout import DFlashLayout, checked_layout, read_layout
from speculab.models.rotary import recreate_rotary_buffers
from speculab.models.slots import DEFAULT_CAPACITY, SlotLayer
from speculab.models.static_pass import PASSES, Buffers, Graphs, cache_buffers

KV = tuple[torch.Tensor, torch.Tensor]  # keys, values [B, H_kv, S, D], RoPE applied to keys


# x [B, H, T, D], cos/sin [B, T, D]: rotary position embedding at each token's own position
def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos[:, None] + rotate_half(x) * sin[:, None]


class DFlashAttention(nn.Module):
    """Queries from the block; keys and values from [context features ; block] (one projection each)."""

    def __init__(self, config: Qwen3Config) -> None:
        super().__init__()
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(config.num_key_value_heads or self.heads)
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // self.heads)
        bias = config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, self.heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, self.kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, self.kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, config.hidden_size, bias=bias)
        self.q_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)

    # x [B, T, hidden] -> [B, heads, T, D]
    def _split(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        return x.view(*x.shape[:2], heads, self.head_dim).transpose(1, 2)

    # x [B, T, hidden], cos/sin [B, T, D] -> keys, values [B, H_kv, T, D]
    def key_values(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> KV:
        keys = rope(self.k_norm(self._split(self.k_proj(x), self.kv_heads)), cos, sin)
        return keys, self._split(self.v_proj(x), self.kv_heads)

    # h [B, Q, hidden] block; context keys/values [B, H_kv, S, D]; allowed [B, 1, Q, S + Q] bool
    def forward(
        self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, context: KV, allowed: torch.Tensor
    ) -> torch.Tensor:
        queries = rope(self.q_norm(self._split(self.q_proj(h), self.heads)), cos, sin)
        keys, values = self.key_values(h, cos, sin)
        keys, values = torch.cat([context[0], keys], dim=2), torch.cat([context[1], values], dim=2)
        out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=allowed, enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).reshape(*h.shape[:2], -1))


class DFlashLayer(nn.Module):
    def __init__(self, config: Qwen3Config) -> None:
        super().__init__()
        self.self_attn = DFlashAttention(config)
        self.mlp = Qwen3MLP(config)
        self.input_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, context: KV, allowed: torch.Tensor
    ) -> torch.Tensor:
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, context, allowed)
        return h + self.mlp(self.post_attention_layernorm(h))


class DFlashDraft(nn.Module):
    """The drafter's own weights (parameter names are the checkpoint's keys)."""

    def __init__(self, config: Qwen3Config, layout: DFlashLayout | None = None) -> None:
        super().__init__()
        self.config = config
        self.layout = layout or checked_layout(config.to_dict(), "DFlash config")
        self.layer_ids = list(self.layout.target_layer_ids)
        self.layers = nn.ModuleList(DFlashLayer(config) for _ in range(int(config.num_hidden_layers)))
        self.fc = nn.Linear(len(self.layer_ids) * config.hidden_size, config.hidden_size, bias=False)
        self.hidden_norm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.norm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(config)  # inv_freq is a non-persistent buffer: no key

    # features [B, T, n * hidden] target hidden states, positions [B, T] -> per layer (K, V) [B, H_kv, T, D]
    def context_kv(self, features: torch.Tensor, positions: torch.Tensor) -> list[KV]:
        context = self.hidden_norm(self.fc(features))
        cos, sin = self.rotary_emb(context, positions)
        return [cast(DFlashLayer, layer).self_attn.key_values(context, cos, sin) for layer in self.layers]

    # block [B, Q, hidden] embedded tokens, positions [B, Q], allowed [B, 1, Q, S + Q] -> [B, Q, hidden]
    def forward(
        self, block: torch.Tensor, positions: torch.Tensor, context: list[KV], allowed: torch.Tensor
    ) -> torch.Tensor:
        cos, sin = self.rotary_emb(block, positions)
        h = block
        for layer, kv in zip(self.layers, context):
            h = layer(h, cos, sin, kv, allowed)
        return self.norm(h)


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


# context_valid [B, S] -> [B, 1, Q, S + Q] bool: every valid context slot and the whole block
def block_allowed(context_valid: torch.Tensor, block: int) -> torch.Tensor:
    B = context_valid.shape[0]
    inside = torch.ones(B, block, block, dtype=torch.bool, device=context_valid.device)
    return torch.cat([context_valid[:, None, :].expand(B, block, -1), inside], dim=2)[:, None]


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
    graph per (batch size, capacity, length, temperature). Absorbing features stays eager."""

    def __init__(
        self,
        path: str | Path,
        target_path: str | Path,
        dtype: str = "float32",
        device: str = "cpu",
        passes: str = "eager",
    ) -> None:
        if passes not in PASSES:
            raise ValueError(f"passes must be one of {', '.join(PASSES)}; got {passes!r}")
        torch_dtype = getattr(torch, dtype)
        self.model = load_dflash(path, torch_dtype, device)
        self.embed, self.head = load_target_head(target_path, torch_dtype, device)
        layout = self.model.layout
        self.layer_ids, self.block_size = list(layout.target_layer_ids), layout.block_size
        self.mask_token_id = layout.mask_token_id
        self.device, self.dtype = torch.device(device), torch_dtype
        self.graphs = None if passes == "eager" else Graphs(passes == "graphs")
        self.static_buffers: Buffers = []  # the fixed-shape passes' context buffers, kept while (B, C) stays
        self.block_inputs: dict[tuple[float, ...], BlockInputs] = {}
        self.reset(0)

    def reset(self, batch_size: int, capacity: int = DEFAULT_CAPACITY) -> None:
        """No context yet for batch_size rows, with room for `capacity` context slots per row."""
        self.capacity = capacity
        self.layers: list[SlotLayer] = []  # per draft layer, its context keys and values (models.slots)
        if self.graphs is not None and batch_size:
            attention = cast(DFlashLayer, self.model.layers[0]).self_attn
            shape = (batch_size, attention.kv_heads, capacity, attention.head_dim)
            layers = len(self.model.layers)
            self.static_buffers = cache_buffers(self.static_buffers, layers, shape, self.dtype, self.device)
            self.layers = [SlotLayer(capacity) for _ in range(layers)]
            for layer, (keys, values) in zip(self.layers, self.static_buffers):
                layer.adopt(keys, values)
        self.slot_valid = torch.zeros(batch_size, 0, dtype=torch.bool, device=self.device)  # [B, S]
        self.peak_bytes = 0

    @property
    def context_len(self) -> torch.Tensor:
        """[B] tokens whose features are cached: the position of the next token."""
        return self.slot_valid.sum(dim=1)

    @torch.inference_mode()
    def absorb(self, features: torch.Tensor, valid: torch.Tensor) -> None:
        """Append the context keys/values of features [B, T, n * hidden] at valid [B, T] slots."""
        valid = valid.to(self.device)
        if self.slot_valid.shape[1] + valid.shape[1] > self.capacity:
            self._repack()  # holes out before the buffers would have to grow
        positions = self.context_len[:, None] + (valid.cumsum(dim=1) - 1).clamp(min=0)
        new = self.model.context_kv(features.to(self.device, self.dtype), positions)
        self.layers = self.layers or [SlotLayer(self.capacity) for _ in new]
        for layer, (keys, values) in zip(self.layers, new):
            layer.update(keys, values)
        self.slot_valid = torch.cat([self.slot_valid, valid], dim=1)
        self.peak_bytes = max(self.peak_bytes, self.kv_bytes())
        if int(self.context_len.max()) < self.slot_valid.shape[1] * 3 // 4:
            self._repack()

    def _repack(self) -> None:
        """Drop holes: each row's valid slots in order, left-padded to the longest row."""
        width = int(self.context_len.max())
        order = torch.sort(self.slot_valid.to(torch.int8), dim=1, stable=True).indices[:, -width:]  # [B, width]
        for layer in self.layers:
            layer.repack(order)
        self.slot_valid = self.slot_valid.gather(1, order)

    @torch.inference_mode()
    def block_marginals(self, pending: list[list[int]], length: int, temperature: float) -> torch.Tensor:
        """q [B, L, V] after each row's last pending token (the bonus); the context is the absorbed features."""
        B, S = len(pending), self.block_size
        tokens = torch.full((B, S), self.mask_token_id, dtype=torch.long, device=self.device)
        tokens[:, 0] = torch.tensor([row[-1] for row in pending], device=self.device)
        positions = self.context_len[:, None] + torch.arange(S, device=self.device)
        if self.graphs is not None:
            return self._fixed_shape_block(tokens, positions, length, temperature)
        context = [cast(KV, (layer.keys, layer.values)) for layer in self.layers] or self.model.context_kv(
            torch.zeros(B, 0, self.model.fc.in_features, dtype=self.dtype, device=self.device), positions[:, :0]
        )
        return self._block_probs(tokens, positions, context, block_allowed(self.slot_valid, S), length, temperature)[0]

    # tokens, positions [B, Q]; context per layer [B, H_kv, S, D]; allowed [B, 1, Q, S + Q] -> ([B, L, V],)
    def _block_probs(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        context: list[KV],
        allowed: torch.Tensor,
        length: int,
        temperature: float,
    ) -> tuple[torch.Tensor]:
        layout = self.model.layout
        block = F.embedding(tokens, self.embed) * layout.embedding_scale
        hidden = self.model(block, positions, context, allowed)
        return (tempered_probs(draft_logits(hidden[:, 1 : 1 + length], self.head, layout), temperature),)

    def _fixed_shape_block(
        self, tokens: torch.Tensor, positions: torch.Tensor, length: int, temperature: float
    ) -> torch.Tensor:
        """The block pass over the whole capacity C of the context buffers (slots past the valid ones
        masked), from inputs kept per shape: a CUDA graph replays it."""
        assert self.graphs is not None
        buffers = [layer.buffers for layer in self.layers if layer.buffers is not None]
        (B, Q), C = tokens.shape, buffers[0][0].shape[2]
        key = (B, C, length, temperature, buffers[0][0].data_ptr())  # a graph is bound to these addresses
        inputs = self.block_inputs.get(key)
        if inputs is None:
            allowed = torch.ones(B, 1, Q, C + Q, dtype=torch.bool, device=self.device)
            inputs = self.block_inputs[key] = BlockInputs(
                torch.zeros_like(tokens), torch.zeros_like(positions), allowed
            )
        inputs.tokens.copy_(tokens)
        inputs.positions.copy_(positions)
        S = self.slot_valid.shape[1]
        inputs.allowed[:, 0, :, :C] = False
        inputs.allowed[:, 0, :, :S] = self.slot_valid[:, None, :]
        forward = partial(
            self._block_probs, inputs.tokens, inputs.positions, buffers, inputs.allowed, length, temperature
        )
        (q,) = self.graphs.run(key, forward)
        assert q is not None
        return q

    @torch.inference_mode()
    def retain(self, rows: torch.Tensor) -> None:
        rows = rows.to(self.device)
        for layer in self.layers:
            layer.keep_rows(rows)
        self.slot_valid = self.slot_valid.index_select(0, rows)

    def kv_bytes(self) -> int:
        return sum(layer.nbytes for layer in self.layers)
