"""Which transformers families run on the lean layers, and where each keeps its weights.

`lean_stack` reads a loaded model's decoder layers into the lean layers' data (`models.lean`): its
own parameters (transposed views of GPT-2's Conv1D weights; Gemma's norm weights as the 1 + w its
norm multiplies by), read once, when a `TreeLM` is built. `own_decoder` names the parts around the
layers (embeddings, rotary or learned positions, final norm, head). `runs_lean` is the question the
rest of the platform asks of a model. Families, by transformers' `model_type`: Llama and the
families shaped like it (Mistral, Qwen2, Qwen3, Qwen3-MoE, Gemma, Phi-3), OPT, GPT-2, GPT-NeoX and
Falcon.

A model keeps transformers' modules, and `TreeLM` runs transformers' forward over its slot cache
and a 4-D mask (`models.hf`), wherever the lean layers would not compute what its modules do:
- a projection that is not the family's own plain class, or a DTensor weight: a tensor-parallel
  shard (transformers' or AutoTP's), whose module hooks communicate; sharded experts likewise.
  A Llama, Qwen3 or Qwen3-MoE shard still has `TreeLM` call its decoder layers as modules;
- a sliding window that can bind: a sliding layer of Qwen2 or Qwen3, or Mistral's or Phi-3's
  window (every layer's) shorter than the model's positions;
- Falcon with ALiBi (its bias enters the scores inside the attention) or with biases (Falcon adds
  them after the matmul, a rounding F.linear does not repeat);
- GPT-2 with cross-attention or its scaling options changed from their defaults.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from speculab.models.lean import (
    Activation,
    Decoder,
    FusedQKV,
    GatedMLP,
    LeanLayer,
    LeanStack,
    Linear,
    Norm,
    NormKind,
    PlainMLP,
)

if TYPE_CHECKING:
    from transformers import PretrainedConfig

# A loaded causal LM: transformers' model, or a `models.checkpoint_lm.CheckpointLM` (the same names)
CausalLM = Any


def is_dtensor(t: Any) -> bool:
    """Whether `t` is a DTensor (a tensor-parallel shard's weight). One exists only once its module is
    imported, which a shard's load does; importing it just to ask costs about 0.9 s of every run's start."""
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and isinstance(t, module.DTensor)


class _KeepModules(Exception):
    """Raised while reading a layer the lean functions would not reproduce: the model keeps its modules."""


def _projection(m: Any, kind: type = torch.nn.Linear) -> Linear:
    """The weights of a projection of exactly the family's class (`kind`) whose weight is whole: an
    `nn.Linear` subclass (an AutoTP shard) all-reduces, and a DTensor weight is a tensor-parallel shard."""
    plain = not is_dtensor(m.weight) and type(m) is kind
    if not plain:
        raise _KeepModules
    return Linear(m.weight, m.bias)


def _conv1d(m: Any) -> Linear:
    """GPT-2's Conv1D (x @ W + b, W [in, out]) as a Linear over W's transposed view."""
    from transformers.pytorch_utils import Conv1D

    p = _projection(m, Conv1D)
    return Linear(p.weight.t(), p.bias)


def _falcon_projection(m: Any) -> Linear:
    from transformers.models.falcon.modeling_falcon import FalconLinear

    if m.bias is not None:  # added after the matmul, not in it: the lean F.linear would round differently
        raise _KeepModules
    return _projection(m, FalconLinear)


def _norm(m: Any) -> Norm:
    """An RMSNorm's weight, or a LayerNorm's weight and bias (one without weights keeps its module)."""
    if m.weight is None:
        raise _KeepModules
    return Norm(m.weight, getattr(m, "bias", None))


def _gemma_norm(m: Any) -> Norm:
    return Norm(1.0 + m.weight.float())  # what Gemma's RMSNorm multiplies by, computed as it computes it


def _act(module: torch.nn.Module) -> Activation:
    return module.forward  # the module's own arithmetic, without a module call's hooks


def _head_norm(attention: Any, name: str) -> torch.Tensor | None:
    norm = getattr(attention, name, None)  # Qwen3's per-head RMSNorm
    return None if norm is None else norm.weight


def _attention_projections(attention: Any) -> tuple[Linear, Linear, Linear] | FusedQKV:
    if hasattr(attention, "qkv_proj"):  # Phi-3: one [q | k | v] projection
        return FusedQKV(_projection(attention.qkv_proj))
    return _projection(attention.q_proj), _projection(attention.k_proj), _projection(attention.v_proj)


def _gated_mlp(mlp: Any) -> GatedMLP | torch.nn.Module:
    if hasattr(mlp, "experts"):  # Qwen3-MoE's sparse block: its router, then its experts, as it is configured
        if any(is_dtensor(p) for p in mlp.parameters()):
            raise _KeepModules
        return mlp
    if hasattr(mlp, "gate_up_proj"):  # Phi-3: gate and up in one matrix
        return GatedMLP(_projection(mlp.gate_up_proj), None, _projection(mlp.down_proj), _act(mlp.activation_fn))
    up = _projection(mlp.up_proj)
    return GatedMLP(_projection(mlp.gate_proj), up, _projection(mlp.down_proj), _act(mlp.act_fn))


def layer_stack(layers: Iterable[Any], config: PretrainedConfig, norm: NormKind = "rms") -> LeanStack:
    """The weights of Llama-shaped decoder layers (transformers' module names: Llama, Mistral, Qwen2,
    Qwen3, Qwen3-MoE, Gemma, Phi-3; the DFlash drafter's Qwen3 layers), as the lean layers read them."""
    read_norm = _gemma_norm if norm == "rms_float32" else _norm
    weights = tuple(
        LeanLayer(
            read_norm(layer.input_layernorm),
            read_norm(layer.post_attention_layernorm),
            _attention_projections(layer.self_attn),
            _projection(layer.self_attn.o_proj),
            _gated_mlp(layer.mlp),
            _head_norm(layer.self_attn, "q_norm"),
            _head_norm(layer.self_attn, "k_norm"),
        )
        for layer in layers
    )
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_heads = config.num_key_value_heads
    return LeanStack(weights, config.num_attention_heads, kv_heads, head_dim, config.rms_norm_eps, norm)


# Families whose every layer applies `config.sliding_window` (Qwen2's and Qwen3's name theirs in `layer_types`)
WINDOW_EVERY_LAYER = frozenset({"mistral", "phi3"})


def full_attention(config: PretrainedConfig) -> bool:
    """Every layer attends to every earlier position: no sliding layer in `layer_types`, and a window
    that every layer applies (Mistral's, Phi-3's) spans the model's positions, so it never binds."""
    types = getattr(config, "layer_types", None) or ["full_attention"]
    window = getattr(config, "sliding_window", None) if config.model_type in WINDOW_EVERY_LAYER else None
    return all(t == "full_attention" for t in types) and (window is None or window >= config.max_position_embeddings)


def _llama_stack(model: Any, norm: NormKind = "rms") -> LeanStack:
    if not full_attention(model.config):
        raise _KeepModules
    return layer_stack(model.model.layers, model.config, norm)


def _llama_decoder(model: Any) -> Decoder:
    d = model.model
    return Decoder(d.embed_tokens, d.rotary_emb, d.norm, model.lm_head)


def _opt_stack(model: Any) -> LeanStack:
    """LayerNorm with biases, biased projections, queries scaled first, an MLP of two projections; in
    OPT-350m norms after each block."""
    config, layers = model.config, model.model.decoder.layers
    weights = tuple(
        LeanLayer(
            _norm(layer.self_attn_layer_norm),
            _norm(layer.final_layer_norm),
            _attention_projections(layer.self_attn),
            _projection(layer.self_attn.out_proj),
            PlainMLP(_projection(layer.fc1), _projection(layer.fc2), _act(layer.activation_fn)),
        )
        for layer in layers
    )
    heads = config.num_attention_heads
    head_dim = config.hidden_size // heads
    eps = layers[0].final_layer_norm.eps
    return LeanStack(
        weights, heads, heads, head_dim, eps, "layer", config.do_layer_norm_before, query_scale=head_dim**-0.5
    )


def _opt_decoder(model: Any) -> Decoder:
    """Learned positions added after OPT-350m's projection in; its projection out before the head."""
    d = model.model.decoder
    places, head = d.embed_positions, model.lm_head
    return Decoder(
        d.embed_tokens, None, d.final_layer_norm, head, places.weight, places.offset, d.project_in, d.project_out
    )


def _gpt2_stack(model: Any) -> LeanStack:
    """Conv1D projections, one [q | k | v] of them; LayerNorm; the MLP's GELU (gelu_new)."""
    config = model.config
    if not config.scale_attn_weights or config.scale_attn_by_inverse_layer_idx or config.add_cross_attention:
        raise _KeepModules
    weights = tuple(
        LeanLayer(
            _norm(block.ln_1),
            _norm(block.ln_2),
            FusedQKV(_conv1d(block.attn.c_attn)),
            _conv1d(block.attn.c_proj),
            PlainMLP(_conv1d(block.mlp.c_fc), _conv1d(block.mlp.c_proj), _act(block.mlp.act)),
        )
        for block in model.transformer.h
    )
    heads = config.n_head
    return LeanStack(weights, heads, heads, config.n_embd // heads, config.layer_norm_epsilon, "layer")


def _gpt2_decoder(model: Any) -> Decoder:
    t = model.transformer
    return Decoder(t.wte, None, t.ln_f, model.lm_head, t.wpe.weight)


def _neox_stack(model: Any) -> LeanStack:
    """One projection laid out per head (its query, key and value); the rotary over part of each head
    (the rotary module's width); attention and MLP in parallel unless `use_parallel_residual` is off."""
    config = model.config
    weights = tuple(
        LeanLayer(
            _norm(layer.input_layernorm),
            _norm(layer.post_attention_layernorm),
            FusedQKV(_projection(layer.attention.query_key_value), per_head=True),
            _projection(layer.attention.dense),
            PlainMLP(_projection(layer.mlp.dense_h_to_4h), _projection(layer.mlp.dense_4h_to_h), _act(layer.mlp.act)),
        )
        for layer in model.gpt_neox.layers
    )
    heads = config.num_attention_heads
    head_dim = config.hidden_size // heads
    return LeanStack(
        weights, heads, heads, head_dim, config.layer_norm_eps, "layer", parallel=config.use_parallel_residual
    )


def _neox_decoder(model: Any) -> Decoder:
    d = model.gpt_neox
    return Decoder(d.embed_in, d.rotary_emb, d.final_layer_norm, model.lm_head)


def _falcon_norms(layer: Any) -> tuple[Norm, Norm | None]:
    """(attention's, MLP's): Falcon-40B's two norms of the input; Falcon-7B's one, which the parallel MLP
    shares (None); a sequential layer's norm after the attention."""
    if hasattr(layer, "ln_attn"):
        return _norm(layer.ln_attn), _norm(layer.ln_mlp)
    after = getattr(layer, "post_attention_layernorm", None)
    return _norm(layer.input_layernorm), None if after is None else _norm(after)


def _falcon_stack(model: Any) -> LeanStack:
    """One projection laid out per key head (its query heads, its key, its value: multi-query Falcon-7B
    has one key head, Falcon-40B's `new_decoder_architecture` groups); attention and MLP in parallel."""
    config = model.config
    if config.alibi:
        raise _KeepModules
    weights = tuple(
        LeanLayer(
            *_falcon_norms(layer),
            FusedQKV(_falcon_projection(layer.self_attention.query_key_value), per_head=True),
            _falcon_projection(layer.self_attention.dense),
            PlainMLP(
                _falcon_projection(layer.mlp.dense_h_to_4h),
                _falcon_projection(layer.mlp.dense_4h_to_h),
                _act(layer.mlp.act),
            ),
        )
        for layer in model.transformer.h
    )
    heads, new = config.num_attention_heads, config.new_decoder_architecture
    kv_heads = config.num_kv_heads if new else (1 if config.multi_query else heads)
    eps = config.layer_norm_epsilon
    return LeanStack(
        weights, heads, kv_heads, config.hidden_size // heads, eps, "layer", parallel=new or config.parallel_attn
    )


def _falcon_decoder(model: Any) -> Decoder:
    t = model.transformer
    return Decoder(t.word_embeddings, t.rotary_emb, t.ln_f, model.lm_head)


@dataclass(frozen=True)
class Family:
    stack: Callable[[Any], LeanStack]  # raises _KeepModules where the lean layers would not compute the modules'
    decoder: Callable[[Any], Decoder]


LLAMA = Family(_llama_stack, _llama_decoder)
FAMILIES = {
    "llama": LLAMA,
    "mistral": LLAMA,
    "qwen2": LLAMA,
    "qwen3": LLAMA,
    "qwen3_moe": LLAMA,
    "phi3": LLAMA,
    "gemma": Family(partial(_llama_stack, norm="rms_float32"), _llama_decoder),
    "opt": Family(_opt_stack, _opt_decoder),
    "gpt2": Family(_gpt2_stack, _gpt2_decoder),
    "gpt_neox": Family(_neox_stack, _neox_decoder),
    "falcon": Family(_falcon_stack, _falcon_decoder),
}
# Families whose decoder layers `TreeLM` calls as modules where they are not lean (an AutoTP shard's):
# their layers take the arguments it passes (the cache, the mask, positions and the rotary's cos and sin)
MODULE_LAYERS = frozenset({"llama", "qwen3", "qwen3_moe"})


def lean_stack(model: CausalLM) -> LeanStack | None:
    """The weights of `model`'s decoder layers as the lean layers read them, or None where its layers run
    as transformers' modules (see the module's docstring)."""
    family = FAMILIES.get(model.config.model_type)
    if family is None:
        return None
    try:
        return family.stack(model)
    except _KeepModules:
        return None


def runs_lean(model: CausalLM) -> bool:
    """Whether a `TreeLM` of this loaded model runs its decoder layers as the lean tensor functions
    (`models.lean`) in every pass, eager or fixed-shape. False: transformers' own code runs them (its
    forward over speculab's slot cache and a 4-D mask; a Llama, Qwen3 or Qwen3-MoE shard's decoder
    layers as modules), with its per-module Python in every step: an autoregressive loop on that path
    can be slower than `generate`, which a run should say."""
    return lean_stack(model) is not None


def own_decoder(model: CausalLM, lean: LeanStack | None) -> Decoder | None:
    """The parts `TreeLM` runs around the layers itself: any family's around its lean stack; a Llama's,
    Qwen3's or Qwen3-MoE's around its decoder layers called as modules (`MODULE_LAYERS`). None:
    transformers' forward runs the whole model."""
    config = model.config
    if lean is None and not (config.model_type in MODULE_LAYERS and full_attention(config)):
        return None
    return FAMILIES[config.model_type].decoder(model)
