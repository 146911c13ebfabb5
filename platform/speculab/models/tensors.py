"""A checkpoint's tensors against its config, by name and shape, before any weight loads.

`weight_problems` reads a checkpoint's safetensors headers (names and shapes, no tensor data) and
compares them with the tensors its config's model needs: a Llama's or a Qwen3's from the config alone
(`needed_shapes`: the layout `models.checkpoint_lm` reads, transformers' own, tested against its
model), a DFlash drafter's from its module built on the meta device, any other family's from
transformers' own loading report on the meta device (its key renames and conversions included), which
imports that family's modeling code as loading it would. Each kind of problem is one line naming the
checkpoint or the file and the tensors: stored as integers where the config names no quantization,
missing (an untied head that is not there among them),
shaped otherwise than the config says (a transposed projection, embeddings of other than vocab_size
rows), or held by the file but no tensor of the config's model (the config and the weights disagree).

The weights' values are checked as they load (`models.weights`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from speculab.models.checkpoint_lm import CHECKPOINT_FAMILIES
from speculab.models.dflash_layout import is_dflash
from speculab.models.tp import checkpoint_files
from speculab.models.weights import Shape, Stored, stored_tensors

if TYPE_CHECKING:
    from transformers import PretrainedConfig

# Tensors an older checkpoint saved that no model reads: transformers recomputes the rotary's frequencies.
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
LISTED = 3  # tensors named in a problem's line; the rest are counted


def needed_shapes(config: PretrainedConfig) -> dict[str, Shape]:
    """Every tensor a Llama's or a Qwen3's state dict holds (a tied head is the embeddings'), with its shape."""
    H, V, L = config.hidden_size, config.vocab_size, config.num_hidden_layers
    heads, kv, inner = config.num_attention_heads, config.num_key_value_heads, config.intermediate_size
    d = getattr(config, "head_dim", None) or H // heads
    qwen3 = config.model_type == "qwen3"
    attention_bias, mlp_bias = bool(config.attention_bias), bool(getattr(config, "mlp_bias", False))
    shapes: dict[str, Shape] = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,)}
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (V, H)
    for i in range(L):
        p = f"model.layers.{i}"
        shapes |= {f"{p}.input_layernorm.weight": (H,), f"{p}.post_attention_layernorm.weight": (H,)}
        for name, rows, cols in (("q", heads * d, H), ("k", kv * d, H), ("v", kv * d, H), ("o", H, heads * d)):
            shapes[f"{p}.self_attn.{name}_proj.weight"] = (rows, cols)
            if attention_bias:
                shapes[f"{p}.self_attn.{name}_proj.bias"] = (rows,)
        if qwen3:
            shapes |= {f"{p}.self_attn.q_norm.weight": (d,), f"{p}.self_attn.k_norm.weight": (d,)}
        for name, rows, cols in (("gate", inner, H), ("up", inner, H), ("down", H, inner)):
            shapes[f"{p}.mlp.{name}_proj.weight"] = (rows, cols)
            if mlp_bias:
                shapes[f"{p}.mlp.{name}_proj.bias"] = (rows,)
    return shapes


def _dflash_shapes(config: dict[str, Any]) -> dict[str, Shape]:
    """A DFlash drafter's tensors: its module's state dict, built on the meta device."""
    from transformers import Qwen3Config

    from speculab.models.dflash import DFlashDraft

    with torch.device("meta"):
        module = DFlashDraft(Qwen3Config.from_dict(config))
    return {key: tuple(t.shape) for key, t in module.state_dict().items()}


def listed(names: Iterable[str]) -> str:
    found = sorted(names)
    more = f" and {len(found) - LISTED} more" if len(found) > LISTED else ""
    return ", ".join(found[:LISTED]) + more


def _missing_line(path: Path, missing: set[str], tied: bool) -> str:
    head = (
        "; config.json's tie_word_embeddings=false: the head would be random (save lm_head.weight, or set "
        "tie_word_embeddings=true where the head is the embeddings)"
        if "lm_head.weight" in missing and not tied
        else ""
    )
    return f"{path}: no tensor {listed(missing)} in its weights, which the config's model needs{head}"


def _misshaped_line(path: Path, misshaped: dict[str, tuple[Shape, Shape, str]], vocab: Any) -> str:
    """One line for the tensors whose stored shape (first) is not the config's (second), by name."""
    parts = []
    for name in sorted(misshaped)[:LISTED]:
        stored, needed, file = misshaped[name]
        rows = f" (vocab_size {vocab} rows)" if name.endswith(("embed_tokens.weight", "lm_head.weight")) else ""
        parts.append(f"{file}: {name} is {list(stored)}, config.json needs {list(needed)}{rows}")
    more = f" and {len(misshaped) - LISTED} more" if len(misshaped) > LISTED else ""
    return f"{path}: tensors shaped otherwise than its config.json says: {'; '.join(parts)}{more}"


