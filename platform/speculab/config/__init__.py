"""The run's configuration, one concern a module (as vLLM keeps `vllm/config/`):

- `schema`: the dataclasses behind conf/ and the values their fields take;
- `checkpoints`: where the checkpoints are and the draft length a drafter's block implies;
- checks per concern, each returning one line per bad field: `model`, `device`, `cluster`,
  `algorithm`, `tracking`; `validate` runs them all and raises one `ConfigError`;
- `plan`: `resolve(cfg) -> RunPlan`, the validated config with everything derived from it fixed once.

This package reads files (config.json, safetensors headers, the Hugging Face cache) and may probe a
cluster address, but loads no weight and starts nothing.
"""

from speculab.config.checkpoints import (
    PROJECT_ROOT,
    Checkpoint,
    checkpoint_dir,
    locate,
    read_json,
    resolve_path,
    with_draft_length,
)
from speculab.config.device import describe_device, local_gpus, resolve_device
from speculab.config.errors import ConfigError
from speculab.config.model import prompt_length_errors
from speculab.config.plan import RunPlan, passes_on, resolve
from speculab.config.schema import (
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
    unknown_keys,
)
from speculab.config.tracking import tracking_uri
from speculab.config.validate import config_warnings, validate

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
