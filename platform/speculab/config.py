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
    target_path: str | None = None  # local checkpoint dir (relative: from the project root); wins over target_id
    draft_path: str | None = None
    target_id: str | None = None  # Hugging Face hub id, found in the local HF cache (never downloaded)
    draft_id: str | None = None
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
    max_restarts: int = 3  # ray: times a model group is recreated after losing an actor


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
    plan_prompt_tokens: int = 2048  # prompt length the memory plan reserves KV cache for (not enforced)


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
    from huggingface_hub import constants, try_to_load_from_cache

    cached = try_to_load_from_cache(hub_id, "config.json")
    if not isinstance(cached, str):
        raise ValueError(
            f"model.{role}_id={hub_id!r}: not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and "
            f"model.{role}_path is null; download it with `hf download {hub_id}` (gated models need "
            f"`hf auth login` first), or `hf download {hub_id} --local-dir DIR` and set model.{role}_path=DIR"
        )
    return Path(cached).parent


def _model_errors(cfg: Config) -> tuple[list[str], dict[str, Path]]:
    """(errors, checkpoint dir per role found). The draft role's weights are the pair's draft model
    (`model.draft_*`) or, for a drafter with its own checkpoint, `drafter.path`."""
    from speculab.algorithms import DRAFTERS

    model = cfg.model
    errors: list[str] = []
    _choice(errors, "model.backend", model.backend, BACKENDS)
    _choice(errors, "model.dtype", model.dtype, DTYPES)
    _choice(errors, "model.device", model.device, DEVICES)
    own_weights = cfg.drafter.name in DRAFTERS and DRAFTERS[cfg.drafter.name].weights == "drafter.path"
    dirs: dict[str, Path] = {}
    for role in ("target", "draft"):
        try:
            dirs[role] = drafter_dir(cfg.drafter) if role == "draft" and own_weights else checkpoint_dir(model, role)
        except ValueError as err:
            errors.append(str(err))
    vocab = {role: _vocabulary(path) for role, path in dirs.items()}
    if len(vocab) == 2 and vocab["target"] != vocab["draft"]:
        errors.append(
            f"{'drafter.path' if own_weights else 'model.draft_path'}: draft and target vocabularies differ "
            f"(target {vocab['target'][0]} tokens, draft {vocab['draft'][0]}); "
            "speculative decoding needs one shared tokenizer"
        )
    return errors, dirs


def drafter_dir(cfg: DrafterConfig) -> Path:
    """The checkpoint dir of a drafter with its own weights (`drafter.path`, holding block.json)."""
    if not (cfg.path and (resolve_path(cfg.path) / "block.json").is_file()):
        raise ValueError(f"drafter.path={cfg.path!r}: no block drafter there (expected a directory with block.json)")
    return resolve_path(cfg.path)


def _cluster_errors(cfg: Config, dirs: dict[str, Path]) -> list[str]:
    """GPU count, TP divisibility and the memory plan (speculab.models.memory); reads config.json only."""
    from speculab.algorithms import ALGORITHMS
    from speculab.models.memory import (
        DTYPE_BYTES,
        Workload,
        fit_errors,
        plan_memory,
        read_architecture,
        tp_errors,
    )

    c = cfg.cluster
    errors: list[str] = []
    _at_least(errors, "cluster.num_gpus", c.num_gpus, 0)
    _at_least(errors, "cluster.plan_prompt_tokens", c.plan_prompt_tokens, 1)
    if not 0 < c.draft_gpu <= 1:
        errors.append(f"cluster.draft_gpu={c.draft_gpu}: must be in (0, 1] (1: own GPU; < 1: beside a target shard)")
    if c.num_gpus > 0 and c.gpu_memory_gib <= 0:
        errors.append(f"cluster.gpu_memory_gib={c.gpu_memory_gib}: must be > 0 when cluster.num_gpus > 0")
    beside = c.draft_gpu < 1
    if c.num_gpus > 0 and c.tp_size + (0 if beside else 1) > c.num_gpus:
        errors.append(
            f"cluster.tp_size={c.tp_size} target GPUs + {0 if beside else 1} draft GPU > cluster.num_gpus="
            f"{c.num_gpus}; lower cluster.tp_size, set cluster.draft_gpu < 1 (draft beside a target shard), "
            "or use a cluster with more GPUs"
        )
    if len(dirs) < 2 or c.tp_size < 1 or cfg.model.dtype not in DTYPE_BYTES:
        return errors
    try:
        target, draft = read_architecture(dirs["target"]), read_architecture(dirs["draft"])
    except (ValueError, KeyError) as err:
        if c.tp_size == 1 and c.num_gpus == 0:
            return errors  # one CPU process: no split and no GPU memory to plan
        return [
            *errors,
            f"model.name={cfg.model.name!r}: cannot plan tensor parallelism or memory from config.json ({err!r})",
        ]
    errors += tp_errors(target, c.tp_size, f"model {cfg.model.name} (target)")
    if errors or c.num_gpus == 0 or cfg.model.device != "cuda":
        return errors
    a, s = cfg.algorithm, cfg.sampling
    tree_nodes = a.budget + 1 if ALGORITHMS[a.name].tree_builder else a.K * a.L + 1
    work = Workload(s.batch_size, c.plan_prompt_tokens, s.max_new_tokens, tree_nodes, DTYPE_BYTES[cfg.model.dtype])
    return fit_errors(plan_memory(target, draft, work, c.tp_size, beside), c.gpu_memory_gib)


