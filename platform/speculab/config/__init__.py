"""The run's configuration, one concern a module (as vLLM keeps `vllm/config/`):

- `schema`: the dataclasses behind conf/ and the values their fields take;
- `checkpoints`: where the checkpoints are and the draft length a drafter's block implies;
- checks per concern, each returning one line per bad field: `model`, `device`, `cluster`,
  `algorithm`, `tracking`; `validate` runs them all and raises one `ConfigError`;
- `plan`: `resolve(cfg) -> RunPlan`, the validated config with everything derived from it fixed once.

This package reads files (config.json, safetensors headers, the Hugging Face cache) and may probe a
cluster address, but loads no weight and starts nothing. The schema, the errors and the tracking
URI import only OmegaConf; the names of the other modules are imported when first used (PEP 562),
because they import torch and transformers, which `speculab --help` and a refused key do not need.
"""

from __future__ import annotations

import sys
from importlib import import_module
from types import ModuleType
from typing import TYPE_CHECKING, Any

from speculab.config.errors import ConfigError
from speculab.config.schema import (
    PROJECT_ROOT,
    AlgorithmConfig,
    ClusterConfig,
    Config,
    DatasetConfig,
    DrafterConfig,
    MeasureConfig,
    ModelConfig,
    RuntimeConfig,
    SamplingConfig,
    TrackingConfig,
    loop_host,
    override_errors,
    unknown_keys,
)
from speculab.config.tracking import tracking_uri

if TYPE_CHECKING:
    from speculab.config.checkpoints import (
        Checkpoint,
        checkpoint_dir,
        locate,
        read_json,
        resolve_path,
        with_draft_length,
    )
    from speculab.config.device import describe_device, local_gpus, resolve_device
    from speculab.config.model import prompt_length_errors
    from speculab.config.plan import RunPlan, passes_on, resolve
    from speculab.config.validate import config_warnings, validate

LAZY = {  # name -> the module of this package that defines it, imported on first use
    **dict.fromkeys(
        ("Checkpoint", "checkpoint_dir", "locate", "read_json", "resolve_path", "with_draft_length"), "checkpoints"
    ),
    **dict.fromkeys(("describe_device", "local_gpus", "resolve_device"), "device"),
    **dict.fromkeys(("prompt_length_errors",), "model"),
    **dict.fromkeys(("RunPlan", "passes_on", "resolve"), "plan"),
    **dict.fromkeys(("config_warnings", "validate"), "validate"),
}


def __getattr__(name: str) -> Any:
    if name not in LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = globals()[name] = getattr(import_module(f"{__name__}.{LAZY[name]}"), name)
    return value


class Package(ModuleType):
    """This package, keeping `validate` the function: Python binds a submodule on its package once it
    loads, and the module `config.validate` now loads after this file (which used to rebind the name)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if not (name in LAZY and isinstance(value, ModuleType)):
            super().__setattr__(name, value)


sys.modules[__name__].__class__ = Package


__all__ = [
    "PROJECT_ROOT",
    "AlgorithmConfig",
    "Checkpoint",
    "ClusterConfig",
    "Config",
    "ConfigError",
    "DatasetConfig",
    "DrafterConfig",
    "MeasureConfig",
    "ModelConfig",
    "RunPlan",
    "RuntimeConfig",
    "SamplingConfig",
    "TrackingConfig",
    "checkpoint_dir",
    "config_warnings",
    "describe_device",
    "local_gpus",
    "locate",
    "loop_host",
    "override_errors",
    "passes_on",
    "prompt_length_errors",
    "read_json",
    "resolve",
    "resolve_device",
    "resolve_path",
    "tracking_uri",
    "unknown_keys",
    "validate",
    "with_draft_length",
]
