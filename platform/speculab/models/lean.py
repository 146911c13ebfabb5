"""Decoder layers run as tensor functions over their weights: every family `models.families` reads.

transformers' decoder layers spend a large share of a small model's step in Python: a module
call per projection and norm, the attention-interface dispatch, the cache's `update`. The
functions here do the same arithmetic (the same norms, rotary and SDPA calls, in the same
order) straight on the weight tensors, which is what makes speculab's loop faster than
`generate` on the same model rather than as slow. One layer function serves Llama, Mistral,
Qwen2, Qwen3, Qwen3-MoE, Gemma, Phi-3, OPT, GPT-2, GPT-NeoX and Falcon; what tells them apart
is data (`LeanStack`, `LeanLayer`): RMSNorm (Gemma's weighting in float32) or LayerNorm with
biases; norms before each block, or after it (OPT-350m); queries, keys and values from three
projections or one fused (Phi-3 and GPT-2: [q | k | v]; GPT-NeoX and Falcon: per key head);
Qwen3's RMSNorm over each query and key head; the rotary over the whole head or its first part
(GPT-NeoX, Phi-3's partial factor), or learned positions added to the embeddings (OPT, GPT-2);
OPT's queries scaled before the attention; a gated MLP (SwiGLU, Gemma's GELU-tanh, Phi-3's fused
gate and up), a plain two-projection MLP (OPT, GPT-2, GPT-NeoX, Falcon), or a mixture-of-experts
block kept as transformers' module (Qwen3-MoE); attention and MLP in sequence, or in parallel
on the same input (GPT-NeoX, Falcon). The DFlash drafter's Qwen3 layers run here too
(`models.dflash`: `key_values` of the target's features), and DFlash2's with a dynamic block convolution
around the attention and the MLP (`BlockConv`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

import torch
import torch.nn.functional as F


class LayerKV(Protocol):
    """Where one layer's new keys and values go: a layer of the eager pass's cache (`models.slots`), a
    static pass's buffers (`models.static_pass.LayerSlots`) or a DFlash block's context
    (`models.dflash.ContextLayer`); each hands back the keys and values to attend to. Tensors only: a
    compiled layer (`models.static_pass.compiled_pass`) serves every layer of a stack with one compile."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...


Activation = Callable[[torch.Tensor], torch.Tensor]  # the MLP module's own activation (its `forward`)


@dataclass(frozen=True)
class Linear:
    weight: torch.Tensor  # [out, in] (GPT-2's Conv1D: a transposed view of its [in, out] weight)
    bias: torch.Tensor | None = None  # [out]


@dataclass(frozen=True)
class Norm:
    weight: torch.Tensor  # [D] (Gemma's: 1 + its parameter, in float32, as its norm computes it)
    bias: torch.Tensor | None = None  # [D] a LayerNorm's


@dataclass(frozen=True)
class FusedQKV:
    """One projection for queries, keys and values: rows [q | k | v] (Phi-3, GPT-2), or per key head its
    query heads, then its key, then its value (`per_head`: GPT-NeoX, Falcon)."""

    proj: Linear  # [(H + 2 Hkv) hd, D]
    per_head: bool = False


@dataclass(frozen=True)
class GatedMLP:
    """down(act(gate x) * up x): Llama's SwiGLU and its kin; Phi-3's gate and up are one matrix (up None)."""

    gate: Linear  # [I, D], or [2I, D] gate then up (Phi-3)
    up: Linear | None  # [I, D]
    down: Linear  # [D, I]
    act: Activation


@dataclass(frozen=True)
class PlainMLP:
    """fc2(act(fc1 x)): OPT's (ReLU), GPT-2's, GPT-NeoX's and Falcon's (GELU)."""

    fc1: Linear  # [I, D]
    fc2: Linear  # [D, I]
    act: Activation


