"""Llama, Qwen3 (dense and mixture-of-experts) and OPT decoder stacks run as tensor functions over their weights.

transformers' decoder layers spend a large share of a small model's step in Python: a module
call per projection and norm, the attention-interface dispatch, the cache's `update`. The
functions here do the same arithmetic (the same norms, rotary and SDPA calls, in the same
order) straight on the weight tensors, which is what makes speculab's loop faster than
`generate` on the same model rather than as slow. Qwen3 differs from Llama only by an RMSNorm
over each query and key head before the rotary (`q_norm`, `k_norm`); Qwen3-MoE's sparse layers
keep transformers' mixture-of-experts block as a module (its router and its experts, in the
experts implementation the model is configured with), called on the normed input. OPT (the GBV paper's pairs)
differs more: learned absolute positions added to the embeddings instead of the rotary,
LayerNorm with biases, biased projections, queries scaled before the attention, a ReLU MLP of two
projections, and in OPT-350m norms after each block instead of before, and projections into and
out of a narrower embedding. `lean_stack` accepts only plain `nn.Linear` projections and full
attention in every layer: a tensor-parallel (AutoTP) model, whose projections all-reduce, keeps
transformers' modules. The DFlash drafter's Qwen3 layers run here too (`models.dflash`:
`layer_stack`, `key_values` of the target's features).
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


class LayerKV(Protocol):
    """Where one layer's new keys and values go: a layer of the eager pass's cache (`models.slots`), a
    static pass's buffers (`models.static_pass.LayerSlots`) or a DFlash block's context
    (`models.dflash.ContextLayer`); each hands back the keys and values to attend to. Tensors only: a
    compiled layer (`models.static_pass.compiled_pass`) serves every layer of a stack with one compile."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...


@dataclass(frozen=True)
class LeanLayer:
    input_norm: torch.Tensor  # [D]
    post_norm: torch.Tensor  # [D]
    q: torch.Tensor  # [H * hd, D]
    k: torch.Tensor  # [Hkv * hd, D]
    v: torch.Tensor  # [Hkv * hd, D]
    o: torch.Tensor  # [D, H * hd]
    ffn: SwiGLU | ReluMLP | torch.nn.Module  # a module: a mixture-of-experts block (Qwen3-MoE), run as it is
    q_norm: torch.Tensor | None = None  # [hd] Qwen3's per-head query RMSNorm (None: Llama)
    k_norm: torch.Tensor | None = None  # [hd] Qwen3's per-head key RMSNorm
    biases: Biases | None = None  # OPT's: every projection and norm has one


@dataclass(frozen=True)
class SwiGLU:
    """Llama's and Qwen3's MLP: down(silu(gate x) * up x)."""

    gate: torch.Tensor  # [I, D]
    up: torch.Tensor  # [I, D]
    down: torch.Tensor  # [D, I]


@dataclass(frozen=True)
class ReluMLP:
    """OPT's MLP: fc2(relu(fc1 x)), with biases."""

    fc1: torch.Tensor  # [I, D]
    fc2: torch.Tensor  # [D, I]
    fc1_bias: torch.Tensor | None  # [I]
    fc2_bias: torch.Tensor | None  # [D]


@dataclass(frozen=True)
class Biases:
    input_norm: torch.Tensor  # [D]
    post_norm: torch.Tensor  # [D]
    q: torch.Tensor | None  # [H * hd]
    k: torch.Tensor | None  # [Hkv * hd]
    v: torch.Tensor | None  # [Hkv * hd]
    o: torch.Tensor | None  # [D]


@dataclass(frozen=True)
class LeanStack:
    layers: tuple[LeanLayer, ...]
    heads: int
    kv_heads: int
    head_dim: int
    eps: float
    layer_norm: bool = False  # LayerNorm with biases (OPT), else RMSNorm
    pre_norm: bool = True  # norms before each block; OPT-350m's come after it
    query_scale: float | None = None  # OPT: queries scaled by it before the attention, which then scales by 1


