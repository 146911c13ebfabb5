"""Structured config (the schema behind conf/) and its validation.

Hydra composes YAML from conf/ over these dataclasses, so a typo in a key fails at
composition; a key added with `+key=...` is refused by `unknown_keys`. `validate` then checks
values and the files a run needs (config.json, tokenizer.json, block.json, a DFlash drafter's
`dflash_config` against its target, and the safetensors headers, never tensor data), and
raises one `ConfigError` naming every bad field and what it allows, before any actor starts
or any weight loads. Below the CLI, functions take these small
dataclasses or plain values.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from omegaconf import MISSING, DictConfig, OmegaConf

PROJECT_ROOT = Path(__file__).resolve().parents[2]
RUNTIMES = ("inline", "ray")
# runtime.loop: where the decode loop runs on Ray. target: in the target's actor, the draft in the same
# process (no Ray call inside a round); driver: in this process, the draft in its own actor; auto: target
# where the target is one actor (cluster.tp_size = 1), else driver.
LOOPS = ("auto", "target", "driver")
BACKENDS = ("hf",)
DTYPES = ("float32", "float16", "bfloat16")
DEVICES = ("cpu", "cuda", "cuda:N", "auto")  # auto: cuda where the models run has a GPU, else cpu
CUDA_INDEX = re.compile(r"cuda:(\d+)")
K_RANGE = (1, 64)  # algorithm.K: i.i.d. draft paths
L_RANGE = (1, 128)  # algorithm.L: draft length
BUDGET_RANGE = (16, 1024)  # algorithm.budget: DDTree node budget
REPEATS_RANGE = (1, 1024)  # algorithm.compare_repeats
# config.json keys holding a model's context length, the first one present wins
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length")


@dataclass
class ModelConfig:
    name: str = MISSING
    target_path: str | None = None  # local checkpoint dir (relative: from the project root); wins over target_id
    draft_path: str | None = None
    target_id: str | None = None  # Hugging Face hub id, found in the local HF cache (never downloaded)
    draft_id: str | None = None
    backend: str = "hf"
    dtype: str = "float32"
    device: str = "cpu"  # cpu, cuda, cuda:N (inline), auto
    draft_device: str | None = None  # the draft's, where it differs (null: model.device)
    capture: bool = True  # on CUDA: the models' passes replayed from CUDA graphs (models.static_pass); false: eager


@dataclass
class AlgorithmConfig:
    name: str = "block"
    K: int = 1  # i.i.d. draft paths per round
    L: int | None = 4  # draft length; null: the drafter's block (DFlash: block_size - 1; block: block_size), else 8
    node_rule: str = "kseq"  # spectr only: per-node rule of the top-down walk
    budget: int = 64  # ddtree only: node budget B (16..1024)
    tree: str = "best_first"  # ddtree only: best_first (DDTree) or chain (argmax per depth, one path)
    allow_lossy: bool = False  # run an algorithm at a K its exact certificates do not cover (spectr_gbv, K >= 2)
    compare: list[str] = field(default_factory=list)  # path verifiers also run on every round's drafts (paired)
    compare_repeats: int = 8  # verifications per compared verifier and round (batched)


@dataclass
class DrafterConfig:
    name: str = "iid"  # iid: K sampled paths; ar_marginals, block, dflash: per-depth marginals (ddtree, token, block)
    path: str | None = None  # block: its checkpoint dir; dflash: its checkpoint dir (null: the model's draft)


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
    kind: str = "ray"  # inline: one process; ray: the models in Ray actors
    loop: str = "auto"  # ray: where the decode loop runs (LOOPS)
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
    spool_dir: str | None = None  # every run's local record, for speculab-sync; None: <Hydra output dir>/spool
    ui_port: int = 5000  # a database store's links point at `mlflow ui --port ui_port` (an http uri: its own pages)


@dataclass
class MeasureConfig:
    repeats: int = 3  # each unit (batch of prompts) decoded this many times by every method, interleaved


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
    baseline: bool = True  # also decode autoregressively with the engine, for speedup_vs_ar
    baseline_hf: bool = True  # also run transformers' generate on the same target and prompts, for speedup_vs_hf
    resume: bool = False  # skip points whose run already FINISHED (same point id, same experiment)


class ConfigError(ValueError):
    """Every invalid field of a config, one per line."""

    @classmethod
    def listing(cls, errors: list[str]) -> ConfigError:
        return cls("invalid config:\n  " + "\n  ".join(errors))


def unknown_keys(cfg: DictConfig) -> list[str]:
    """One line per key of the composed config that `Config` lacks (`+foo=1`, `+algorithm.foo=1`),
    naming the keys its node takes; `hydra`'s own node is ignored. Empty when every key is known."""
    tree = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(tree, dict)
    tree.pop("hydra", None)
    return _unknown_keys(tree, Config(), "")


