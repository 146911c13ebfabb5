"""Where a DFlash checkpoint's config.json keeps its drafting settings, in every published layout.

The DFlash authors' loader reads each setting from `dflash_config` first and from the top level
of config.json second (checkpoints written with transformers 4.x carry `block_size` at the top
level only), with their defaults: `block_size` 16, `target_layer_ids` spread over the target's
layers by `num_target_layers` when neither place lists them. Rotary settings (`rope_theta` or
`rope_parameters`) are transformers' `Qwen3Config`'s business. This module reads no weights and
imports no torch, so configuration checks use it before anything loads.

A DFlash2 drafter (vLLM's `qwen3_dflash2.py` layout) names four more settings in the same places:
`conv_kernel_size` and `conv_group_size` (the dynamic block convolution around each sublayer) and
`selector_rank` and `selector_top_k` (the candidate selector); a config that names any of them names
all four, or it is refused by key rather than read as a DFlash one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_BLOCK_SIZE = 16  # the authors' value when neither dflash_config nor the top level sets it


@dataclass(frozen=True)
class DFlashLayout:
    target_layer_ids: tuple[int, ...]  # target layers whose outputs are the drafter's context features
    block_size: int  # [bonus, mask x (block_size - 1)] per block pass
    mask_token_id: int
    embedding_scale: float = 1.0  # block embeddings times this (authors' input_embedding_scale)
    output_multiplier: float = 1.0  # draft logits times this
    logit_softcap: float | None = None  # cap * tanh(logits / cap), when set and positive
    dflash2: DFlash2Settings | None = None  # the convolution and the selector; None: a DFlash drafter


@dataclass(frozen=True)
class DFlash2Settings:
    conv_taps: int  # conv_kernel_size: positions each convolution mixes (itself and taps - 1 before it)
    conv_group: int  # conv_group_size: channels that share one coefficient correction
    selector_rank: int  # the codebooks' and the hidden projection's width
    selector_top_k: int  # K: candidates kept per block position


DFLASH2_KEYS = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")


def is_dflash2(config: dict[str, Any]) -> bool:
    """A DFlash config.json that names any of DFlash2's settings (in `dflash_config` or at the top level)."""
    return is_dflash(config) and any(draft_value(config, key)[1] is not None for key in DFLASH2_KEYS)


def _dflash2_settings(config: dict[str, Any], errors: list[str]) -> DFlash2Settings | None:
    """DFlash2's four settings, each a positive integer; the group size divides hidden_size and K is at
    most vocab_size (the candidates are distinct tokens)."""
    if not is_dflash2(config):
        return None
    values: dict[str, int] = {}
    for key in DFLASH2_KEYS:
        where, value = draft_value(config, key)
        if not (_is_int(value) and value >= 1):
            errors.append(
                f"{where}={value!r}: must be a positive integer (DFlash2 names all of {', '.join(DFLASH2_KEYS)})"
            )
        else:
            values[key] = value
    hidden, vocab = config.get("hidden_size"), config.get("vocab_size")
    group = values.get("conv_group_size")
    if group is not None and isinstance(hidden, int) and hidden % group:
        errors.append(f"{draft_value(config, 'conv_group_size')[0]}={group}: must divide hidden_size={hidden}")
    top_k = values.get("selector_top_k")
    if top_k is not None and isinstance(vocab, int) and top_k > vocab:
        errors.append(f"{draft_value(config, 'selector_top_k')[0]}={top_k}: must be at most vocab_size={vocab}")
    if len(values) < len(DFLASH2_KEYS):
        return None
    return DFlash2Settings(*(values[key] for key in DFLASH2_KEYS))


def is_dflash(config: dict[str, Any]) -> bool:
    """A config.json that declares a DFlash drafter (a `dflash_config` or the authors' architecture)."""
    return isinstance(config.get("dflash_config"), dict) or "DFlashDraftModel" in (config.get("architectures") or [])


def draft_value(config: dict[str, Any], name: str, default: Any = None) -> tuple[str, Any]:
    """(where it was found, value) of a drafting setting: `dflash_config.<name>`, else `<name>`."""
    spec = config.get("dflash_config") or {}
    if name in spec:
        return f"dflash_config.{name}", spec[name]
    return name, config.get(name, default)


