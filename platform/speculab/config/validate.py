"""`validate`: every bad field of a config at once, before any actor starts or any weight loads; and
`config_warnings`, the valid settings a user should hear about before a run starts."""

from __future__ import annotations

import math

from speculab.algorithms import DRAFTERS, get_algorithm
from speculab.config.algorithm import algorithm_errors
from speculab.config.checkpoints import with_draft_length
from speculab.config.cluster import address_errors, cluster_errors, local_cluster_errors, resource_errors
from speculab.config.device import device_errors
from speculab.config.errors import ConfigError, at_least, choice, within
from speculab.config.model import context_errors, drafter_checkpoint_errors, model_errors
from speculab.config.schema import K_RANGE, L_RANGE, LOOPS, RUNTIMES, ClusterConfig, Config
from speculab.config.tracking import tracking_errors
from speculab.data import DATASETS, check_dataset


def validate(cfg: Config) -> None:
    """Raise ConfigError listing every invalid field; touches no weights and starts nothing."""
    cfg = with_draft_length(cfg)
    model, found = model_errors(cfg)
    errors = [
        *_run_errors(cfg),
        *_dataset_errors(cfg),
        *model,
        *device_errors(cfg),
        *context_errors(cfg, found.get("target")),
    ]
    errors += cluster_errors(cfg, found) + algorithm_errors(cfg, found) + drafter_checkpoint_errors(cfg, found)
    errors += tracking_errors(cfg.tracking) + local_cluster_errors(cfg) + address_errors(cfg) + resource_errors(cfg)
    if errors:
        raise ConfigError.listing(errors)


def _run_errors(cfg: Config) -> list[str]:
    """The numbers of a run: draft shape, sampling, runtime, measurement and the UI port."""
    errors: list[str] = []
    s = cfg.sampling
    assert cfg.algorithm.L is not None  # resolved by `with_draft_length`
    within(errors, "algorithm.K", cfg.algorithm.K, K_RANGE)
    within(errors, "algorithm.L", cfg.algorithm.L, L_RANGE)
    if not (math.isfinite(s.temperature) and s.temperature >= 0):
        errors.append(f"sampling.temperature={s.temperature}: must be a finite number >= 0 (0 = greedy)")
    if not 0 < s.top_p <= 1:
        errors.append(f"sampling.top_p={s.top_p}: must be in (0, 1]")
    at_least(errors, "sampling.top_k", s.top_k, 0)
    at_least(errors, "sampling.max_new_tokens", s.max_new_tokens, 1)
    at_least(errors, "sampling.batch_size", s.batch_size, 1)
    at_least(errors, "sampling.seed", s.seed, 0)
    choice(errors, "runtime.kind", cfg.runtime.kind, RUNTIMES)
    choice(errors, "runtime.loop", cfg.runtime.loop, LOOPS)
    at_least(errors, "cluster.tp_size", cfg.cluster.tp_size, 1)
    if cfg.runtime.kind == "inline" and cfg.cluster.tp_size > 1:
        errors.append(
            f"cluster.tp_size={cfg.cluster.tp_size}: tensor parallelism needs runtime=ray (inline is one process)"
        )
    at_least(errors, "runtime.max_restarts", cfg.runtime.max_restarts, 0)
    at_least(errors, "runtime.torch_threads", cfg.runtime.torch_threads, 0)
    for key in ("collective_timeout_s", "placement_timeout_s"):
        if not getattr(cfg.runtime, key) > 0:
            errors.append(f"runtime.{key}={getattr(cfg.runtime, key)}: must be > 0 (seconds)")
    at_least(errors, "measure.repeats", cfg.measure.repeats, 1)
    within(errors, "tracking.ui_port", cfg.tracking.ui_port, (1, 65535))
    return errors


def _dataset_errors(cfg: Config) -> list[str]:
    """A known dataset, a positive prompt count, and (for a file) a file that reads as prompts."""
    errors: list[str] = []
    d = cfg.dataset
    if d.num_prompts is not None:
        at_least(errors, "dataset.num_prompts", d.num_prompts, 1)
    if d.name not in DATASETS:
        choice(errors, "dataset.name", d.name, DATASETS)
        return errors
    try:
        check_dataset(d.name, d.path)
    except (ValueError, RuntimeError) as err:
        errors.append(str(err))
    return errors


def config_warnings(cfg: Config) -> list[str]:
    """Settings that are valid but that a user should hear about before the run starts (printed, not raised)."""
    algorithm = cfg.algorithm
    notes = []
    if not get_algorithm(algorithm.name).lossless(algorithm.K):
        notes.append(f"{algorithm.name} with K={algorithm.K} is not lossless (algorithm.allow_lossy)")
    if cfg.runtime.kind == "inline" and (cfg.cluster.name != ClusterConfig.name or cfg.cluster.address is not None):
        notes.append(
            f"cluster={cfg.cluster.name} (cluster.address={cfg.cluster.address!r}) is not used with runtime=inline: "
            "both models run in this process (runtime=ray to use the cluster)"
        )
    samples_paths = DRAFTERS[cfg.drafter.name].proposes == "paths"
    if algorithm.K > 1 and cfg.sampling.temperature == 0 and samples_paths:
        notes.append(
            f"algorithm.K={algorithm.K} with sampling.temperature=0: i.i.d. drafts at T = 0 are K copies of the "
            "draft's greedy path, so K changes only the cost of scoring them, never what is accepted "
            "(a sweep over K at T = 0 measures the same acceptance K times)"
        )
    return notes