def _unknown_keys(tree: dict[Any, Any], schema: Any, prefix: str) -> list[str]:
    known = [f.name for f in fields(schema)]
    takes = f"{prefix[:-1]} takes" if prefix else "top-level keys are"
    errors: list[str] = []
    for key, value in tree.items():
        if key not in known:
            errors.append(f"{prefix}{key}: unknown key; {takes} {', '.join(known)}")
        elif isinstance(value, dict) and is_dataclass(child := getattr(schema, key)):
            errors += _unknown_keys(value, child, f"{prefix}{key}.")
    return errors


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


def _within(errors: list[str], key: str, value: int, bounds: tuple[int, int]) -> None:
    low, high = bounds
    if not low <= value <= high:
        errors.append(f"{key}={value}: must be an integer >= {low} and <= {high}")


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


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint dir a run will load, with its parsed config.json."""

    key: str  # the config key it comes from: model.<role>_path, model.<role>_id or drafter.path
    path: Path
    config: dict[str, Any]


def own_weights(cfg: Config) -> bool:
    """The draft role loads `drafter.path` (a drafter with its own checkpoint), not the pair's draft."""
    from speculab.algorithms import DRAFTERS

    spec = DRAFTERS.get(cfg.drafter.name)
    if spec is None or spec.weights == "model.draft":
        return False
    return spec.weights == "drafter.path" or cfg.drafter.path is not None


def locate(cfg: Config, role: str) -> tuple[str, Path]:
    """(config key, dir) of the `role` ("target" or "draft") checkpoint a run loads; ValueError
    naming the key when there is none."""
    if role == "draft" and own_weights(cfg):
        return "drafter.path", drafter_dir(cfg.drafter)
    key = f"model.{role}_path" if getattr(cfg.model, f"{role}_path") is not None else f"model.{role}_id"
    return key, checkpoint_dir(cfg.model, role)


DEFAULT_L = 8  # algorithm.L where neither the algorithm preset nor the drafter's block sets it


def block_length(cfg: Config) -> int | None:
    """The longest draft the configured drafter makes in one pass, read from its checkpoint's config:
    a DFlash drafter's block_size - 1 (the block holds the bonus), a block drafter's block_size; None
    for any other drafter or a checkpoint that cannot be read (validation then names the problem)."""
    from speculab.models.dflash_layout import dflash_layout

    if cfg.drafter.name not in ("dflash", "block"):
        return None
    try:
        path = locate(cfg, "draft")[1]
        if cfg.drafter.name == "block":
            size = read_json(path / "block.json").get("block_size")
            return size if isinstance(size, int) else None
        layout = dflash_layout(read_json(path / "config.json"))[0]
    except ValueError:
        return None
    return None if layout is None else layout.block_size - 1


def draft_length(cfg: Config) -> int:
    """`algorithm.L` as given, else the drafter's block (`block_length`), else DEFAULT_L."""
    if cfg.algorithm.L is not None:
        return cfg.algorithm.L
    return block_length(cfg) or DEFAULT_L


def largest_tree(cfg: Config) -> int:
    """The most nodes a round's draft tree has, root included: a tree algorithm's budget, else K paths
    of L tokens under one root. It sizes the KV caches (and the memory plan) up front."""
    from speculab.algorithms import ALGORITHMS

    a = cfg.algorithm
    return a.budget + 1 if ALGORITHMS[a.name].tree_builder else a.K * draft_length(cfg) + 1


def with_draft_length(cfg: Config) -> Config:
    """``cfg`` with `algorithm.L` set (`draft_length`): what a run records and decodes with."""
    return replace(cfg, algorithm=replace(cfg.algorithm, L=draft_length(cfg)))


def _weight_errors(key: str, path: Path) -> list[str]:
    """One line per `*.safetensors` file of `path` whose header does not parse or whose data is cut
    short (safe_open checks that the header's offsets cover the file); reads headers, no tensor data."""
    from safetensors import SafetensorError, safe_open

    files = sorted(path.glob("*.safetensors"))
    if not files and not any(path.glob("*.bin")):
        return [
            f"{key}: {path} holds a config.json but no weights (*.safetensors or *.bin); "
            "the download or save stopped before them"
        ]
    errors = []
    for weights in files:
        try:
            with safe_open(str(weights), framework="numpy"):
                pass
        except (SafetensorError, OSError) as err:
            errors.append(f"{key}: {weights} is not a complete safetensors file ({err}); download or save it again")
    return errors