def _compared(path: Path, needed: dict[str, Shape], stored: dict[str, Stored], config: dict[str, Any]) -> list[str]:
    missing = set(needed) - set(stored)
    misshaped = {k: (stored[k].shape, needed[k], stored[k].file) for k in needed if k in stored}
    misshaped = {k: found for k, found in misshaped.items() if found[0] != found[1]}
    unused = {k for k in set(stored) - set(needed) if not k.endswith(IGNORED_SUFFIXES)}
    unused -= {"lm_head.weight"} if config.get("tie_word_embeddings", True) else set()  # a tied head's copy
    return _lines(path, missing, misshaped, unused, config)


def _lines(
    path: Path,
    missing: set[str],
    misshaped: dict[str, tuple[Shape, Shape, str]],
    unused: set[str],
    config: dict[str, Any],
) -> list[str]:
    problems = [_missing_line(path, missing, config.get("tie_word_embeddings", True) is not False)] if missing else []
    if misshaped:
        problems.append(_misshaped_line(path, misshaped, config.get("vocab_size")))
    if unused:
        kind = config.get("model_type")
        problems.append(
            f"{path}: its weights hold {listed(unused)}, which no tensor of its config's model ({kind}) is: the "
            "config and the weights disagree (a bias, a layer or a head the config leaves out)"
        )
    return problems


def _transformers_report(path: Path, stored: dict[str, Stored], config: dict[str, Any]) -> list[str]:
    """transformers' own loading report for the checkpoint, on the meta device (no tensor data read)."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its report of the same keys would follow ours
    hf_logging.disable_progress_bar()
    try:
        loaded: Any = AutoModelForCausalLM.from_pretrained(  # (model, info) with output_loading_info
            str(path),
            device_map="meta",
            output_loading_info=True,
            ignore_mismatched_sizes=True,
            local_files_only=True,
        )
        info: dict[str, Any] = loaded[1]
    finally:
        hf_logging.set_verbosity(verbosity)
    misshaped = {
        name: (tuple(found), tuple(wanted), stored[name].file if name in stored else "?")
        for name, found, wanted in info.get("mismatched_keys", ())
    }
    return _lines(path, set(info.get("missing_keys", ())), misshaped, set(info.get("unexpected_keys", ())), config)


def integer_line(path: Path, stored: dict[str, Stored], config: dict[str, Any]) -> str | None:
    """The line for weights (`*.weight`) stored as integers (I8, U8, I32, ...) in a checkpoint whose config.json
    names no `quantization_config`: loading would cast them to floats, a model that is not the checkpoint's."""
    if config.get("quantization_config") is not None:
        return None
    # weights alone: a buffer such as GPT-2's causal mask or an old checkpoint's position_ids is integral
    integral = {n: t for n, t in stored.items() if n.endswith(".weight") and not t.dtype.startswith(("F", "BF"))}
    if not integral:
        return None
    first = sorted(integral)[0]
    return (
        f"{path}: tensors stored as integers with no quantization_config in config.json ({integral[first].file}: "
        f"{listed(integral)}, {integral[first].dtype}): loading would cast them to floats, not the model's weights; "
        "save them in a float dtype"
    )


def weight_problems(path: Path, config: dict[str, Any]) -> list[str]:
    """What keeps the checkpoint at `path` (its parsed config.json `config`) from loading the tensors its
    config's model needs, one line a kind; none where its weights are not safetensors (no headers)."""
    try:
        files = checkpoint_files(path)
    except FileNotFoundError:  # a DFlash drafter's *.safetensors of another name, or none (named elsewhere)
        files = sorted(p.name for p in path.glob("*.safetensors"))
    if not files or any(not name.endswith(".safetensors") for name in files):
        return []
    stored = stored_tensors(path, files)
    if integral := integer_line(path, stored, config):
        return [integral]
    if is_dflash(config):
        try:
            needed = _dflash_shapes(config)
        except ValueError:  # a layout the DFlash checks refuse, each in its own line
            return []
        return _compared(path, needed, stored, config)
    if config.get("model_type") in CHECKPOINT_FAMILIES:
        from transformers import AutoConfig

        parsed = AutoConfig.from_pretrained(str(path), local_files_only=True)
        return _compared(path, needed_shapes(parsed), stored, config)
    return _transformers_report(path, stored, config)