# Decoder stacks whose top-level forward is embed -> rotary -> layers -> norm -> lm_head and
# nothing else (no embedding scale), so TreeLM may run the layers itself, as modules or lean.
LEAN_MODEL_TYPES = frozenset({"llama", "qwen3", "qwen3_moe"})


def runs_own_layers(config: PretrainedConfig) -> bool:
    """TreeLM may call the decoder layers itself: a lean model type with full attention everywhere
    (a sliding-window layer needs transformers' own masks)."""
    types = getattr(config, "layer_types", None) or ["full_attention"]
    return config.model_type in LEAN_MODEL_TYPES and all(t == "full_attention" for t in types)


def _unsharded_linear(m: torch.nn.Module) -> bool:
    """A plain `nn.Linear` whose weight is whole: a DTensor weight is a shard of transformers' tensor
    parallelism, and an `nn.Linear` subclass (an AutoTP shard) all-reduces; their module hooks communicate."""
    return type(m) is torch.nn.Linear and not isinstance(m.weight, DTensor)


def _is_matrix(weight: object) -> bool:
    return isinstance(weight, torch.Tensor) and weight.ndim == 2


def _head_norm(attention: torch.nn.Module, name: str) -> torch.Tensor | None:
    norm = getattr(attention, name, None)
    return None if norm is None else norm.weight


def _experts(layer: Any) -> bool:
    """A mixture-of-experts layer (Qwen3-MoE's sparse block: a router and its experts)."""
    return hasattr(layer.mlp, "experts")


def plain_projections(layers: Iterable[Any]) -> bool:  # transformers decoder layers: no common class
    """Every projection of these decoder layers is a plain `nn.Linear` without bias (not a tensor-parallel
    one, whose output all-reduces), and no expert weight is sharded: what the lean layers compute."""
    layers = list(layers)
    children = [m for layer in layers for m in layer.self_attn.children()]
    children += [m for layer in layers if not _experts(layer) for m in layer.mlp.children()]
    projections = [m for m in children if _is_matrix(getattr(m, "weight", None))]  # not Qwen3's head norms
    sharded = any(isinstance(w, DTensor) for layer in layers if _experts(layer) for w in layer.mlp.parameters())
    return all(_unsharded_linear(m) and m.bias is None for m in projections) and not sharded


def _ffn(layer: Any) -> SwiGLU | torch.nn.Module:
    if _experts(layer):
        return layer.mlp  # transformers' module: its router, then its experts in the implementation configured
    return SwiGLU(layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight, layer.mlp.down_proj.weight)


def layer_stack(layers: Iterable[Any], config: PretrainedConfig) -> LeanStack:
    """The weights of Llama, Qwen3 or Qwen3-MoE decoder layers (transformers' module names), as the lean
    layers read them."""
    weights = tuple(
        LeanLayer(
            layer.input_layernorm.weight,
            layer.post_attention_layernorm.weight,
            layer.self_attn.q_proj.weight,
            layer.self_attn.k_proj.weight,
            layer.self_attn.v_proj.weight,
            layer.self_attn.o_proj.weight,
            _ffn(layer),
            _head_norm(layer.self_attn, "q_norm"),
            _head_norm(layer.self_attn, "k_norm"),
        )
        for layer in layers
    )
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return LeanStack(weights, config.num_attention_heads, config.num_key_value_heads, head_dim, config.rms_norm_eps)


def lean_stack(model: PreTrainedModel) -> LeanStack | None:
    """The weights of a plain single-process Llama, Qwen3 or OPT, or None when its layers must run as modules."""
    config = model.config
    if config.model_type == "opt":
        return opt_stack(model)
    if not runs_own_layers(config) or config.hidden_act != "silu" or not plain_projections(model.model.layers):
        return None
    return layer_stack(model.model.layers, config)


def _bias(module: torch.nn.Module) -> torch.Tensor | None:
    bias = module.bias
    return bias if isinstance(bias, torch.Tensor) else None