def _model_errors(cfg: Config) -> tuple[list[str], dict[str, Checkpoint]]:
    """(errors, checkpoint per role found). The draft role's weights are the pair's draft model
    (`model.draft_*`) or, for a drafter with its own checkpoint, `drafter.path`."""
    model = cfg.model
    errors: list[str] = []
    _choice(errors, "model.backend", model.backend, BACKENDS)
    _choice(errors, "model.dtype", model.dtype, DTYPES)
    found: dict[str, Checkpoint] = {}
    vocab: dict[str, tuple[int, Any]] = {}
    for role in ("target", "draft"):
        try:
            key, path = locate(cfg, role)
        except ValueError as err:
            errors.append(str(err))
            continue
        try:
            found[role] = Checkpoint(key, path, read_json(path / "config.json"))
            vocab[role] = _vocabulary(found[role])
        except ValueError as err:
            errors.append(f"{key}: {err}")
        errors += _weight_errors(key, path)
    if len(vocab) == 2 and _vocabularies_differ(vocab["target"], vocab["draft"]):
        errors.append(
            f"{found['draft'].key}: draft and target vocabularies differ "
            f"(target {vocab['target'][0]} tokens, draft {vocab['draft'][0]}); "
            "speculative decoding needs one shared tokenizer"
        )
    return errors, found


def drafter_dir(cfg: DrafterConfig) -> Path:
    """The checkpoint dir of a drafter with its own weights (`drafter.path`, holding its marker file:
    block.json for `block`, config.json for `dflash`)."""
    from speculab.algorithms import DRAFTERS

    marker = DRAFTERS[cfg.name].marker
    if not (cfg.path and (resolve_path(cfg.path) / marker).is_file()):
        raise ValueError(f"drafter.path={cfg.path!r}: no {cfg.name} drafter there (expected a directory with {marker})")
    return resolve_path(cfg.path)


def _int_list(value: Any) -> bool:
    return (
        isinstance(value, list) and bool(value) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    )


def dflash_errors(L: int, draft: Checkpoint, target: Checkpoint, model: str) -> list[str]:
    """A DFlash drafter's config.json against its target's: its drafting settings in any published
    layout (models/dflash_layout.py), layer ids below the target's layer count, one hidden size, and
    algorithm.L below the block size (the block holds the bonus and block_size - 1 drafts)."""
    from speculab.models.dflash_layout import dflash_layout, draft_value, is_dflash

    where = f"{draft.key}: {draft.path / 'config.json'}"
    if not is_dflash(draft.config):
        presets = ", ".join(f"model={p.stem}" for p in sorted((PROJECT_ROOT / "conf" / "model").glob("*_dflash.yaml")))
        return [
            f"drafter.name='dflash': {where} has no dflash_config, so model={model}'s draft is not a DFlash "
            f"drafter; presets with one: {presets} (or set drafter.path to a DFlash checkpoint)"
        ]
    layout, layout_errors = dflash_layout(draft.config)
    errors = [f"{where}: {error}" for error in layout_errors]
    layers = target.config.get("num_hidden_layers")
    ids_key, listed = draft_value(draft.config, "target_layer_ids")
    ids_key = ids_key if listed is not None else "target_layer_ids (spread by num_target_layers)"
    if layout is not None and isinstance(layers, int) and not all(0 <= i < layers for i in layout.target_layer_ids):
        errors.append(
            f"{where}: {ids_key}={list(layout.target_layer_ids)}: each must be in 0..{layers - 1} "
            f"(the target {target.path} has num_hidden_layers={layers})"
        )
    if layout is not None and not 1 <= L <= layout.block_size - 1:
        size = layout.block_size
        errors.append(f"algorithm.L={L}: the DFlash drafter drafts at most block_size - 1 = {size - 1} tokens")
    if draft.config.get("hidden_size") != target.config.get("hidden_size"):
        errors.append(
            f"{where}: hidden_size={draft.config.get('hidden_size')!r} differs from the target's "
            f"hidden_size={target.config.get('hidden_size')!r}: DFlash uses the target's embeddings and lm_head"
        )
    if draft.config.get("model_type") != "qwen3":
        errors.append(f"{where}: model_type={draft.config.get('model_type')!r}: must be qwen3 (DFlash layers)")
    return errors


