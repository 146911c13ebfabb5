"""Configs for tests: compose conf/ with overrides, and checkpoints that hold only config files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf
from safetensors.torch import save_file

import speculab.cli  # noqa: F401  registers the structured schema
from speculab.config import PROJECT_ROOT, Config, RunPlan, resolve
from speculab.results.point import PointShape

CONF = PROJECT_ROOT / "conf"


def empty_weights(path: Path) -> None:
    """A valid safetensors file holding no tensor: validation sees weights and reads only headers."""
    save_file({}, str(path / "model.safetensors"))


def fake_checkpoint(path: Path, vocab_size: int, vocab: dict[str, int] | None = None, **config: Any) -> Path:
    """A checkpoint directory with config (and tokenizer) and an empty weights file: validation reads
    nothing else. Keyword arguments are further config.json entries (`n_positions=64`)."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"vocab_size": vocab_size, "model_type": "llama", **config}))
    empty_weights(path)
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
    """A point's resolved plan and its shape, what `experiment.decode_point` takes with its tracker."""
    plan = resolve(load(overrides))
    return plan, PointShape.of(plan.cfg)
