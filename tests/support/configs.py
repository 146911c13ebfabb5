"""Configs for tests: compose conf/ with overrides, and checkpoints that hold only config files."""

from __future__ import annotations

import json
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import speculab.cli  # noqa: F401  registers the structured schema
from speculab.config import PROJECT_ROOT, Config

CONF = PROJECT_ROOT / "conf"


def fake_checkpoint(path: Path, vocab_size: int, vocab: dict[str, int] | None = None) -> Path:
    """A checkpoint directory with config (and tokenizer) but no weights: validation only reads those."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"vocab_size": vocab_size, "model_type": "llama"}))
    if vocab is not None:
        (path / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab}}))
    return path


def load(overrides: list[str]) -> Config:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return OmegaConf.to_object(compose("config", overrides=overrides))