def _cluster_errors(cfg: Config, found: dict[str, Checkpoint]) -> list[str]:
    """CPU and GPU counts, TP divisibility and the memory plan (speculab.models.memory), from config.json."""
    from speculab.models.memory import DTYPE_BYTES, Workload, architecture, fit_errors, plan_memory, tp_errors

    c = cfg.cluster
    errors: list[str] = []
    if c.num_cpus is not None and c.num_cpus < 1:
        errors.append(f"cluster.num_cpus={c.num_cpus}: must be an integer >= 1, or null (every core)")
    if c.actor_cpus <= 0:
        errors.append(f"cluster.actor_cpus={c.actor_cpus}: must be > 0 (CPUs each model actor reserves)")
    if c.gpu_memory_gib < 0:
        errors.append(f"cluster.gpu_memory_gib={c.gpu_memory_gib}: must be >= 0 (0 when cluster.num_gpus = 0)")
    _at_least(errors, "cluster.num_gpus", c.num_gpus, 0)
    _at_least(errors, "cluster.plan_prompt_tokens", c.plan_prompt_tokens, 1)
    if not 0 < c.draft_gpu <= 1:
        errors.append(f"cluster.draft_gpu={c.draft_gpu}: must be in (0, 1] (1: own GPU; < 1: beside a target shard)")
    if c.num_gpus > 0 and c.gpu_memory_gib <= 0:
        errors.append(f"cluster.gpu_memory_gib={c.gpu_memory_gib}: must be > 0 when cluster.num_gpus > 0")
    beside = c.draft_gpu < 1 or loop_host(cfg) == "target"  # the loop's actor holds the draft too
    if c.num_gpus > 0 and c.tp_size + (0 if beside else 1) > c.num_gpus:
        errors.append(
            f"cluster.tp_size={c.tp_size} target GPUs + {0 if beside else 1} draft GPU > cluster.num_gpus="
            f"{c.num_gpus}; lower cluster.tp_size, set cluster.draft_gpu < 1 (draft beside a target shard), "
            "or use a cluster with more GPUs"
        )
    if len(found) < 2 or c.tp_size < 1 or cfg.model.dtype not in DTYPE_BYTES:
        return errors
    try:
        target, draft = architecture(found["target"].config), architecture(found["draft"].config)
    except (ValueError, KeyError) as err:
        if c.tp_size == 1 and c.num_gpus == 0:
            return errors  # one CPU process: no split and no GPU memory to plan
        return [
            *errors,
            f"model.name={cfg.model.name!r}: cannot plan tensor parallelism or memory from config.json ({err!r})",
        ]
    errors += tp_errors(target, c.tp_size, f"model {cfg.model.name} (target)")
    if errors or c.num_gpus == 0 or not resolve_device(cfg, cfg.model.device).startswith("cuda"):
        return errors
    s = cfg.sampling
    work = Workload(
        s.batch_size, c.plan_prompt_tokens, s.max_new_tokens, largest_tree(cfg), DTYPE_BYTES[cfg.model.dtype]
    )
    return fit_errors(plan_memory(target, draft, work, c.tp_size, beside), c.gpu_memory_gib)


def loop_host(cfg: Config) -> str:
    """Where the decode loop runs: "inline" (runtime=inline), "target" (in the target's Ray actor, with
    the draft model in the same process) or "driver" (this process; the draft in its own actor)."""
    if cfg.runtime.kind == "inline":
        return "inline"
    if cfg.runtime.loop == "auto":
        return "target" if cfg.cluster.tp_size == 1 else "driver"
    return cfg.runtime.loop


def device_fields(cfg: Config) -> dict[str, str]:
    """The config keys that place a model, and their values (the draft's only where it is set)."""
    fields = {"model.device": cfg.model.device}
    if cfg.model.draft_device is not None:
        fields["model.draft_device"] = cfg.model.draft_device
    return fields


def remote_cluster(cfg: Config) -> bool:
    """The models run on a Ray cluster elsewhere, whose GPUs this machine cannot see."""
    return cfg.runtime.kind == "ray" and cfg.cluster.address is not None


def local_gpus() -> list[str]:
    """This machine's CUDA devices as `cuda:i (name)`."""
    import torch

    if not torch.cuda.is_available():
        return []
    return [f"cuda:{i} ({torch.cuda.get_device_name(i)})" for i in range(torch.cuda.device_count())]


def describe_device(cfg: Config, device: str) -> str:
    """What a configured device is where the models run: `cpu`, `cuda:0 (NVIDIA H100 80GB HBM3)`, or
    for a remote cluster `cuda (cluster)` (this machine cannot see its GPUs)."""
    device = resolve_device(cfg, device)
    if not device.startswith("cuda"):
        return device
    if remote_cluster(cfg):
        return f"{device} (cluster)"
    gpus = local_gpus()
    index = int(match.group(1)) if (match := CUDA_INDEX.fullmatch(device)) else 0
    return gpus[index] if index < len(gpus) else device


def resolve_device(cfg: Config, device: str) -> str:
    """A configured device as torch names it where the models run: `auto` becomes cuda when that
    place has a GPU (this machine's CUDA, or cluster.num_gpus > 0 on a remote cluster), else cpu."""
    if device != "auto":
        return device
    has_gpu = cfg.cluster.num_gpus > 0 if remote_cluster(cfg) else bool(local_gpus())
    return "cuda" if has_gpu else "cpu"


def _device_errors(cfg: Config) -> list[str]:
    """Each model device is one of DEVICES and exists where the models run: this machine's CUDA
    (runtime=inline, or an embedded local Ray cluster: cluster.address null), or the GPUs a remote
    cluster declares. On Ray an actor sees only the GPU Ray gives it, so cuda:N is inline only."""
    errors: list[str] = []
    for key, device in device_fields(cfg).items():
        if device not in ("cpu", "cuda", "auto") and not CUDA_INDEX.fullmatch(device):
            errors.append(f"{key}={device!r}: must be one of {', '.join(DEVICES)}")
        elif device.startswith("cuda"):
            errors += _cuda_errors(cfg, key, device)
    return errors


