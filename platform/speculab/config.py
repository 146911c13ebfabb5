"""Structured config (the schema behind conf/) and its validation.

Hydra composes YAML from conf/ over these dataclasses, so a typo in a key fails at
composition. `validate` then checks values and the files a run needs, and raises one
`ConfigError` naming every bad field and what it allows, before any actor starts or any
weight loads. Below the CLI, functions take these small dataclasses or plain values.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING

PROJECT_ROOT = Path(__file__).resolve().parents[2]
RUNTIMES = ("inline", "ray")
BACKENDS = ("hf",)
DTYPES = ("float32", "float16", "bfloat16")
DEVICES = ("cpu", "cuda")


@dataclass
class ModelConfig:
    name: str = MISSING
    target_path: str = MISSING  # local checkpoint dir; relative paths are from the project root
    draft_path: str = MISSING
    backend: str = "hf"
    dtype: str = "float32"
    device: str = "cpu"


@dataclass
class AlgorithmConfig:
    name: str = "block"
    K: int = 1  # i.i.d. draft paths per round
    L: int = 4  # draft length
    node_rule: str = "kseq"  # spectr only: per-node rule of the top-down walk
    budget: int = 64  # ddtree only: node budget B (16..1024)
    tree: str = "best_first"  # ddtree only: best_first (DDTree) or chain (argmax per depth, one path)


@dataclass
class DrafterConfig:
    name: str = "iid"  # iid: K sampled paths (path algorithms); ar_marginals, block: per-depth marginals (ddtree)
    path: str | None = None  # block: the block drafter's checkpoint dir


@dataclass
class SamplingConfig:
    temperature: float = 1.0
    top_p: float = 1.0  # draft only
    top_k: int = 0  # draft only; 0 = no limit
    max_new_tokens: int = 64
    seed: int = 0
    batch_size: int = 1  # prompts decoded together per round


@dataclass
class DatasetConfig:
    name: str = "humaneval"
    num_prompts: int | None = 8
    path: str | None = None


@dataclass
class RuntimeConfig:
    kind: str = "ray"  # inline: one process; ray: target and draft in their own actors
    torch_threads: int = 0  # per model process; 0 = all cores


@dataclass
class ClusterConfig:
    name: str = "local"
    address: str | None = None  # None: embedded local Ray; "auto" or ray://host:port: existing cluster
    num_cpus: int | None = None  # embedded cluster size; None = every core
    actor_cpus: float = 1.0  # CPUs each model actor reserves
    tp_size: int = 1  # target tensor-parallel ranks (one GPU each; CPU processes when num_gpus = 0)
    num_gpus: int = 0  # GPUs the cluster offers (0: CPU only)
    gpu_memory_gib: float = 0.0  # memory of one GPU (0 when num_gpus = 0)
    draft_gpu: float = 1.0  # GPU share of the draft actor (< 1: beside a target shard)


@dataclass
class TrackingConfig:
    enabled: bool = True
    uri: str | None = None  # None: sqlite:///<cwd>/mlflow.db
    experiment: str = "speculab"


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
    baseline: bool = True  # also decode autoregressively for speedup_vs_ar


class ConfigError(ValueError):
    """Every invalid field of a config, one per line."""


def resolve_path(path: str) -> Path:
    """Absolute path; relative ones are taken from the project root (where conf/ lives)."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else PROJECT_ROOT / p


def tracking_uri(cfg: TrackingConfig) -> str:
    """The MLflow URI: the configured one, or a SQLite file at an absolute path in the cwd."""
    return cfg.uri or f"sqlite:///{Path.cwd().resolve() / 'mlflow.db'}"


