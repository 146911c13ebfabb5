"""A checkpoint's files as validation reads them, without loading a weight: the checkout's root (where
relative paths start), JSON files read with errors that name them, and `Checkpoint`, a directory a run
loads with its parsed config.json. Standard library only, so that every concern's module can use it."""

from __future__ import annotations

import json
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