def _cuda_errors(cfg: Config, key: str, device: str) -> list[str]:
    if cfg.runtime.kind == "ray" and device != "cuda":
        return [f"{key}={device!r}: on runtime=ray each model actor sees only the GPU Ray assigns it; use cuda"]
    if remote_cluster(cfg):
        if cfg.cluster.num_gpus > 0:
            return []
        return [
            f"{key}={device!r}: cluster.num_gpus={cfg.cluster.num_gpus} on the cluster at "
            f"cluster.address={cfg.cluster.address!r}; set cluster.num_gpus (and cluster.gpu_memory_gib) to the "
            f"GPUs it offers, or {key}=cpu"
        ]
    gpus = local_gpus()
    where = "runtime=inline" if cfg.runtime.kind == "inline" else "cluster.address=null (an embedded local Ray)"
    if not gpus:
        return [
            f"{key}={device!r}: torch finds no CUDA GPU on this machine, where {where} runs the models; "
            f"set {key}=cpu (or auto), or runtime=ray with cluster.address=auto or ray://host:10001 (a GPU cluster)"
        ]
    if (index := CUDA_INDEX.fullmatch(device)) and int(index.group(1)) >= len(gpus):
        return [f"{key}={device!r}: this machine has {len(gpus)} CUDA device(s): {', '.join(gpus)}"]
    return []


def _context_errors(cfg: Config, target: Checkpoint | None) -> list[str]:
    """sampling.max_new_tokens + algorithm.L + 1 positions must fit the target's context length
    (the first of CONTEXT_KEYS in its config.json; no check when it has none)."""
    if target is None:
        return []
    key = next((k for k in CONTEXT_KEYS if isinstance(target.config.get(k), int)), None)
    s, L = cfg.sampling, draft_length(cfg)
    if key is None or (needed := s.max_new_tokens + L + 1) <= (context := target.config[key]):
        return []
    return [
        f"sampling.max_new_tokens={s.max_new_tokens} + algorithm.L={L} + 1 = {needed} positions: more than the "
        f"target's context of {context} ({key} in {target.path / 'config.json'}); "
        f"lower them so that sampling.max_new_tokens + algorithm.L <= {context - 1}"
    ]


def _vocabularies_differ(target: tuple[int, Any], draft: tuple[int, Any]) -> bool:
    """Sizes differ, or both dirs hold a tokenizer.json and their vocabularies differ (a DFlash
    checkpoint ships none: it reads the target's tokens)."""
    return target[0] != draft[0] or (target[1] is not None and draft[1] is not None and target[1] != draft[1])


def _vocabulary(checkpoint: Checkpoint) -> tuple[int, Any]:
    """(vocab_size from config.json, tokenizer.json's vocabulary if present): reads no weights;
    ValueError when config.json names no vocabulary size (not a language model's config)."""
    size = checkpoint.config.get("vocab_size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ValueError(
            f"{checkpoint.path / 'config.json'}: vocab_size={size!r}: not a language model's config "
            "(a positive vocab_size is required)"
        )
    tokenizer = checkpoint.path / "tokenizer.json"
    vocab = read_json(tokenizer).get("model", {}).get("vocab") if tokenizer.is_file() else None
    return size, vocab