@dataclass(frozen=True)
class BlockConv:
    """DFlash2's grouped dynamic depthwise convolution along a block, around one sublayer.

    Tap t mixes each channel of the position t steps back in the same block (none before a block's first
    position; a decode's query is one block, training's several in a row). Its coefficient is a learned
    per-channel base plus a
    per-group correction projected from the sublayer's input, so one projection of that input gives
    the taps for both sides: the input's (before the sublayer) and the output's (after it)."""

    base: torch.Tensor  # [2, taps, D] the learned kernel, side 0 (input) and side 1 (output)
    projection: Linear  # [2 * taps * G, D] the coefficients' correction per group of `group` channels
    group: int  # channels per group; G = D // group
    block: int  # positions per block: a tap reaches back within its block only


@dataclass(frozen=True)
class LeanLayer:
    attn_norm: Norm  # before the attention (after it with post-norms)
    mlp_norm: Norm | None  # before the MLP (after it); None: the MLP reads the attention's normed input (Falcon-7B)
    qkv: tuple[Linear, Linear, Linear] | FusedQKV  # q [H * hd, D], k, v [Hkv * hd, D]
    o: Linear  # [D, H * hd]
    ffn: GatedMLP | PlainMLP | torch.nn.Module  # a module: a mixture-of-experts block (Qwen3-MoE), run as it is
    q_norm: torch.Tensor | None = None  # [hd] Qwen3's per-head query RMSNorm
    k_norm: torch.Tensor | None = None  # [hd] Qwen3's per-head key RMSNorm
    attn_conv: BlockConv | None = None  # DFlash2: around the attention (o_proj included)
    mlp_conv: BlockConv | None = None  # DFlash2: around the MLP


# rms: Llama's (the weight multiplies after the cast back); rms_float32: Gemma's (in float32, then the
# cast); layer: LayerNorm with biases
NormKind = Literal["rms", "rms_float32", "layer"]


@dataclass(frozen=True)
class LeanStack:
    layers: tuple[LeanLayer, ...]
    heads: int
    kv_heads: int
    head_dim: int
    eps: float
    norm: NormKind = "rms"
    pre_norm: bool = True  # norms before each block; OPT-350m's come after it
    parallel: bool = False  # attention and MLP both read the layer's input; their sum is added (GPT-NeoX, Falcon)
    query_scale: float | None = None  # OPT: queries scaled by it before the attention, which then scales by 1


# x [B, N, D]; weight [D]
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, in_float32: bool = False) -> torch.Tensor:
    """RMSNorm in float32 as transformers computes it: the weight multiplies after the cast back (Llama,
    Qwen3) or before it (`in_float32`: Gemma's)."""
    dtype = x.dtype
    x = x.to(torch.float32)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return (x * weight).to(dtype) if in_float32 else weight * x.to(dtype)


# x [B, N, D]
def norm(stack: LeanStack, x: torch.Tensor, n: Norm) -> torch.Tensor:
    if stack.norm == "layer":
        return F.layer_norm(x, (x.shape[-1],), n.weight, n.bias, stack.eps)
    return rms_norm(x, n.weight, stack.eps, stack.norm == "rms_float32")


def linear(p: Linear, x: torch.Tensor) -> torch.Tensor:
    return F.linear(x, p.weight, p.bias)