def opt_stack(model: PreTrainedModel) -> LeanStack | None:
    """The weights of a plain single-process OPT (transformers' module names), or None: another
    activation than ReLU, norms without weights, or tensor-parallel projections."""
    config, layers = model.config, model.model.decoder.layers
    projections = [m for layer in layers for m in (*layer.self_attn.children(), layer.fc1, layer.fc2)]
    norms = [m for layer in layers for m in (layer.self_attn_layer_norm, layer.final_layer_norm)]
    if config.activation_function != "relu" or any(m.weight is None or m.bias is None for m in norms):
        return None
    if not all(_unsharded_linear(m) for m in projections):
        return None
    weights = tuple(
        LeanLayer(
            layer.self_attn_layer_norm.weight,
            layer.final_layer_norm.weight,
            layer.self_attn.q_proj.weight,
            layer.self_attn.k_proj.weight,
            layer.self_attn.v_proj.weight,
            layer.self_attn.out_proj.weight,
            ReluMLP(layer.fc1.weight, layer.fc2.weight, _bias(layer.fc1), _bias(layer.fc2)),
            biases=Biases(
                layer.self_attn_layer_norm.bias,
                layer.final_layer_norm.bias,
                _bias(layer.self_attn.q_proj),
                _bias(layer.self_attn.k_proj),
                _bias(layer.self_attn.v_proj),
                _bias(layer.self_attn.out_proj),
            ),
        )
        for layer in layers
    )
    heads = config.num_attention_heads
    head_dim = config.hidden_size // heads
    eps = layers[0].final_layer_norm.eps
    return LeanStack(weights, heads, heads, head_dim, eps, True, config.do_layer_norm_before, head_dim**-0.5)


# x [B, N, D]; weight [D]
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Llama's (and Qwen3's) RMSNorm, computed in float32 as transformers does."""
    dtype = x.dtype
    x = x.to(torch.float32)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(dtype)


# x [B, N, D]; weight, bias [D] (bias: a LayerNorm's)
def norm(stack: LeanStack, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """The stack's norm: LayerNorm (OPT) or RMSNorm."""
    if stack.layer_norm:
        return F.layer_norm(x, (x.shape[-1],), weight, bias, stack.eps)
    return rms_norm(x, weight, stack.eps)


# x [B, H, N, hd]; cos, sin [B, 1, N, hd]
def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


# q [B, H, N, hd]; k, v [B, Hkv, S, hd]; mask [B, 1, N, S] additive or boolean, or None (all slots)
def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float | None = None
) -> torch.Tensor:
    """SDPA over grouped key heads. Masked, the query groups are folded into the query length, each
    group's rows under the same mask: on CUDA a masked SDPA with enable_gqa has only the math kernel
    (flash takes no mask, the memory-efficient kernel no grouping), which upcasts the whole
    [B, H, N, S] to float32; folded, the memory-efficient kernel runs, and no K/V is repeated."""
    B, H, N, hd = q.shape
    Hkv = k.shape[1]
    groups = H // Hkv
    scale = hd**-0.5 if scale is None else scale
    if groups > 1 and mask is not None:
        folded = mask if N == 1 else mask.repeat(1, 1, groups, 1)  # [B, 1, groups * N, S]: row g * N + n is n's
        out = F.scaled_dot_product_attention(q.reshape(B, Hkv, groups * N, hd), k, v, attn_mask=folded, scale=scale)
        return out.reshape(B, H, N, hd)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=groups > 1)


# x [B, N, D] a layer's normed input; cos, sin [B, 1, N, hd] or None (learned positions) -> [B, H, N, hd]
def queries(
    stack: LeanStack, w: LeanLayer, x: torch.Tensor, cos: torch.Tensor | None, sin: torch.Tensor | None
) -> torch.Tensor:
    q = F.linear(x, w.q, None if w.biases is None else w.biases.q)
    if stack.query_scale is not None:  # OPT: scaled here, in its order, and the attention scales by 1
        q = q * stack.query_scale
    q = q.view(*x.shape[:2], stack.heads, stack.head_dim)
    if w.q_norm is not None:  # Qwen3: per head, before the rotary
        q = rms_norm(q, w.q_norm, stack.eps)
    q = q.transpose(1, 2)
    return q if cos is None or sin is None else rotary(q, cos, sin)