def _algorithm_errors(cfg: Config, found: dict[str, Checkpoint]) -> list[str]:
    """Algorithm, K, node rule, drafter and tree settings against the registry (`speculab.algorithms`)."""
    from speculab.algorithms import ALGORITHMS, DRAFTERS, OT_RULES, get_algorithm, node_rule_error
    from speculab.drafting.ddtree import TREES
    from speculab.models.dflash_layout import is_dflash

    algorithm, drafter = cfg.algorithm, cfg.drafter
    errors: list[str] = []
    _choice(errors, "drafter.name", drafter.name, tuple(DRAFTERS))
    try:
        spec = get_algorithm(algorithm.name)
    except ValueError as err:
        return [*errors, str(err)]
    if algorithm.K > 1 and not spec.multi_path:
        multi = ", ".join(name for name, s in ALGORITHMS.items() if s.multi_path)
        errors.append(
            f"algorithm.K={algorithm.K}: algorithm={algorithm.name} verifies one path (K=1); K > 1 needs a "
            f"multi-path algorithm: {multi}"
        )
    if not spec.lossless(algorithm.K) and not algorithm.allow_lossy:
        errors.append(
            f"algorithm.K={algorithm.K}: algorithm={algorithm.name} is lossless only for K <= {spec.lossless_paths} "
            "(its output is not distributed as the target's, docs/algorithms.md); set algorithm.allow_lossy=true "
            "to run it anyway"
        )
    if (rule_error := node_rule_error(spec, algorithm.node_rule)) is not None:
        errors.append(rule_error)
    elif algorithm.node_rule in OT_RULES and "target" in found:
        errors += _transport_size_errors(algorithm, cfg.sampling.top_k, found["target"])
    if algorithm.compare:
        errors += _compare_errors(algorithm)
    if drafter.path is not None and drafter.name in DRAFTERS and DRAFTERS[drafter.name].weights == "model.draft":
        readers = ", ".join(name for name, d in DRAFTERS.items() if d.weights != "model.draft")
        errors.append(
            f"drafter.path={drafter.path!r}: drafter={drafter.name} drafts with the pair's draft model "
            f"(model.draft_path / model.draft_id) and reads no path; only drafter={readers} do"
        )
    if drafter.name in DRAFTERS and drafter.name not in spec.drafters:
        errors.append(
            f"drafter.name={drafter.name!r}: algorithm={algorithm.name} needs drafter one of {', '.join(spec.drafters)}"
        )
    if spec.tree_builder:
        low, high = BUDGET_RANGE
        if not low <= algorithm.budget <= high:
            errors.append(f"algorithm.budget={algorithm.budget}: must be an integer in {low}..{high}")
        _choice(errors, "algorithm.tree", algorithm.tree, TREES)
    else:
        errors += _tree_key_errors(algorithm, "/".join(name for name, s in ALGORITHMS.items() if s.tree_builder))
    if "draft" in found:
        errors += _block_size_errors(draft_length(cfg), found["draft"])
    conditioned = drafter.name in DRAFTERS and DRAFTERS[drafter.name].target_features
    if len(found) == 2 and conditioned:
        errors += dflash_errors(draft_length(cfg), found["draft"], found["target"], cfg.model.name)
    elif "draft" in found and is_dflash(found["draft"].config):
        takers = ", ".join(name for name, d in DRAFTERS.items() if d.target_features)
        errors.append(
            f"drafter.name={drafter.name!r}: {found['draft'].key} is a DFlash checkpoint (dflash_config); "
            f"it drafts only as drafter={takers}"
        )
    return errors


# Draft columns an optimal-transport node rule may solve over per node. Measured on this project's
# CPU (RESULTS.md, "Optimal-transport node rules"): the LP takes about 0.05 ms per column (230 ms at
# top-k 100, K = 2: 5,051 columns), so this cap is seconds per node; top-k 100 fits up to K = 3
# (166,751), the tiny pair's whole vocabulary at K = 2 (8.4 million) does not.
OT_MAX_COLUMNS = 200_000


def transport_columns(support: int, K: int) -> int:
    """Draft columns of the grouped OT problem at one node: the subsets of at most K of the
    ``support`` draft tokens (Global Resolution paper, App. K)."""
    return sum(math.comb(support, j) for j in range(K + 1))


def _transport_size_errors(algorithm: AlgorithmConfig, top_k: int, target: Checkpoint) -> list[str]:
    """An OT node rule whose problem per node would not fit: refused with its size and the top-k that fits."""
    vocab = target.config.get("vocab_size")
    support = top_k if top_k > 0 else vocab
    if not isinstance(support, int) or (columns := transport_columns(support, algorithm.K)) <= OT_MAX_COLUMNS:
        return []
    fits = max(k for k in range(1, support + 1) if transport_columns(k, algorithm.K) <= OT_MAX_COLUMNS)
    where = f"sampling.top_k={top_k}" if top_k > 0 else f"sampling.top_k=0 (the whole vocabulary, {vocab} tokens)"
    return [
        f"algorithm.node_rule={algorithm.node_rule}: with {where} at algorithm.K={algorithm.K} each node's "
        f"optimal-transport problem has {columns:,} draft columns (at most {OT_MAX_COLUMNS:,} run in reasonable "
        f"time and memory); set sampling.top_k <= {fits} (+experiment=global_resolution_table4 uses 10)"
    ]


def _compare_errors(algorithm: AlgorithmConfig) -> list[str]:
    """`algorithm.compare`: path verifiers, beside a path algorithm, lossless at K unless allowed."""
    from speculab.algorithms import ALGORITHMS, PATH_ALGORITHMS

    errors: list[str] = []
    if ALGORITHMS[algorithm.name].tree_builder:
        return [
            f"algorithm.compare: algorithm={algorithm.name} drafts a tree; compare needs i.i.d. paths (path algorithms)"
        ]
    for name in algorithm.compare:
        if name not in PATH_ALGORITHMS:
            errors.append(
                f"algorithm.compare: {name!r} is not a path verifier; must be among {', '.join(PATH_ALGORITHMS)}"
            )
        elif not ALGORITHMS[name].lossless(algorithm.K) and not algorithm.allow_lossy:
            errors.append(
                f"algorithm.compare: {name} is not lossless at K={algorithm.K}; "
                "set algorithm.allow_lossy=true to compare it"
            )
    _within(errors, "algorithm.compare_repeats", algorithm.compare_repeats, REPEATS_RANGE)
    return errors


