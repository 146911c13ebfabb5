"""A Llama or Qwen3 checkpoint read straight into plain torch modules, without transformers' model classes.

Importing a transformers model class (its `modeling_utils`) pulls in torch's dynamo, its distributed
tensors and SciPy: about 2.4 s of a run's start on a 2-core machine, most of the smallest run's. Where
every layer of a checkpoint runs lean anyway (`models.families`: full attention, whole weights, one
process), nothing of that code runs: `TreeLM` reads the weights into the lean layers and runs the
parts around them itself. So here the checkpoint's tensors (safetensors, sharded or not) go into a
`CheckpointLM`: torch modules under transformers' own attribute names and state-dict keys
(`model.layers.0.self_attn.q_proj`, `model.norm`, `lm_head`, ...), which `models.families` reads as
it reads a transformers model; its norms and rotary embedding compute what transformers' do
(`lean.rms_norm`; cos and sin of positions times `inv_freq`, from transformers' rope functions).
`generate` (the `baseline_hf` reference) needs transformers' model: `transformers_twin` builds it
around the same tensors (`TreeLM.model`, on first use).

A checkpoint that is anything else (another family, an activation other than SiLU, a rope whose
frequencies change with the length, a sliding window, a tensor left that this module does not read)
returns None from `checkpoint_lm`, and transformers loads it (`models.hf.load_causal_lm`). Validation
has checked its tensors' names and shapes against its config first (`models.tensors`); its weights'
values are checked as they load (`weights.refuse_non_finite`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_file
from torch import nn

from speculab.models.families import full_attention
from speculab.models.lean import rms_norm
from speculab.models.tp import checkpoint_files
from speculab.models.weights import refuse_non_finite, stored_tensors

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel

CHECKPOINT_FAMILIES = frozenset({"llama", "qwen3"})  # by `model_type`: the families read here
STATIC_ROPES = frozenset({"default", "linear", "llama3", "yarn"})  # whose frequencies do not change with length


class RMSNorm(nn.Module):
    """What Llama's and Qwen3's RMSNorm compute (`lean.rms_norm`), over the checkpoint's weight."""

    def __init__(self, weight: torch.Tensor, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.variance_epsilon)


class Rotary(nn.Module):
    """cos and sin [B, N, head_dim] of positions [B, N]: each position times `inv_freq` (float32, as
    transformers computes them), both halves, scaled by the rope's attention factor, in x's dtype."""

    inv_freq: torch.Tensor

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__()
        inv_freq, self.attention_scaling = rope_frequencies(config)
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # not a checkpoint tensor

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
        angles = torch.cat((freqs, freqs), dim=-1)
        return (angles.cos() * self.attention_scaling).to(x.dtype), (angles.sin() * self.attention_scaling).to(x.dtype)


