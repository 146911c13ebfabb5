"""The run's configuration, one concern a module (as vLLM keeps `vllm/config/`): each module holds its
concern's dataclass, the values its fields take and its checks, which return one line per bad field.

- `model`: the model pair and where its checkpoints are (`locate`), the draft length a drafter's block
  implies, and the checks of those checkpoints;
- `algorithm`: the algorithm and the drafter, against the registry; `sampling`: sampling and
  measurement; `dataset`: the prompts; `runtime`: in-process or Ray, and where the loop runs
  (`loop_host`); `cluster`: where the models run (the cluster, the `Placement` of the model groups,
  each model's device, where the draft lives, the memory footprint); `nodes`: the cluster's address and
  the custom resources that pin groups to nodes; `tracking`: the MLflow store; `report`: a preset's
  report layout;
- `checkpoints`: the checkout's root and a checkpoint's files; `errors`: `ConfigError` and the
  small checks the concerns share;
- `schema`: the root `Config` over the concerns' dataclasses, and the refusal of unknown keys;
- `checks`: `validate`, every concern's checks at once; `plan`: `resolve(cfg) -> RunPlan`, the
  validated config with everything derived from it fixed once.

A concern's checks read the sections of the config they need through a `Protocol` (`ModelView`,
`ClusterView`...), which `Config` satisfies: the root is built from the concerns' dataclasses, so a
concern's module cannot import it. This package reads files (config.json, safetensors headers, the
Hugging Face cache) and may probe a cluster address, but loads no weight and starts nothing. It
imports torch, transformers and the algorithm registry only inside the functions that use them, so
that `speculab --help` and a refused key answer without them.
"""

from __future__ import annotations

from speculab.config.algorithm import AlgorithmConfig, DrafterConfig
from speculab.config.checkpoints import PROJECT_ROOT, Checkpoint, read_json, resolve_path
from speculab.config.checks import config_warnings, validate
from speculab.config.cluster import ClusterConfig, describe_device, local_gpus, resolve_device
from speculab.config.dataset import DatasetConfig
from speculab.config.errors import ConfigError
from speculab.config.model import ModelConfig, checkpoint_dir, locate, prompt_length_errors
from speculab.config.plan import RunPlan, passes_on, plan_lines, resolve
from speculab.config.runtime import RuntimeConfig, loop_host
from speculab.config.sampling import MeasureConfig, SamplingConfig
from speculab.config.schema import NOT_IDENTITY, NOT_PARAMS, Config, override_errors, unknown_keys
from speculab.config.tracking import TrackingConfig, tracking_uri

__all__ = [
    "NOT_IDENTITY",
    "NOT_PARAMS",
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
    "plan_lines",
    "prompt_length_errors",
    "read_json",
    "resolve",
    "resolve_device",
    "resolve_path",
    "tracking_uri",
    "unknown_keys",
    "validate",
]