def _tree_key_errors(algorithm: AlgorithmConfig, builders: str) -> list[str]:
    """`algorithm.tree` and `algorithm.budget` away from their defaults for an algorithm that builds no tree."""
    default = AlgorithmConfig()
    return [
        f"algorithm.{key}={value!r}: only algorithm={builders} builds a tree; "
        f"algorithm={algorithm.name} takes none (leave it at {getattr(default, key)!r})"
        for key in ("tree", "budget")
        if (value := getattr(algorithm, key)) != getattr(default, key)
    ]


def _block_size_errors(L: int, draft: Checkpoint) -> list[str]:
    """A block drafter (block.json in the draft's dir) drafts at most its block size."""
    block_json = draft.path / "block.json"
    if not block_json.is_file():
        return []
    try:
        size = read_json(block_json).get("block_size")
    except ValueError as err:
        return [f"{draft.key}: {err}"]
    if not isinstance(size, int):
        return [f"{draft.key}: {block_json} has no integer block_size"]
    if size < L:
        return [f"algorithm.L={L}: the block drafter drafts at most {size} tokens (1..{size})"]
    return []


# MLflow's tracking stores by URI scheme (no scheme: a local file store); SQLAlchemy ones may add
# a driver after "+" (postgresql+psycopg2).
TRACKING_SCHEMES = ("sqlite", "file", "http", "https", "postgresql", "mysql", "mssql", "databricks")


def _blocking_file(path: Path) -> Path | None:
    """The nearest existing ancestor of ``path`` when it is not a directory (nothing can be created
    under it); None when that ancestor is a directory."""
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def _store_path(uri: str) -> Path | None:
    """The local path a SQLite or file store URI writes to (None: a remote or in-memory store)."""
    scheme = urlparse(uri).scheme
    if scheme == "sqlite":
        rest = uri.removeprefix("sqlite:///")
        return None if rest in ("", ":memory:") else Path(rest)
    if scheme == "file":
        return Path(urlparse(uri).path)
    return Path(uri) if not scheme else None


def _tracking_errors(t: TrackingConfig) -> list[str]:
    """The store's scheme, the experiment's name, and the local paths the run will create (a store's
    file or directory, the spool): refused when an ancestor is a regular file."""
    if not t.enabled:
        return []
    errors = []
    if not t.experiment.strip():
        errors.append(f"tracking.experiment={t.experiment!r}: must name an MLflow experiment")
    if t.uri is not None:
        scheme = urlparse(t.uri).scheme.split("+")[0]
        if scheme and scheme not in TRACKING_SCHEMES:
            errors.append(
                f"tracking.uri={t.uri!r}: unknown store scheme {scheme!r}; must be one of "
                f"{', '.join(f'{s}:' for s in TRACKING_SCHEMES)} or a local directory"
            )
        elif (store := _store_path(t.uri)) is not None and (blocker := _blocking_file(store)) is not None:
            errors.append(f"tracking.uri={t.uri!r}: {blocker} is a file, so the store {store} cannot be created")
        elif store is not None and scheme == "sqlite" and store.is_dir():
            errors.append(f"tracking.uri={t.uri!r}: {store} is a directory, not a SQLite database file")
    if t.spool_dir is not None:
        spool = Path(t.spool_dir)
        if spool.exists() and not spool.is_dir():
            errors.append(f"tracking.spool_dir={t.spool_dir!r}: a file, not a directory")
        elif (blocker := _blocking_file(spool)) is not None:
            errors.append(f"tracking.spool_dir={t.spool_dir!r}: {blocker} is a file, so the spool cannot be created")
    return errors


def _local_cluster_errors(cfg: Config) -> list[str]:
    """The embedded Ray cluster (no cluster.address) must hold every model actor at once: the
    target's tp_size ranks and, with runtime.loop=driver, the draft's own actor, cluster.actor_cpus
    each (Ray would wait for them forever)."""
    c = cfg.cluster
    if cfg.runtime.kind != "ray" or c.address is not None:
        return []
    cores = c.num_cpus or os.cpu_count() or 1
    actors, draft = (c.tp_size, "") if loop_host(cfg) == "target" else (c.tp_size + 1, " and the draft")
    needed = actors * c.actor_cpus
    if needed > cores:
        return [
            f"cluster.actor_cpus={c.actor_cpus}: the local Ray cluster has {cores} CPUs "
            f"({'cluster.num_cpus' if c.num_cpus else 'this machine'}) and its {actors} model actor(s) "
            f"(cluster.tp_size={c.tp_size} target rank(s){draft}) need {needed:g}; "
            f"set cluster.actor_cpus to a positive value <= {cores / actors:g}"
        ]
    return []


ADDRESS_TIMEOUT_S = 5.0  # how long a `ray://` address gets to accept a connection during validation