# x [B, H, N, hd]; cos, sin [B, 1, N, r], r <= hd
def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The rotary over the first r dims of each head (all of them but in GPT-NeoX and a partial Phi-3)."""
    r = cos.shape[-1]
    if r < x.shape[-1]:
        return torch.cat((rotary(x[..., :r], cos, sin), x[..., r:]), dim=-1)
    half = r // 2
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


# x [B, N, D] -> [B, N, heads, hd]; the head count from the projection, so that N = 0 (an empty context) views too
def _heads(stack: LeanStack, p: Linear, x: torch.Tensor) -> torch.Tensor:
    return linear(p, x).view(*x.shape[:2], p.weight.shape[0] // stack.head_dim, stack.head_dim)


# x [B, N, D] a layer's normed input -> q [B, N, H, hd], k, v [B, N, Hkv, hd]
def projections(stack: LeanStack, w: LeanLayer, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Queries, keys and values per head, from three projections or from one fused, split as the family lays it out."""
    if not isinstance(w.qkv, FusedQKV):
        q, k, v = w.qkv
        return _heads(stack, q, x), _heads(stack, k, x), _heads(stack, v, x)
    fused = linear(w.qkv.proj, x)
    if w.qkv.per_head:  # [B, N, Hkv, groups + 2, hd]: a key head's query heads, its key, its value
        grouped = fused.view(*x.shape[:2], stack.kv_heads, stack.heads // stack.kv_heads + 2, stack.head_dim)
        return grouped[..., :-2, :].flatten(2, 3), grouped[..., -2, :], grouped[..., -1, :]
    kv_width = stack.kv_heads * stack.head_dim
    q, k, v = fused.split([stack.heads * stack.head_dim, kv_width, kv_width], dim=-1)
    q, k, v = (t.view(*x.shape[:2], t.shape[-1] // stack.head_dim, stack.head_dim) for t in (q, k, v))
    return q, k, v


# heads [B, N, h, hd]; head_norm [hd] or None; cos, sin [B, 1, N, r] or None (learned positions) -> [B, h, N, hd]
def positioned(
    stack: LeanStack,
    heads: torch.Tensor,
    head_norm: torch.Tensor | None,
    cos: torch.Tensor | None,
    sin: torch.Tensor | None,
) -> torch.Tensor:
    """Queries or keys as the attention takes them: Qwen3's per-head norm, then the rotary."""
    if head_norm is not None:
        heads = rms_norm(heads, head_norm, stack.eps)
    heads = heads.transpose(1, 2)
    return heads if cos is None or sin is None else rotary(heads, cos, sin)


# x [B, N, D] a layer's normed input; cos, sin [B, 1, N, r] or None -> keys, values [B, Hkv, N, hd]
def key_values(
    stack: LeanStack, w: LeanLayer, x: torch.Tensor, cos: torch.Tensor | None, sin: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """A layer's keys and values of x alone (the DFlash drafter's context: separate projections)."""
    assert not isinstance(w.qkv, FusedQKV)
    k, v = (_heads(stack, p, x) for p in w.qkv[1:])
    return positioned(stack, k, w.k_norm, cos, sin), v.transpose(1, 2)


# x [B, N, D]; delta [B, N, taps, G] the corrections; base [taps, D] -> [B, N, D]
def block_convolve(x: torch.Tensor, delta: torch.Tensor, base: torch.Tensor, group: int, block: int) -> torch.Tensor:
    """sum_t (base_t + delta_t) * x shifted t positions down its block of `block` positions (zeros shifted in)."""
    B, N, D = x.shape
    taps = base.shape[0]
    grouped = x.view(B, N, D // group, group)
    coefficients = base.view(1, 1, taps, D // group, group) + delta[..., None]  # [B, N, taps, G, group]
    out = coefficients[:, :, 0] * grouped
    place = torch.arange(N, device=x.device) % block  # [N] each position's place in its block
    for tap in range(1, min(taps, N)):
        shifted = F.pad(grouped[:, : N - tap], (0, 0, 0, 0, tap, 0)) * (place >= tap).view(1, N, 1, 1)
        out = out + coefficients[:, :, tap] * shifted
    return out.reshape(B, N, D)


# x [B, N, D] a sublayer's input -> (convolved input [B, N, D], the output side's corrections [B, N, taps, G])
def conv_before(conv: BlockConv | None, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    if conv is None:
        return x, None
    taps = conv.base.shape[1]
    delta = linear(conv.projection, x).unflatten(-1, (2, taps, -1))  # [B, N, 2, taps, G]
    return block_convolve(x, delta[:, :, 0], conv.base[0], conv.group, conv.block), delta[:, :, 1]


# y [B, N, D] the sublayer's output; delta from `conv_before` on its input
def conv_after(conv: BlockConv | None, y: torch.Tensor, delta: torch.Tensor | None) -> torch.Tensor:
    if conv is None or delta is None:
        return y
    return block_convolve(y, delta, conv.base[1], conv.group, conv.block)


# x [B, N, D] a layer's normed input
def mlp(w: LeanLayer, x: torch.Tensor) -> torch.Tensor:
    f = w.ffn
    if isinstance(f, GatedMLP):
        gate, up = linear(f.gate, x).chunk(2, dim=-1) if f.up is None else (linear(f.gate, x), linear(f.up, x))
        return linear(f.down, f.act(gate) * up)
    if isinstance(f, PlainMLP):
        return linear(f.fc2, f.act(linear(f.fc1, x)))
    return f(x)


# hidden [B, N, D]; cos, sin [B, 1, N, r] or None (learned positions); mask [B, 1, N, S + N] or None
def lean_layer(
    stack: LeanStack,
    w: LeanLayer,
    hidden: torch.Tensor,
    cos: torch.Tensor | None,
    sin: torch.Tensor | None,
    mask: torch.Tensor | None,
    kv: LayerKV,
) -> torch.Tensor:
    """One decoder layer over hidden, its keys and values handed to kv: [B, N, D]. The residual sums
    keep transformers' order of additions wherever it matters to rounding."""
    B, N, _ = hidden.shape
    x = norm(stack, hidden, w.attn_norm) if stack.pre_norm else hidden
    x, attn_delta = conv_before(w.attn_conv, x)
    q, k, v = projections(stack, w, x)
    k, v = kv.update(positioned(stack, k, w.k_norm, cos, sin), v.transpose(1, 2))
    q = positioned(stack, q, w.q_norm, cos, sin)
    if stack.query_scale is not None:  # OPT: scaled here, and the attention scales by 1
        q = q * stack.query_scale
    out = attention(q, k, v, mask, None if stack.query_scale is None else 1.0)
    attended = conv_after(w.attn_conv, linear(w.o, out.transpose(1, 2).reshape(B, N, -1)), attn_delta)
    if stack.parallel:  # (mlp + attention) + input, as GPT-NeoX adds them (Falcon: the same sum)
        return mlp(w, x if w.mlp_norm is None else norm(stack, hidden, w.mlp_norm)) + attended + hidden
    hidden = hidden + attended
    if not stack.pre_norm:
        hidden = norm(stack, hidden, w.attn_norm)
    assert w.mlp_norm is not None  # a sequential layer has a norm of its own around the MLP
    m, mlp_delta = conv_before(w.mlp_conv, norm(stack, hidden, w.mlp_norm) if stack.pre_norm else hidden)
    hidden = hidden + conv_after(w.mlp_conv, mlp(w, m), mlp_delta)
    return hidden if stack.pre_norm else norm(stack, hidden, w.mlp_norm)


LayerFn = Callable[
    [LeanStack, LeanLayer, torch.Tensor, "torch.Tensor | None", "torch.Tensor | None", "torch.Tensor | None", LayerKV],
    torch.Tensor,
]


# hidden [B, N, D]; cos, sin [B, N, r] or None (learned positions); mask [B, 1, N, S + N] or None
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

    embed: torch.nn.Module  # Gemma's scales its output by sqrt(hidden) itself
    rotary: torch.nn.Module | None  # None: learned positions (`positions`) instead
    norm: torch.nn.Module | None  # None: OPT-350m, whose layers end with their own norm
    head: torch.nn.Module
    positions: torch.Tensor | None = None  # [P, D] OPT's and GPT-2's learned positions, read at position + offset
    position_offset: int = 0
    project_in: torch.nn.Module | None = None  # OPT-350m: embeddings to the layers' width
    project_out: torch.nn.Module | None = None  # and back, before the head


# (hidden [B, N, D], cos, sin [B, N, r] or None, outputs or None) -> hidden [B, N, D]: every layer,
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


# tokens, positions [B, N] -> (hidden [B, N, D], cos, sin [B, N, r] or None)
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
