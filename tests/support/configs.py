"""Configs for tests: compose conf/ with overrides, and checkpoints that hold only config files."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any, cast

import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

import speculab.launch.cli  # noqa: F401  registers the structured schema
from speculab.config import PROJECT_ROOT, Config, RunPlan, resolve
from speculab.results.point import PointShape

CONF = PROJECT_ROOT / "conf"


SHARD_BYTES = 2**32  # a real checkpoint's shards are a few GB: safetensors maps each file whole to read its header


def needed_tensors(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """The tensors the model of a config.json needs, by name and shape, from its module on the meta device
    (transformers' model; a DFlash drafter's own): what a checkpoint saved from it holds."""
    from transformers import AutoConfig, AutoModelForCausalLM, Qwen3Config

    from speculab.models.dflash import DFlashDraft
    from speculab.models.dflash_layout import is_dflash

    with torch.device("meta"):
        if is_dflash(config):
            module: torch.nn.Module = DFlashDraft(Qwen3Config.from_dict(config))
        else:
            module = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
    kept = dict(module.named_parameters())  # a tied head once, under the embeddings' name
    return {name: tuple(t.shape) for name, t in module.state_dict().items() if name in kept}


def header_weights(path: Path) -> None:
    """Weights for the config.json in `path` that are headers alone: every tensor its model needs, in sparse
    safetensors shards with an index (no data written, none read), so that validation, which reads only
    headers, sees a whole checkpoint of any size."""
    config = json.loads((path / "config.json").read_text())
    shards: list[dict[str, tuple[int, ...]]] = [{}]
    filled = 0
    for name, shape in sorted(needed_tensors(config).items()):
        size = 2 * math.prod(shape)  # bfloat16
        if shards[-1] and filled + size > SHARD_BYTES:
            shards.append({})
            filled = 0
        shards[-1][name], filled = shape, filled + size
    weight_map, total = {}, 0
    for number, shard in enumerate(shards, 1):
        file, header, offset = f"model-{number:05d}-of-{len(shards):05d}.safetensors", {}, 0
        for name, shape in shard.items():
            size = 2 * math.prod(shape)
            header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
            offset, weight_map[name] = offset + size, file
        raw = json.dumps(header).encode()
        raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned
        with open(path / file, "wb") as out:
            out.write(struct.pack("<Q", len(raw)) + raw)
            out.truncate(8 + len(raw) + offset)  # a hole: the file has its size and holds nothing
        total += offset
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (path / "model.safetensors.index.json").write_text(json.dumps(index))


def fake_checkpoint(path: Path, vocab_size: int, vocab: dict[str, int] | None = None, **config: Any) -> Path:
    """A checkpoint directory with config (and tokenizer) and weights that are headers alone
    (`header_weights`): validation reads nothing else. Keyword arguments are further config.json entries
    (`n_positions=64`); the model is a small Llama unless they say otherwise."""
    path.mkdir(parents=True)
    small = {"hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2}
    entries = {"vocab_size": vocab_size, "model_type": "llama", **small, **config}
    (path / "config.json").write_text(json.dumps(entries))
    header_weights(path)
    if vocab is not None:
        (path / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab}}))
    return path


def compose_config(overrides: list[str]) -> DictConfig:
    """The composed DictConfig, as the CLI gets it (keys added with `+` still there)."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=overrides)


def load(overrides: list[str]) -> Config:
    return cast(Config, OmegaConf.to_object(compose_config(overrides)))


def plan_and_shape(overrides: list[str]) -> tuple[RunPlan, PointShape]:
    """A point's resolved plan and its shape, what `point.experiment.decode_point` takes with its tracker."""
    plan = resolve(load(overrides))
    return plan, PointShape.of(plan.cfg)