def _address_errors(cfg: Config) -> list[str]:
    """A Ray client address (`ray://host:port`) must accept a TCP connection before anything starts."""
    address = cfg.cluster.address
    if cfg.runtime.kind != "ray" or not address or not address.startswith("ray://"):
        return []
    parsed = urlparse(address)
    host, port = parsed.hostname or "", parsed.port or 10001  # Ray client's default port
    try:
        socket.create_connection((host, port), timeout=ADDRESS_TIMEOUT_S).close()
    except OSError as err:
        return [
            f"cluster.address={address!r}: nothing answers at {host}:{port} within {ADDRESS_TIMEOUT_S:g} s "
            f"({err.strerror or err}); start the cluster's head or fix the address"
        ]
    return []


def config_warnings(cfg: Config) -> list[str]:
    """Settings that are valid but that a user should hear about before the run starts (printed, not raised)."""
    from speculab.algorithms import get_algorithm

    algorithm = cfg.algorithm
    notes = []
    if not get_algorithm(algorithm.name).lossless(algorithm.K):
        notes.append(f"{algorithm.name} with K={algorithm.K} is not lossless (algorithm.allow_lossy)")
    if cfg.runtime.kind == "inline" and (cfg.cluster.name != ClusterConfig.name or cfg.cluster.address is not None):
        notes.append(
            f"cluster={cfg.cluster.name} (cluster.address={cfg.cluster.address!r}) is not used with runtime=inline: "
            "both models run in this process (runtime=ray to use the cluster)"
        )
    if algorithm.K > 1 and cfg.sampling.temperature == 0 and cfg.drafter.name == "iid":
        notes.append(
            f"algorithm.K={algorithm.K} with sampling.temperature=0: i.i.d. drafts at T = 0 are K copies of the "
            "draft's greedy path, so K changes only the cost of scoring them, never what is accepted "
            "(a sweep over K at T = 0 measures the same acceptance K times)"
        )
    return notes


def validate(cfg: Config) -> None:
    """Raise ConfigError listing every invalid field; touches no weights and starts nothing."""
    from speculab.data import DATASETS, check_dataset

    cfg = with_draft_length(cfg)
    errors: list[str] = []
    _within(errors, "algorithm.K", cfg.algorithm.K, K_RANGE)
    _within(errors, "algorithm.L", draft_length(cfg), L_RANGE)
    if not (math.isfinite(cfg.sampling.temperature) and cfg.sampling.temperature >= 0):
        errors.append(f"sampling.temperature={cfg.sampling.temperature}: must be a finite number >= 0 (0 = greedy)")
    if not 0 < cfg.sampling.top_p <= 1:
        errors.append(f"sampling.top_p={cfg.sampling.top_p}: must be in (0, 1]")
    _at_least(errors, "sampling.top_k", cfg.sampling.top_k, 0)
    _at_least(errors, "sampling.max_new_tokens", cfg.sampling.max_new_tokens, 1)
    _at_least(errors, "sampling.batch_size", cfg.sampling.batch_size, 1)
    _at_least(errors, "sampling.seed", cfg.sampling.seed, 0)
    _choice(errors, "runtime.kind", cfg.runtime.kind, RUNTIMES)
    _choice(errors, "runtime.loop", cfg.runtime.loop, LOOPS)
    if cfg.runtime.loop == "target" and cfg.cluster.tp_size > 1:
        errors.append(
            f"runtime.loop=target: the loop runs beside a target of one actor, and cluster.tp_size="
            f"{cfg.cluster.tp_size} makes it {cfg.cluster.tp_size}; use runtime.loop=driver (or auto)"
        )
    _at_least(errors, "cluster.tp_size", cfg.cluster.tp_size, 1)
    if cfg.runtime.kind == "inline" and cfg.cluster.tp_size > 1:
        errors.append(
            f"cluster.tp_size={cfg.cluster.tp_size}: tensor parallelism needs runtime=ray (inline is one process)"
        )
    _at_least(errors, "runtime.max_restarts", cfg.runtime.max_restarts, 0)
    _at_least(errors, "runtime.torch_threads", cfg.runtime.torch_threads, 0)
    _at_least(errors, "measure.repeats", cfg.measure.repeats, 1)
    _within(errors, "tracking.ui_port", cfg.tracking.ui_port, (1, 65535))
    if cfg.dataset.num_prompts is not None:
        _at_least(errors, "dataset.num_prompts", cfg.dataset.num_prompts, 1)
    if cfg.dataset.name not in DATASETS:
        _choice(errors, "dataset.name", cfg.dataset.name, DATASETS)
    else:
        try:
            check_dataset(cfg.dataset.name, cfg.dataset.path)
        except (ValueError, RuntimeError) as err:
            errors.append(str(err))
    model_errors, found = _model_errors(cfg)
    errors += model_errors + _device_errors(cfg) + _context_errors(cfg, found.get("target"))
    errors += _cluster_errors(cfg, found) + _algorithm_errors(cfg, found) + _tracking_errors(cfg.tracking)
    errors += _local_cluster_errors(cfg) + _address_errors(cfg)
    if errors:
        raise ConfigError.listing(errors)
