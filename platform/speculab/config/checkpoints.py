"""Where a run's checkpoints are and what they say, read without loading a weight: the target's and
the draft role's directories (a local path, or a snapshot in the Hugging Face cache, never
downloaded), their config.json, and the draft length a drafter's own block implies."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from huggingface_hub import constants, try_to_load_from_cache

from speculab.algorithms import DRAFTERS
from speculab.config.schema import PROJECT_ROOT, Config, DrafterConfig, ModelConfig
from speculab.models.dflash_layout import dflash_layout

DEFAULT_L = 8  # algorithm.L where neither the algorithm preset nor the drafter's block sets it


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint dir a run will load, with its parsed config.json."""

    key: str  # the config key it comes from: model.<role>_path, model.<role>_id or drafter.path
    path: Path
    config: dict[str, Any]


def resolve_path(path: str) -> Path:
    """Absolute path; relative ones are taken from the project root (where conf/ lives)."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else PROJECT_ROOT / p


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object file read during validation (config.json, tokenizer.json, block.json);
    ValueError naming the file when it cannot be read, is not JSON or is not an object."""
    try:
        value = json.loads(path.read_text())
    except OSError as err:
        raise ValueError(f"{path} cannot be read ({err.strerror or err})") from None
    except ValueError as err:  # json.JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{path} is not valid JSON ({err})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path} is not a JSON object (found {type(value).__name__})")
    return value


def checkpoint_dir(cfg: ModelConfig, role: str) -> Path:
    """The local directory of the `role` ("target" or "draft") checkpoint, without downloading.

    `model.<role>_path` if set, else the snapshot of `model.<role>_id` in the Hugging Face
    cache (HF_HOME / HF_HUB_CACHE). ValueError naming the keys and how to download when absent.
    """
    path, hub_id = getattr(cfg, f"{role}_path"), getattr(cfg, f"{role}_id")
    if path is not None:
        local = resolve_path(path)
        if not (local / "config.json").is_file():
            raise ValueError(
                f"model.{role}_path={str(local)!r}: no checkpoint there (expected a directory with config.json)"
            )
        return local
    if hub_id is None:
        raise ValueError(f"model.{role}_path and model.{role}_id are both null: set a local checkpoint dir or a hub id")
    cached = try_to_load_from_cache(hub_id, "config.json")
    if not isinstance(cached, str):
        raise ValueError(
            f"model.{role}_id={hub_id!r}: not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and "
            f"model.{role}_path is null; download it with `hf download {hub_id}` (gated models need "
            f"`hf auth login` first), or `hf download {hub_id} --local-dir DIR` and set model.{role}_path=DIR"
        )
    return Path(cached).parent


def own_weights(cfg: Config) -> bool:
    """The draft role loads `drafter.path` (a drafter with its own checkpoint), not the pair's draft."""
    spec = DRAFTERS.get(cfg.drafter.name)
    if spec is None or spec.weights == "model.draft":
        return False
    return spec.weights == "drafter.path" or cfg.drafter.path is not None


def drafter_dir(cfg: DrafterConfig) -> Path:
    """The checkpoint dir of a drafter with its own weights (`drafter.path`, holding its marker file:
    block.json for `parallel`, config.json for `dflash`)."""
    marker = DRAFTERS[cfg.name].marker
    if not (cfg.path and (resolve_path(cfg.path) / marker).is_file()):
        raise ValueError(f"drafter.path={cfg.path!r}: no {cfg.name} drafter there (expected a directory with {marker})")
    return resolve_path(cfg.path)


def locate(cfg: Config, role: str) -> tuple[str, Path]:
    """(config key, dir) of the `role` ("target" or "draft") checkpoint a run loads; ValueError
    naming the key when there is none."""
    if role == "draft" and own_weights(cfg):
        return "drafter.path", drafter_dir(cfg.drafter)
    key = f"model.{role}_path" if getattr(cfg.model, f"{role}_path") is not None else f"model.{role}_id"
    return key, checkpoint_dir(cfg.model, role)


def _block_of(path: Path, block_file: str) -> int | None:
    """The drafts one pass of the drafter saved at `path` makes, from `block_file` there: a DFlash
    config.json's block_size - 1 (its block holds the bonus), a parallel drafter's block.json's
    block_size; None when it cannot be read (validation then names the problem)."""
    try:
        found = read_json(path / block_file)
    except ValueError:
        return None
    if block_file == "block.json":
        size = found.get("block_size")
        return size if isinstance(size, int) else None
    layout = dflash_layout(found)[0]
    return None if layout is None else layout.block_size - 1


def block_length(cfg: Config) -> int | None:
    """The longest draft the configured drafter makes in one pass (`DrafterSpec.block_file`), or None
    for a drafter without a block or a checkpoint that cannot be found."""
    spec = DRAFTERS.get(cfg.drafter.name)
    if spec is None or not spec.block_file:
        return None
    try:
        path = locate(cfg, "draft")[1]
    except ValueError:
        return None
    return _block_of(path, spec.block_file)


def with_draft_length(cfg: Config) -> Config:
    """``cfg`` with `algorithm.L` set: as given, else the drafter's block (`block_length`), else DEFAULT_L.
    What a run records and decodes with; idempotent."""
    if cfg.algorithm.L is not None:
        return cfg
    return replace(cfg, algorithm=replace(cfg.algorithm, L=block_length(cfg) or DEFAULT_L))
