"""`validate`: every bad field of a config at once, before any actor starts or any weight loads, from
the checks of each concern's module; and `config_warnings`, the valid settings a user should hear
about before a run starts."""

from __future__ import annotations

import math
from dataclasses import fields, is_dataclass, replace
from pathlib import Path

from speculab.config.algorithm import DEFAULT_L, algorithm_errors, budget_error, length_error
from speculab.config.attach import address_errors
from speculab.config.checkpoints import Checkpoint
from speculab.config.cluster import ClusterConfig, device_errors, local_cluster_errors, resolve_device
from speculab.config.cluster_plan import ClusterPlan, cluster_errors
from speculab.config.dataset import dataset_errors
from speculab.config.drafter_checkpoint import block_length, drafter_checkpoint_errors
from speculab.config.errors import ConfigError
from speculab.config.model import context_errors, locate_roles, model_errors, pass_errors
from speculab.config.nodes import resource_errors
from speculab.config.replicas import replica_errors
from speculab.config.report import report_errors
from speculab.config.runtime import runtime_errors
from speculab.config.sampling import sampling_errors
from speculab.config.schema import Config
from speculab.config.tracking import resume_errors, tracking_errors


def checked(cfg: Config) -> tuple[Config, dict[str, Checkpoint], ClusterPlan]:
    """`cfg` with algorithm.L set, the checkpoint of each role (config key, dir, config.json) and what the
    cluster's checks worked out (where the draft lives, the TP backend, the memory plan), each found once
    for the checks and the run's plan to share; ConfigError listing every invalid field. Touches no
    weights and starts nothing."""
    missing, located = locate_roles(cfg)
    draft = located.get("draft")
    cfg = with_draft_length(cfg, None if draft is None else draft[1])
    if (error := budget_error(cfg.algorithm.budget)) is not None:  # the memory plan reads it as a number
        raise ConfigError.listing([error])
    model, found = model_errors(cfg, located)
    cluster = ClusterPlan(cfg, found)
    errors = [
        *algorithm_errors(cfg, found),
        *sampling_errors(cfg.sampling, cfg.measure),
        *runtime_errors(cfg.runtime),
        *dataset_errors(cfg.dataset),
        *model,
        *missing,
        *(device := device_errors(cfg)),
        *([] if device else pass_errors(cfg.model, resolve_device(cfg, cfg.model.device))),
        *finite_errors(cfg),
        *context_errors(cfg, found.get("target")),
        *cluster_errors(cfg, found, cluster),
        *drafter_checkpoint_errors(cfg, found),
        *tracking_errors(cfg.tracking),
        *resume_errors(cfg.resume, cfg.tracking),
        *report_errors(cfg.report),
        *local_cluster_errors(cfg),
        *replica_errors(cfg),
        *address_errors(cfg),
        *resource_errors(cfg),
    ]
    if errors:
        raise ConfigError.listing(errors)
    return cfg, found, cluster


def finite_errors(node: object, at: str = "") -> list[str]:
    """A line per number field of the config tree that is NaN or infinite (what no range check catches:
    every comparison with NaN is false); overrides are refused so earlier (`config.overrides`)."""
    errors = []
    for field in fields(node):  # type: ignore[arg-type]  # a dataclass of the schema
        value, key = getattr(node, field.name), f"{at}{field.name}"
        if is_dataclass(value):
            errors += finite_errors(value, f"{key}.")
        elif isinstance(value, float) and not math.isfinite(value):
            errors.append(f"{key}={value}: must be a finite number")
    return errors


def validate(cfg: Config) -> None:
    """Raise ConfigError listing every invalid field; touches no weights and starts nothing."""
    checked(cfg)


def with_draft_length(cfg: Config, draft_dir: Path | None) -> Config:
    """``cfg`` with `algorithm.L` set: as given (an integer or auto), else the drafter's block (`block_length`,
    read from `draft_dir`, the draft role's checkpoint), else DEFAULT_L. What a run records and decodes with.
    ConfigError for an L of neither kind: every other check reads it as one."""
    if (error := length_error(cfg.algorithm.L)) is not None:
        raise ConfigError.listing([error])
    if cfg.algorithm.L is not None:
        return cfg
    return replace(cfg, algorithm=replace(cfg.algorithm, L=block_length(cfg.drafter, draft_dir) or DEFAULT_L))


def config_warnings(cfg: Config) -> list[str]:
    """Settings that are valid but that a user should hear about before the run starts (printed, not raised)."""
    from speculab.registry import DRAFTERS, get_algorithm

    algorithm = cfg.algorithm
    notes = []
    if not get_algorithm(algorithm.name).lossless(algorithm.K):
        notes.append(f"{algorithm.name} with K={algorithm.K} is not lossless (algorithm.allow_lossy)")
    if cfg.runtime.kind == "inline" and (cfg.cluster.name != ClusterConfig.name or cfg.cluster.address is not None):
        notes.append(
            f"cluster={cfg.cluster.name} (cluster.address={cfg.cluster.address!r}) is not used with runtime=inline: "
            "both models run in this process (runtime=ray to use the cluster)"
        )
    samples_paths = DRAFTERS[cfg.drafter.name].proposes == "paths" or DRAFTERS[cfg.drafter.name].selector
    if algorithm.K > 1 and cfg.sampling.temperature == 0 and samples_paths:
        notes.append(
            f"algorithm.K={algorithm.K} with sampling.temperature=0: i.i.d. drafts at T = 0 are K copies of the "
            "draft's greedy path, so K changes only the cost of scoring them, never what is accepted "
            "(a sweep over K at T = 0 measures the same acceptance K times)"
        )
    return notes