# x [B, N, D] a layer's normed input; cos, sin [B, 1, N, hd] or None -> keys, values [B, Hkv, N, hd]
def key_values(
    stack: LeanStack, w: LeanLayer, x: torch.Tensor, cos: torch.Tensor | None, sin: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    b = w.biases
    k = F.linear(x, w.k, None if b is None else b.k).view(*x.shape[:2], stack.kv_heads, stack.head_dim)
    if w.k_norm is not None:  # Qwen3: per head, before the rotary
        k = rms_norm(k, w.k_norm, stack.eps)
    v = F.linear(x, w.v, None if b is None else b.v).view(*x.shape[:2], stack.kv_heads, stack.head_dim).transpose(1, 2)
    k = k.transpose(1, 2)
    return (k if cos is None or sin is None else rotary(k, cos, sin)), v


# x [B, N, D] a layer's normed input
def mlp(w: LeanLayer, x: torch.Tensor) -> torch.Tensor:
    """SwiGLU (Llama, Qwen3), OPT's ReLU MLP, or a mixture-of-experts block's module."""
    f = w.ffn
    if isinstance(f, SwiGLU):
        return F.linear(F.silu(F.linear(x, f.gate)) * F.linear(x, f.up), f.down)
    if isinstance(f, ReluMLP):
        return F.linear(F.relu(F.linear(x, f.fc1, f.fc1_bias)), f.fc2, f.fc2_bias)
    return f(x)


# hidden [B, N, D]; cos, sin [B, 1, N, hd] or None (learned positions); mask [B, 1, N, S + N] or None
def lean_layer(
    stack: LeanStack,
    w: LeanLayer,
    hidden: torch.Tensor,
    cos: torch.Tensor | None,
    sin: torch.Tensor | None,
    mask: torch.Tensor | None,
    kv: LayerKV,
) -> torch.Tensor:
    """One decoder layer over hidden, its keys and values handed to kv: [B, N, D]."""
    B, N, _ = hidden.shape
    scale = 1.0 if stack.query_scale is not None else None
    first, second = (w.biases.input_norm, w.biases.post_norm) if w.biases else (None, None)
    x = norm(stack, hidden, w.input_norm, first) if stack.pre_norm else hidden
    k, v = kv.update(*key_values(stack, w, x, cos, sin))
    out = attention(queries(stack, w, x, cos, sin), k, v, mask, scale)
    hidden = hidden + F.linear(out.transpose(1, 2).reshape(B, N, -1), w.o, None if w.biases is None else w.biases.o)
    if not stack.pre_norm:
        hidden = norm(stack, hidden, w.input_norm, first)
    x = norm(stack, hidden, w.post_norm, second) if stack.pre_norm else hidden
    hidden = hidden + mlp(w, x)
    return norm(stack, hidden, w.post_norm, second) if not stack.pre_norm else hidden


LayerFn = Callable[
    [LeanStack, LeanLayer, torch.Tensor, "torch.Tensor | None", "torch.Tensor | None", "torch.Tensor | None", LayerKV],
    torch.Tensor,
]


# hidden [B, N, D]; cos, sin [B, N, hd] or None (learned positions); mask [B, 1, N, S + N] or None
def lean_layers(
    stack: LeanStack,
    hidden: torch.Tensor,
    cos: torch.Tensor | None,
    sin: torch.Tensor | None,
    mask: torch.Tensor | None,
    kv: Callable[[int], LayerKV],
    outputs: list[torch.Tensor] | None = None,
    layer: LayerFn = lean_layer,
) -> torch.Tensor:
    """Every decoder layer over hidden by `layer` (`lean_layer`, or it compiled), layer i handing its
    keys and values to kv(i) (and each layer's output to ``outputs``, when given: transformers' hidden
    states after the embeddings)."""
    if cos is not None and sin is not None:
        cos, sin = cos[:, None], sin[:, None]
    for index, w in enumerate(stack.layers):
        hidden = layer(stack, w, hidden, cos, sin, mask, kv(index))
        if outputs is not None:
            outputs.append(hidden)
    return hidden


@dataclass(frozen=True)
class Decoder:
    """The parts of a transformers decoder around its layers (`decoder_forward` calls them)."""

    embed: torch.nn.Module
    rotary: torch.nn.Module | None  # None: learned positions (`positions`) instead
    norm: torch.nn.Module | None  # None: OPT-350m, whose layers end with their own norm
    head: torch.nn.Module
    positions: torch.Tensor | None = None  # [P, D] OPT's learned positions, read at position + position_offset
    position_offset: int = 0
    project_in: torch.nn.Module | None = None  # OPT-350m: embeddings to the layers' width
    project_out: torch.nn.Module | None = None  # and back, before the head


def own_decoder(model: PreTrainedModel, lean: LeanStack | None) -> Decoder | None:
    """The parts TreeLM runs around the layers itself: a Llama or Qwen3 (whose layers it runs as
    modules where they are not lean), an OPT with a lean stack; None: transformers' forward runs it."""
    if model.config.model_type == "opt":
        d = model.model.decoder
        if lean is None:
            return None
        places = d.embed_positions
        return Decoder(
            d.embed_tokens,
            None,
            d.final_layer_norm,
            model.lm_head,
            places.weight,
            places.offset,
            d.project_in,
            d.project_out,
        )
    if not runs_own_layers(model.config):
        return None
    d = model.model
    return Decoder(d.embed_tokens, d.rotary_emb, d.norm, model.lm_head)


# (hidden [B, N, D], cos, sin [B, N, hd] or None, outputs or None) -> hidden [B, N, D]: every layer,
# appending each layer's output to outputs when given
Layers = Callable[
    [torch.Tensor, "torch.Tensor | None", "torch.Tensor | None", "list[torch.Tensor] | None"], torch.Tensor
]


# states: transformers' hidden_states (the embeddings, then each layer's output)
def layer_features(
    states: tuple[torch.Tensor, ...] | list[torch.Tensor], feature_layers: tuple[int, ...]
) -> torch.Tensor:
    """[B, N, n * hidden]: hidden_states[id + 1] of every feature layer, concatenated."""
    return torch.cat([states[i + 1] for i in feature_layers], dim=-1)


# tokens, positions [B, N] -> (hidden [B, N, D], cos, sin [B, N, hd] or None)
def embed(
    decoder: Decoder, tokens: torch.Tensor, positions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """The embeddings the layers take, and the rotary's cos and sin (None with learned positions,
    which are added here in OPT's order: projected in, then the positions added)."""
    hidden = decoder.embed(tokens)
    if decoder.rotary is not None:
        cos, sin = decoder.rotary(hidden, positions)
        return hidden, cos, sin
    if decoder.project_in is not None:
        hidden = decoder.project_in(hidden)
    if decoder.positions is not None:
        hidden = hidden + F.embedding(positions + decoder.position_offset, decoder.positions)
    return hidden, None, None


# hidden [B, M, D] the last layer's output
def finish(decoder: Decoder, hidden: torch.Tensor) -> torch.Tensor:
    """The final norm, and OPT-350m's projection out: what the head reads (and transformers reports as
    the last hidden state)."""
    if decoder.norm is not None:
        hidden = decoder.norm(hidden)
    return hidden if decoder.project_out is None else decoder.project_out(hidden)


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
    [B, N, n * hidden] at feature_layers or None): embeddings and positions, `layers`, final norm, head.
    The eager and the fixed-shape passes (`models.static_pass`) both run through here."""
    hidden, cos, sin = embed(decoder, tokens, positions)
    states = [hidden]
    hidden = layers(hidden, cos, sin, states if feature_layers else None)
    if not feature_layers:
        return decoder.head(finish(decoder, pick(hidden))), None
    states[-1] = normed = finish(decoder, hidden)  # transformers reports the last layer after the final norm
    return decoder.head(pick(normed)), layer_features(states, feature_layers)
