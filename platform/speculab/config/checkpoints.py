"""A checkpoint's files as validation reads them, without loading a weight: the checkout's root (where
relative paths start), JSON files read with errors that name them (a file that is not a regular one, a
FIFO say, refused without opening it), the config.json keys the platform reads checked for their type
(`typed_errors`), and `Checkpoint`, a directory a run loads with its parsed config.json. Standard
library only, so that every concern's module can use it."""

from __future__ import annotations

import errno
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[3]  # the checkout: conf/, assets/, jobs/


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


# config.json keys that validation, the memory planner and the loaders read, by what each must be where set
# (null included: transformers fills in a default): positive counts, switches, names
COUNTS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "moe_intermediate_size",
    "ffn_dim",
    "head_dim",
    "word_embed_proj_dim",
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
)
EXPERTS = ("num_experts", "num_local_experts", "num_experts_per_tok")  # 0 in a dense model's config
SWITCHES = ("tie_word_embeddings", "attention_bias", "mlp_bias", "do_layer_norm_before", "use_sliding_window")
NAMES = ("model_type", "hidden_act")


def regular_file(path: Path) -> bool:
    """Whether `path` is a regular file (following links), asked of the file system without opening it: a
    FIFO or a device would block the read, or never end it."""
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def irregular_error(path: Path) -> str | None:
    """The line for a file that exists but is no regular file, or a symbolic link that leads to none; None
    for a regular or an absent one."""
    try:
        mode = path.stat().st_mode
    except OSError as err:
        if err.errno == errno.ELOOP:
            return f"{path} is a loop of symbolic links, not a file; point it at the weights file"
        if path.is_symlink():
            return f"{path} is a symbolic link to {os.readlink(path)}, which does not exist"
        return None
    if stat.S_ISREG(mode):
        return None
    return f"{path} is not a regular file (a directory, a FIFO or a device); refused without opening it"


def typed_errors(path: Path, config: dict[str, Any]) -> list[str]:
    """One line per key of COUNTS, SWITCHES and NAMES in config.json (at `path`) whose value has another type."""
    errors = []
    checks = (
        *((key, "a positive integer", lambda v: _integer(v) and v > 0) for key in COUNTS),
        *((key, "an integer >= 0", lambda v: _integer(v) and v >= 0) for key in EXPERTS),
        *((key, "true or false", lambda v: isinstance(v, bool)) for key in SWITCHES),
        *((key, "a string", lambda v: isinstance(v, str)) for key in NAMES),
    )
    for key, wanted, ok in checks:
        if config.get(key) is not None and not ok(config[key]):
            errors.append(f"{path}: {key}={config[key]!r}: must be {wanted}")
    return errors


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object file read during validation (config.json, tokenizer.json, block.json, an index);
    ValueError naming the file when it is not a regular file, cannot be read, is not JSON or is not an
    object."""
    if (irregular := irregular_error(path)) is not None:
        raise ValueError(irregular)
    try:
        value = json.loads(path.read_text())
    except OSError as err:
        raise ValueError(f"{path} cannot be read ({err.strerror or err})") from None
    except ValueError as err:  # json.JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{path} is not valid JSON ({err})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path} is not a JSON object (found {type(value).__name__})")
    return value
