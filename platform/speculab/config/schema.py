"""The root of the structured config, `Config`, and the refusal of keys it lacks.

Hydra composes YAML from conf/ over `Config`, whose groups are the dataclasses of the concern modules
(`config.model`, `config.algorithm`, `config.sampling`, `config.dataset`, `config.runtime`,
`config.cluster`, `config.tracking`, `config.report`, `config.answer`), each beside its checks; so a
typo in a key fails at composition, and a key added with `+key=...` is refused by `unknown_keys`. Those
modules import torch only inside their checks, so this one loads without it (`speculab --help`, a
refused key).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf

from speculab.config.algorithm import AlgorithmConfig, DrafterConfig
from speculab.config.answer import SweepConfig
from speculab.config.cluster import ClusterConfig
from speculab.config.dataset import DatasetConfig
from speculab.config.model import ModelConfig
from speculab.config.report import ReportConfig
from speculab.config.runtime import RuntimeConfig
from speculab.config.sampling import MeasureConfig, SamplingConfig
from speculab.config.tracking import TrackingConfig


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    drafter: DrafterConfig = field(default_factory=DrafterConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    report: ReportConfig = field(default_factory=ReportConfig)  # how speculab-report lays out a preset's runs
    sweep: SweepConfig = field(default_factory=SweepConfig)  # what a sweep's answer compares besides its ranking
    baseline: bool = True  # also decode autoregressively with the engine, for speedup_vs_ar
    baseline_hf: bool = True  # also run transformers' generate on the same target and prompts, for speedup_vs_hf
    resume: bool = False  # skip points whose run already FINISHED (same point id, same experiment)


# What changes no token a point decodes: its identity (`tracking.resume.point_id`) leaves out where it is
# logged, `resume`, the report's layout and what its sweep compares; its logged params leave out the layout only
# (tables, not values).
NOT_IDENTITY = ("tracking", "resume", "report", "sweep")
NOT_PARAMS = ("report",)


def unknown_keys(cfg: DictConfig) -> list[str]:
    """One line per key of the composed config that `Config` lacks (`+foo=1`, `+algorithm.foo=1`),
    naming the keys its node takes; `hydra`'s own node is ignored. Empty when every key is known."""
    tree = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(tree, dict)
    tree.pop("hydra", None)
    return _unknown_keys(tree, Config(), "")


def _unknown_keys(tree: dict[Any, Any], schema: Any, prefix: str) -> list[str]:
    known = [f.name for f in fields(schema)]
    errors: list[str] = []
    for key, value in tree.items():
        if key not in known:
            errors.append(unknown_key(prefix, key, known))
        elif isinstance(value, dict) and is_dataclass(child := getattr(schema, key)):
            errors += _unknown_keys(value, child, f"{prefix}{key}.")
    return errors


def override_errors(overrides: list[str], groups: list[str]) -> list[str]:
    """One line per command-line override `key=value` whose key `Config` lacks, checked before Hydra
    composes: Hydra's own message for `algoritm.K=2` proposes appending it (`+algoritm.K=2`) where the
    user meant `algorithm.K`. `groups` (conf/'s folders: `experiment=...`) are top-level keys too;
    `+`/`++`/`~`, `hydra.`, `hydra/...` (its own groups: `hydra/sweeper=race`) and `group@package` overrides are
    Hydra's to check."""
    keys = [key for key, equals, _ in (arg.partition("=") for arg in overrides) if equals]
    plain = [key for key in keys if key[:1] not in ("", "+", "~", "-") and "@" not in key]
    ours = [key for key in plain if key.split(".")[0] != "hydra" and not key.startswith("hydra/")]  # Hydra's own
    lines = [_unknown_path(key.split("."), Config(), "", groups) for key in ours]
    return [line for line in lines if line]


def _unknown_path(parts: list[str], schema: Any, prefix: str, extra: list[str]) -> str | None:
    """The error line for dotted key `parts` under `schema`, None when it names a key (or a leaf's inside,
    which Hydra refuses with its own message)."""
    head, *rest = parts
    known = [f.name for f in fields(schema)] + [name for name in extra if not hasattr(schema, name)]
    if head not in known:
        return unknown_key(prefix, head, known, rest)
    child = getattr(schema, head, None)
    return _unknown_path(rest, child, f"{prefix}{head}.", []) if rest and is_dataclass(child) else None


def unknown_key(prefix: str, key: str, known: list[str], rest: list[str] | None = None) -> str:
    """`prefix + key` is not among `known` (its node's keys; `rest` the keys the user wrote below it): the
    key it resembles if one does, else every key the node takes."""
    tail = "".join(f".{part}" for part in rest or [])
    close = difflib.get_close_matches(key, known, n=1)
    takes = f"{prefix[:-1]} takes" if prefix else "top-level keys are"
    hint = f"did you mean {prefix}{close[0]}{tail}?" if close else f"{takes} {', '.join(known)}"
    return f"{prefix}{key}{tail}: unknown key; {hint}"


def job_config(config: DictConfig) -> Config:
    """The `Config` of a Hydra config (its `hydra` node left out)."""
    job = OmegaConf.masked_copy(config, [str(key) for key in config if key != "hydra"])
    return cast(Config, OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(Config), job)))