def _choice(errors: list[str], key: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        errors.append(f"{key}={value!r}: must be one of {', '.join(allowed)}")


def _at_least(errors: list[str], key: str, value: int, low: int) -> None:
    if value < low:
        errors.append(f"{key}={value}: must be an integer >= {low}")


def _model_errors(cfg: ModelConfig) -> list[str]:
    errors: list[str] = []
    _choice(errors, "model.backend", cfg.backend, BACKENDS)
    _choice(errors, "model.dtype", cfg.dtype, DTYPES)
    _choice(errors, "model.device", cfg.device, DEVICES)
    vocab = {}
    for key in ("target_path", "draft_path"):
        path = resolve_path(getattr(cfg, key))
        if not (path / "config.json").is_file():
            errors.append(f"model.{key}={str(path)!r}: no checkpoint there (expected a directory with config.json)")
        else:
            vocab[key] = _vocabulary(path)
    if len(vocab) == 2 and vocab["target_path"] != vocab["draft_path"]:
        errors.append(
            "model.draft_path: draft and target vocabularies differ "
            f"(target {vocab['target_path'][0]} tokens, draft {vocab['draft_path'][0]}); "
            "speculative decoding needs one shared tokenizer"
        )
    return errors


def _vocabulary(path: Path) -> tuple[int, Any]:
    """(vocab_size from config.json, tokenizer.json's vocabulary if present): reads no weights."""
    size = json.loads((path / "config.json").read_text()).get("vocab_size", -1)
    tokenizer = path / "tokenizer.json"
    vocab = json.loads(tokenizer.read_text()).get("model", {}).get("vocab") if tokenizer.is_file() else None
    return size, vocab


DRAFTERS = {"iid": "path", "ar_marginals": "ddtree", "block": "ddtree"}  # drafter -> what it drafts for
BUDGET_RANGE = (16, 1024)


def _ddtree_errors(algorithm: AlgorithmConfig, drafter: DrafterConfig) -> list[str]:
    """ddtree needs a marginal drafter and a budget in range; path algorithms need iid paths."""
    from speculab.drafting.ddtree import TREES

    errors: list[str] = []
    _choice(errors, "drafter.name", drafter.name, tuple(DRAFTERS))
    wanted = "ddtree" if algorithm.name == "ddtree" else "path"
    if DRAFTERS.get(drafter.name, wanted) != wanted:
        allowed = ", ".join(name for name, kind in DRAFTERS.items() if kind == wanted)
        errors.append(f"drafter.name={drafter.name!r}: algorithm={algorithm.name} needs drafter one of {allowed}")
    if algorithm.name == "ddtree":
        low, high = BUDGET_RANGE
        if not low <= algorithm.budget <= high:
            errors.append(f"algorithm.budget={algorithm.budget}: must be an integer in {low}..{high}")
        _choice(errors, "algorithm.tree", algorithm.tree, TREES)
    if drafter.name == "block":
        block_json = resolve_path(drafter.path or "") / "block.json"
        if not (drafter.path and block_json.is_file()):
            errors.append(f"drafter.path={drafter.path!r}: no block drafter there (expected a directory with block.json)")
        elif algorithm.L > (size := json.loads(block_json.read_text())["block_size"]):
            errors.append(f"algorithm.L={algorithm.L}: the block drafter drafts at most {size} tokens (1..{size})")
    return errors


def validate(cfg: Config) -> None:
    """Raise ConfigError listing every invalid field; touches no weights and starts nothing."""
    from speculab.data import DATASETS, check_dataset
    from speculab.verify import get_verifier

    errors: list[str] = []
    try:
        if cfg.algorithm.name != "ddtree":  # ddtree is verified by the walk, not a path verifier
            get_verifier(cfg.algorithm.name, cfg.algorithm.node_rule)
    except ValueError as err:
        errors.append(f"{err} (or ddtree)")
    _at_least(errors, "algorithm.K", cfg.algorithm.K, 1)
    _at_least(errors, "algorithm.L", cfg.algorithm.L, 1)
    if cfg.sampling.temperature < 0:
        errors.append(f"sampling.temperature={cfg.sampling.temperature}: must be >= 0 (0 = greedy)")
    if not 0 < cfg.sampling.top_p <= 1:
        errors.append(f"sampling.top_p={cfg.sampling.top_p}: must be in (0, 1]")
    _at_least(errors, "sampling.top_k", cfg.sampling.top_k, 0)
    _at_least(errors, "sampling.max_new_tokens", cfg.sampling.max_new_tokens, 1)
    _at_least(errors, "sampling.batch_size", cfg.sampling.batch_size, 1)
    _choice(errors, "runtime.kind", cfg.runtime.kind, RUNTIMES)
    _at_least(errors, "cluster.tp_size", cfg.cluster.tp_size, 1)
    if cfg.dataset.num_prompts is not None:
        _at_least(errors, "dataset.num_prompts", cfg.dataset.num_prompts, 1)
    if cfg.dataset.name not in DATASETS:
        _choice(errors, "dataset.name", cfg.dataset.name, DATASETS)
    else:
        try:
            check_dataset(cfg.dataset.name, cfg.dataset.path)
        except (ValueError, RuntimeError) as err:
            errors.append(str(err))
    errors += _model_errors(cfg.model) + _ddtree_errors(cfg.algorithm, cfg.drafter)
    if errors:
        raise ConfigError("invalid config:\n  " + "\n  ".join(errors))