def _vocabulary(path: Path) -> tuple[int, Any]:
    """(vocab_size from config.json, tokenizer.json's vocabulary if present): reads no weights."""
    size = json.loads((path / "config.json").read_text()).get("vocab_size", -1)
    tokenizer = path / "tokenizer.json"
    vocab = json.loads(tokenizer.read_text()).get("model", {}).get("vocab") if tokenizer.is_file() else None
    return size, vocab


BUDGET_RANGE = (16, 1024)


def _algorithm_errors(cfg: Config, dirs: dict[str, Path]) -> list[str]:
    """Algorithm, node rule, drafter and tree settings against the registry (`speculab.algorithms`)."""
    from speculab.algorithms import DRAFTERS, get_algorithm, node_rule_error
    from speculab.drafting.ddtree import TREES

    algorithm, drafter = cfg.algorithm, cfg.drafter
    errors: list[str] = []
    _choice(errors, "drafter.name", drafter.name, tuple(DRAFTERS))
    try:
        spec = get_algorithm(algorithm.name)
    except ValueError as err:
        return [*errors, str(err)]
    if (rule_error := node_rule_error(spec, algorithm.node_rule)) is not None:
        errors.append(rule_error)
    if drafter.name in DRAFTERS and drafter.name not in spec.drafters:
        errors.append(
            f"drafter.name={drafter.name!r}: algorithm={algorithm.name} needs drafter one of {', '.join(spec.drafters)}"
        )
    if spec.tree_builder:
        low, high = BUDGET_RANGE
        if not low <= algorithm.budget <= high:
            errors.append(f"algorithm.budget={algorithm.budget}: must be an integer in {low}..{high}")
        _choice(errors, "algorithm.tree", algorithm.tree, TREES)
    block_json = dirs.get("draft", Path()) / "block.json"
    if block_json.is_file() and (size := json.loads(block_json.read_text())["block_size"]) < algorithm.L:
        errors.append(f"algorithm.L={algorithm.L}: the block drafter drafts at most {size} tokens (1..{size})")
    return errors


def validate(cfg: Config) -> None:
    """Raise ConfigError listing every invalid field; touches no weights and starts nothing."""
    from speculab.data import DATASETS, check_dataset

    errors: list[str] = []
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
    if cfg.runtime.kind == "inline" and cfg.cluster.tp_size > 1:
        errors.append(
            f"cluster.tp_size={cfg.cluster.tp_size}: tensor parallelism needs runtime=ray (inline is one process)"
        )
    _at_least(errors, "runtime.max_restarts", cfg.runtime.max_restarts, 0)
    if cfg.dataset.num_prompts is not None:
        _at_least(errors, "dataset.num_prompts", cfg.dataset.num_prompts, 1)
    if cfg.dataset.name not in DATASETS:
        _choice(errors, "dataset.name", cfg.dataset.name, DATASETS)
    else:
        try:
            check_dataset(cfg.dataset.name, cfg.dataset.path)
        except (ValueError, RuntimeError) as err:
            errors.append(str(err))
    model_errors, dirs = _model_errors(cfg)
    errors += model_errors + _cluster_errors(cfg, dirs) + _algorithm_errors(cfg, dirs)
    if errors:
        raise ConfigError("invalid config:\n  " + "\n  ".join(errors))