def spread_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """The authors' default feature layers: the middle one for a single draft layer, else evenly
    spaced from layer 1 to layer num_target_layers - 3."""
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    first, last = 1, num_target_layers - 3
    return [round(first + i * (last - first) / (num_draft_layers - 1)) for i in range(num_draft_layers)]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _layer_ids(config: dict[str, Any], errors: list[str]) -> tuple[int, ...]:
    where, ids = draft_value(config, "target_layer_ids")
    if ids is None:
        targets, drafts = config.get("num_target_layers"), config.get("num_hidden_layers")
        if isinstance(targets, int) and isinstance(drafts, int) and drafts >= 1:
            return tuple(spread_layer_ids(targets, drafts))
        errors.append(
            "dflash_config.target_layer_ids is missing, and num_target_layers with num_hidden_layers "
            f"(num_target_layers={targets!r}, num_hidden_layers={drafts!r}) cannot stand in for it"
        )
        return ()
    if not (isinstance(ids, list) and ids and all(_is_int(i) for i in ids)):
        errors.append(f"{where}={ids!r}: must be a non-empty list of target layer ids")
        return ()
    return tuple(ids)


def _layer_errors(config: dict[str, Any]) -> list[str]:
    """DFlash layers attend bidirectionally over the whole context, and run as the lean layers run
    (`models.lean`: bias-free projections, SiLU MLPs); the authors' variants with causal or
    sliding-window layers, or layers the lean ones do not compute, are refused by name rather than
    run as something else."""
    errors = []
    types = config.get("layer_types")
    if types is not None:
        others = [f"layer_types[{i}]={t!r}" for i, t in enumerate(types) if t != "full_attention"]
        errors += [f"{other}: only full_attention layers are supported" for other in others]
    elif config.get("use_sliding_window"):
        errors.append("use_sliding_window=true: sliding-window DFlash layers are not supported")
    if config.get("is_causal"):
        errors.append(f"is_causal={config['is_causal']!r}: DFlash blocks attend bidirectionally; must be false")
    if config.get("attention_bias"):
        errors.append("attention_bias=true: only bias-free projections are supported")
    if config.get("hidden_act", "silu") != "silu":
        errors.append(f"hidden_act={config['hidden_act']!r}: only silu MLPs are supported")
    return errors


def _number(config: dict[str, Any], name: str, default: float | None, errors: list[str]) -> float | None:
    where, value = draft_value(config, name, default)
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return None if value is None else float(value)
    errors.append(f"{where}={value!r}: must be a number")
    return default


def dflash_layout(config: dict[str, Any]) -> tuple[DFlashLayout | None, list[str]]:
    """The drafting settings of a DFlash config.json, or None and one message per key at fault."""
    errors: list[str] = []
    ids = _layer_ids(config, errors)
    size_at, size = draft_value(config, "block_size", DEFAULT_BLOCK_SIZE)
    if not (_is_int(size) and size >= 2):
        errors.append(f"{size_at}={size!r}: must be an integer >= 2 (the bonus and at least one draft)")
    mask_at, mask = draft_value(config, "mask_token_id")
    if not (_is_int(mask) and mask >= 0):
        errors.append(f"{mask_at}={mask!r}: must be the token id the drafter reads as a mask")
    scale = _number(config, "input_embedding_scale", 1.0, errors)
    multiplier = _number(config, "output_multiplier", 1.0, errors)
    softcap = _number(config, "final_logit_softcapping", None, errors)
    dflash2 = _dflash2_settings(config, errors)
    errors += _layer_errors(config)
    if errors:
        return None, errors
    cap = softcap if softcap is not None and softcap > 0 else None
    return DFlashLayout(
        ids, size, mask, 1.0 if scale is None else scale, 1.0 if multiplier is None else multiplier, cap, dflash2
    ), []


def checked_layout(config: dict[str, Any], where: str) -> DFlashLayout:
    """`dflash_layout` or a ValueError naming ``where`` and every key at fault."""
    layout, errors = dflash_layout(config)
    if layout is None:
        raise ValueError(f"{where}: " + "; ".join(errors))
    return layout


def read_layout(path: str | Path) -> DFlashLayout:
    """The drafting settings of the DFlash checkpoint dir ``path``."""
    config = Path(path) / "config.json"
    return checked_layout(json.loads(config.read_text()), str(config))
