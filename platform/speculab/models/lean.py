"""Llama and Qwen3 decoder stacks run as plain tensor functions over their own weights.

transformers' decoder layers spend a large share of a small model's step in Python: a module
call per projection and norm, the attention-interface dispatch, the cache's `update`. The
functions here do the same arithmetic (the same RMSNorm, rotary and SDPA calls, in the same
order) straight on the weight tensors, which is what makes speculab's loop faster than
`generate` on the same model rather than as slow. Qwen3 differs from Llama only by an RMSNorm
over each query and key head before the rotary (`q_norm`, `k_norm`). `lean_stack` accepts only
plain `nn.Linear` projections without bias and full attention in every layer: a tensor-parallel
(AutoTP) model, whose projections all-reduce, keeps transformers' modules. The DFlash drafter's
Qwen3 layers run here too (`models.dflash`: `layer_stack`, `key_values` of the target's features).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch
import torch.nn.functional as F
from torch.distributed.tensor import DTensor

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel


class KVStore(Protocol):
    """Where a layer's new keys and values go: a transformers `Cache` (the eager pass), the static
    pass's buffers (`models.static_pass.StaticSlots`) or a DFlash block's context (`models.dflash.ContextKV`);
    each hands back the keys and values to attend to."""

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


@dataclass(frozen=True)
class LeanLayer:
    input_norm: torch.Tensor  # [D]
    post_norm: torch.Tensor  # [D]
    q: torch.Tensor  # [H * hd, D]
    k: torch.Tensor  # [Hkv * hd, D]
    v: torch.Tensor  # [Hkv * hd, D]
    o: torch.Tensor  # [D, H * hd]
    gate: torch.Tensor  # [I, D]
    up: torch.Tensor  # [I, D]
    down: torch.Tensor  # [D, I]
    q_norm: torch.Tensor | None = None  # [hd] Qwen3's per-head query RMSNorm (None: Llama)
    k_norm: torch.Tensor | None = None  # [hd] Qwen3's per-head key RMSNorm


@dataclass(frozen=True)
class LeanStack:
    layers: tuple[LeanLayer, ...]
    heads: int
    kv_heads: int
    head_dim: int
    eps: float


# Decoder stacks whose top-level forward is embed -> rotary -> layers -> norm -> lm_head and
# nothing else (no embedding scale), so TreeLM may run the layers itself.
LEAN_MODEL_TYPES = frozenset({"llama", "qwen3"})


def runs_own_layers(config: PretrainedConfig) -> bool:
    """TreeLM may call the decoder layers itself: a lean model type with full attention everywhere
    (a sliding-window layer needs transformers' own masks)."""
    types = getattr(config, "layer_types", None) or ["full_attention"]
    return config.model_type in LEAN_MODEL_TYPES and all(t == "full_attention" for t in types)


def _is_matrix(weight: object) -> bool:
    return isinstance(weight, torch.Tensor) and weight.ndim == 2


def _head_norm(attention: torch.nn.Module, name: str) -> torch.Tensor | None:
    norm = getattr(attention, name, None)
    return None if norm is None else norm.weight


def plain_projections(layers: Iterable[Any]) -> bool:  # transformers decoder layers: no common class
    """Every projection of these decoder layers is a plain `nn.Linear` without bias (not a tensor-parallel
    one, whose output all-reduces): what the lean layers compute."""
    children = [m for layer in layers for m in (*layer.self_attn.children(), *layer.mlp.children())]
    projections = [m for m in children if _is_matrix(getattr(m, "weight", None))]  # not Qwen3's head norms
    # A DTensor weight is a shard of transformers' tensor parallelism, whose module hooks communicate.
    return all(type(m) is torch.nn.Linear and m.bias is None and not isinstance(m.weight, DTensor) for m in projections)


def layer_stack(layers: Iterable[Any], config: PretrainedConfig) -> LeanStack:
    """The weights of Llama or Qwen3 decoder layers (transformers' module names), as the lean layers read them."""
    weights = tuple(
        LeanLayer(
            layer.input_layernorm.weight,
            layer.post_attention_layernorm.weight,
            layer.self_attn.q_proj.weight,
            layer.self_attn.k_proj.weight,
            layer.self_attn.v_proj.weight,
            layer.self_attn.o_proj.weight,
            layer.mlp.gate_proj.weight,
            layer.mlp.up_proj.weight,
            layer.mlp.down_proj.weight,
            _head_norm(layer.self_attn, "q_norm"),
            _head_norm(layer.self_attn, "k_norm"),
        )
        for layer in layers
    )
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return LeanStack(weights, config.num_attention_heads, config.num_key_value_heads, head_dim, config.rms_norm_eps)


def lean_stack(model: PreTrainedModel) -> LeanStack | None:
    """The weights of a plain single-process Llama or Qwen3, or None when its layers must run as modules."""
    config = model.config
    if not runs_own_layers(config) or config.hidden_act != "silu" or not plain_projections(model.model.layers):
        return None
    return layer_stack(model.model.layers, config)


# x [B, N, D]; weight [D]
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Llama's (and Qwen3's) RMSNorm, computed in float32 as transformers does."""
    dtype = x.dtype
    x = x.to(torch.float32)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(dtype)


# x [B, H, N, hd]; cos, sin [B, 1, N, hd]
def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


# q [B, H, N, hd]; k, v [B, Hkv, S, hd]; mask [B, 1, N, S] additive or boolean, or None (all slots)
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """SDPA over grouped key heads. Masked, the query groups are folded into the query length, each
    group's rows under the same mask: on CUDA a masked SDPA with enable_gqa has only the math kernel
    (flash takes no mask, the memory-efficient kernel no grouping), which upcasts the whole
    [B, H, N, S] to float32; folded, the memory-efficient kernel runs, and no K/V is repeated."""
    B, H, N, hd = q.shape
    Hkv = k.shape[1]
    groups = H // Hkv
    if groups > 1 and mask is not None:
        folded = mask if N == 1 else mask.repeat(1, 1, groups, 1)  # [B, 1, groups * N, S]: row g * N + n is n's
        out = F.scaled_dot_product_attention(q.reshape(B, Hkv, groups * N, hd), k, v, attn_mask=folded, scale=hd**-0.5)
        return out.reshape(B, H, N, hd)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=hd**-0.5, enable_gqa=groups > 1)


# x [B, N, D] a layer's normed input; cos, sin [B, 1, N, hd] -> queries [B, H, N, hd]
def queries(stack: LeanStack, w: LeanLayer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    q = F.linear(x, w.q).view(*x.shape[:2], stack.heads, stack.head_dim)
    if w.q_norm is not None:  # Qwen3: per head, before the rotary
        q = rms_norm(q, w.q_norm, stack.eps)
    return rotary(q.transpose(1, 2), cos, sin)


# x [B, N, D] a layer's normed input; cos, sin [B, 1, N, hd] -> keys, values [B, Hkv, N, hd]
def key_values(
    stack: LeanStack, w: LeanLayer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    k = F.linear(x, w.k).view(*x.shape[:2], stack.kv_heads, stack.head_dim)
    if w.k_norm is not None:  # Qwen3: per head, before the rotary
        k = rms_norm(k, w.k_norm, stack.eps)
    v = F.linear(x, w.v).view(*x.shape[:2], stack.kv_heads, stack.head_dim).transpose(1, 2)
    return rotary(k.transpose(1, 2), cos, sin), v


# hidden [B, N, D]; cos, sin [B, N, hd]; mask [B, 1, N, S + N] (additive or boolean) or None
def lean_layers(
    stack: LeanStack,
    hidden: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    mask: torch.Tensor | None,
    cache: KVStore,
    outputs: list[torch.Tensor] | None = None,
) -> torch.Tensor:
    """Every decoder layer over hidden, handing each layer's keys and values to ``cache`` (and
    each layer's output to ``outputs``, when given: transformers' hidden states after the embeddings)."""
    B, N, _ = hidden.shape
    cos, sin = cos[:, None], sin[:, None]
    for index, w in enumerate(stack.layers):
        x = rms_norm(hidden, w.input_norm, stack.eps)
        k, v = cache.update(*key_values(stack, w, x, cos, sin), index)
        out = attention(queries(stack, w, x, cos, sin), k, v, mask)
        hidden = hidden + F.linear(out.transpose(1, 2).reshape(B, N, -1), w.o)
        x = rms_norm(hidden, w.post_norm, stack.eps)
        hidden = hidden + F.linear(F.silu(F.linear(x, w.gate)) * F.linear(x, w.up), w.down)
        if outputs is not None:
            outputs.append(hidden)
    return hidden


@dataclass(frozen=True)
class Decoder:
    """The parts of a transformers decoder around its layers (`decoder_forward` calls them)."""

    embed: torch.nn.Module
    rotary: torch.nn.Module
    norm: torch.nn.Module
    head: torch.nn.Module


# (hidden [B, N, D], cos, sin [B, N, hd], outputs or None) -> hidden [B, N, D]: every layer, appending
# each layer's output to outputs when given
Layers = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, "list[torch.Tensor] | None"], torch.Tensor]


# states: transformers' hidden_states (the embeddings, then each layer's output)
def layer_features(
    states: tuple[torch.Tensor, ...] | list[torch.Tensor], feature_layers: tuple[int, ...]
) -> torch.Tensor:
    """[B, N, n * hidden]: hidden_states[id + 1] of every feature layer, concatenated."""
    return torch.cat([states[i + 1] for i in feature_layers], dim=-1)


# tokens, positions [B, N]
def decoder_forward(
    decoder: Decoder,
    layers: Layers,
    tokens: torch.Tensor,
    positions: torch.Tensor,
    feature_layers: tuple[int, ...],
    pick: Callable[[torch.Tensor], torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(logits of the head at the columns `pick` keeps of the last hidden states, features
    [B, N, n * hidden] at feature_layers or None): embeddings, rotary, `layers`, final norm, head.
    The eager and the fixed-shape passes (`models.static_pass`) both run through here."""
    hidden = decoder.embed(tokens)
    cos, sin = decoder.rotary(hidden, positions)
    states = [hidden]
    hidden = layers(hidden, cos, sin, states if feature_layers else None)
    if not feature_layers:
        return decoder.head(decoder.norm(pick(hidden))), None
    states[-1] = normed = decoder.norm(hidden)  # transformers reports the last layer after the final norm
    return decoder.head(pick(normed)), layer_features(states, feature_layers)