def rope_frequencies(config: PretrainedConfig) -> tuple[torch.Tensor, float]:
    """(inv_freq [head_dim / 2] float32, attention factor): transformers' rope function for the config's
    rope type, or for the default rope base^(-2i / d)."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    rope = config.rope_parameters
    if rope["rope_type"] != "default":
        inv_freq, factor = ROPE_INIT_FUNCTIONS[rope["rope_type"]](config)
        return inv_freq.float(), float(factor)
    dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 1.0 / (rope["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)), 1.0


class Weights:
    """The checkpoint's tensors by state-dict key, in the run's dtype, taken once each."""

    def __init__(self, tensors: dict[str, torch.Tensor], dtype: torch.dtype) -> None:
        self.tensors, self.dtype = tensors, dtype

    def take(self, key: str) -> torch.Tensor:
        return self.tensors.pop(key).to(self.dtype)

    def linear(self, name: str) -> nn.Linear:
        """`name`.weight [out, in] (and `name`.bias where the checkpoint has one) as an `nn.Linear`."""
        weight = self.take(f"{name}.weight")
        bias = self.take(f"{name}.bias") if f"{name}.bias" in self.tensors else None
        layer = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device="meta")
        layer.weight = nn.Parameter(weight, requires_grad=False)
        if bias is not None:
            layer.bias = nn.Parameter(bias, requires_grad=False)
        return layer

    def norm(self, name: str, eps: float) -> RMSNorm:
        return RMSNorm(self.take(f"{name}.weight"), eps)


def _attention(w: Weights, prefix: str, eps: float, head_norms: bool) -> nn.Module:
    attention = nn.Module()
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        setattr(attention, name, w.linear(f"{prefix}.{name}"))
    if head_norms:  # Qwen3's per-head RMSNorm of queries and keys
        attention.q_norm, attention.k_norm = w.norm(f"{prefix}.q_norm", eps), w.norm(f"{prefix}.k_norm", eps)
    return attention


def _layer(w: Weights, i: int, config: PretrainedConfig) -> nn.Module:
    prefix, eps = f"model.layers.{i}", config.rms_norm_eps
    layer, mlp = nn.Module(), nn.Module()
    layer.input_layernorm = w.norm(f"{prefix}.input_layernorm", eps)
    layer.post_attention_layernorm = w.norm(f"{prefix}.post_attention_layernorm", eps)
    layer.self_attn = _attention(w, f"{prefix}.self_attn", eps, config.model_type == "qwen3")
    for name in ("gate_proj", "up_proj", "down_proj"):
        setattr(mlp, name, w.linear(f"{prefix}.mlp.{name}"))
    mlp.act_fn = nn.SiLU()
    layer.mlp = mlp
    return layer


class CheckpointLM(nn.Module):
    """A causal LM's weights under transformers' names, for `TreeLM` (which runs its layers lean): `config`,
    `model.embed_tokens`, `model.layers`, `model.norm`, `model.rotary_emb` and `lm_head`."""

    model: Any  # the decoder's body, read by name as transformers' (`models.families`)

    def __init__(self, config: PretrainedConfig, w: Weights, path: Path) -> None:
        super().__init__()
        self.config, self.path = config, path
        body = nn.Module()
        body.embed_tokens = embed = nn.Embedding.from_pretrained(w.take("model.embed_tokens.weight"), freeze=True)
        body.layers = nn.ModuleList(_layer(w, i, config) for i in range(config.num_hidden_layers))
        body.norm = w.norm("model.norm", config.rms_norm_eps)
        body.rotary_emb = Rotary(config)
        self.model = body
        if not config.tie_word_embeddings:
            self.lm_head = w.linear("lm_head")
        else:  # a tied head is the embeddings' own tensor (a saved copy is not read), as in transformers
            w.tensors.pop("lm_head.weight", None)
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False, device="meta")
            self.lm_head.weight = embed.weight


def _readable(config: PretrainedConfig) -> bool:
    return (
        config.model_type in CHECKPOINT_FAMILIES
        and config.hidden_act == "silu"
        and config.rope_parameters["rope_type"] in STATIC_ROPES  # a Llama's or Qwen3's config has one in 5.x
        and full_attention(config)
    )


def _shapes(path: Path, files: list[str]) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint as a meta tensor of its shape, from the files' headers (no data read)."""
    return {key: torch.empty(found.shape, device="meta") for key, found in stored_tensors(path, files).items()}


def _tensors(files: list[Path], device: str) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint on `device`."""
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        tensors |= load_file(file, device=device)
    return tensors


def _built(config: PretrainedConfig, weights: Weights, path: Path) -> CheckpointLM | None:
    """The checkpoint's `CheckpointLM`, or None where a tensor its family has is missing (transformers then says
    which) or one is left that this module does not know (transformers' class uses it)."""
    try:
        model = CheckpointLM(config, weights, path)
    except KeyError:
        return None
    return None if weights.tensors else model


def checkpoint_lm(path: str | Path, dtype: str = "float32", device: str = "cpu") -> CheckpointLM | None:
    """The checkpoint at `path` as a `CheckpointLM` on `device`, or None where it is not one this module
    reads (the module's docstring); transformers then loads it. Its tensor names and shapes are checked
    first, from the files' headers, so a checkpoint left to transformers is read once, by transformers."""
    from transformers import AutoConfig

    path = Path(path)
    if not (path / "model.safetensors").is_file() and not (path / "model.safetensors.index.json").is_file():
        return None
    config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    names, run_dtype = checkpoint_files(path), getattr(torch, dtype)
    if any(not name.endswith(".safetensors") for name in names):  # shards of pytorch_model.bin: transformers reads them
        return None
    if not _readable(config) or _built(config, Weights(_shapes(path, names), run_dtype), path) is None:
        return None
    model = _built(config, Weights(_tensors([path / name for name in names], device), run_dtype), path)
    assert model is not None, "the tensors the headers named"
    refuse_non_finite(path, model.named_parameters())
    return model.to(device).eval()  # the rotary's inv_freq, made on the host


def transformers_twin(model: CheckpointLM) -> PreTrainedModel:
    """transformers' model of `model`'s checkpoint over the same tensors (no copy), for `generate`."""
    from transformers import AutoModelForCausalLM, GenerationConfig

    from speculab.models.rotary import recreate_rotary_buffers

    weight = model.lm_head.weight
    with torch.device("meta"):
        twin = AutoModelForCausalLM.from_config(model.config, dtype=weight.dtype, attn_implementation="sdpa")
    twin.load_state_dict(model.state_dict(), assign=True)
    twin.tie_weights()
    recreate_rotary_buffers(twin, weight.device)
    if (model.path / "generation_config.json").is_file():
        twin.generation_config = GenerationConfig.from_pretrained(str(model.path))
    return twin.eval()
