"""The structured config: the dataclasses behind conf/, the values its fields take, and unknown keys.

Hydra composes YAML from conf/ over these dataclasses, so a typo in a key fails at composition; a
key added with `+key=...` is refused by `unknown_keys`. This module reads no file and imports
nothing of speculab: the checks per concern (`config.model`, `config.device`, `config.cluster`,
`config.algorithm`, `config.tracking`) and `config.plan` build on it.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf

PROJECT_ROOT = Path(__file__).resolve().parents[3]  # the checkout: conf/, assets/, jobs/
RUNTIMES = ("inline", "ray")
# runtime.loop: where the decode loop runs on Ray. target: in rank 0 of the target's group, the draft in the
# same process, the other ranks following its target calls (no Ray call inside a round, at any TP size);
# driver: in this process, the draft in its own actor (Ray calls every round); auto: target.
LOOPS = ("auto", "target", "driver")
BACKENDS = ("hf",)
DTYPES = ("float32", "float16", "bfloat16")
DEVICES = ("cpu", "cuda", "cuda:N", "auto")  # auto: cuda where the models run has a GPU, else cpu
CUDA_INDEX = re.compile(r"cuda:(\d+)")
K_RANGE = (1, 64)  # algorithm.K: i.i.d. draft paths
L_RANGE = (1, 128)  # algorithm.L: draft length
BUDGET_RANGE = (16, 1024)  # algorithm.budget: DDTree node budget
REPEATS_RANGE = (1, 1024)  # algorithm.compare_repeats


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
    # the draft's, where it differs (null: model.device); on Ray with the loop on the target's rank 0,
    # cuda:1 is a GPU of the draft's own in rank 0's bundle (runtime.placement.OWN_DRAFT_GPU)
    draft_device: str | None = None
    capture: bool = True  # on CUDA: the models' passes replayed from CUDA graphs (models.static_pass); false: eager


@dataclass
class AlgorithmConfig:
    name: str = "block"
    K: int = 1  # i.i.d. draft paths per round
    L: int | None = 4  # draft length; null: the drafter's block (DFlash: block_size - 1; parallel: block_size), else 8
    node_rule: str = "kseq"  # spectr only: per-node rule of the top-down walk
    budget: int = 64  # ddtree only: node budget B (16..1024)
    tree: str = "best_first"  # ddtree only: best_first (DDTree) or chain (argmax per depth, one path)
    allow_lossy: bool = False  # run an algorithm at a K its exact certificates do not cover (spectr_gbv, K >= 2)
    compare: list[str] = field(default_factory=list)  # path verifiers also run on every round's drafts (paired)
    compare_repeats: int = 8  # verifications per compared verifier and round (batched)


@dataclass
class DrafterConfig:
    name: str = (
        "iid"  # iid: K sampled paths; ar_marginals, parallel, dflash: per-depth marginals (ddtree, token, block)
    )
    path: str | None = None  # parallel, dflash: the drafter's own checkpoint dir (dflash, null: the model's draft)


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
    # torch's intra-op threads in each model process; 0: the CPUs one model actor reserves
    # (cluster.actor_cpus, at least 1), inline as on Ray, so that both measure under the same threads
    torch_threads: int = 0
    max_restarts: int = 3  # ray: times a model group is recreated after losing an actor
    collective_timeout_s: float = 300.0  # ray, tp_size > 1: how long a rank waits in a collective for a peer
    placement_timeout_s: float = 30.0  # ray: how long a model group waits to be placed, also after a lost node


@dataclass
class ClusterConfig:
    name: str = "local"
    address: str | None = None  # None: embedded local Ray; "auto" or ray://host:port: existing cluster
    num_cpus: int | None = None  # embedded cluster size; None = every core
    actor_cpus: float = 1.0  # CPUs each model actor reserves
    tp_size: int = 1  # target tensor-parallel ranks (one GPU each; CPU processes when num_gpus = 0)
    tp_backend: str = "deepspeed"  # how a rank loads its shard: deepspeed (AutoTP) or transformers (its tp_plan)
    num_gpus: int = 0  # GPUs the cluster offers (0: CPU only)
    gpu_memory_gib: float = 0.0  # memory of one GPU (0 when num_gpus = 0)
    draft_gpu: float = 1.0  # GPU share of the draft actor (< 1: beside a target shard)
    plan_prompt_tokens: int = 2048  # prompt length the memory plan reserves KV cache for (not enforced)
    # Ray custom resources each rank's bundle also asks for, so that a group runs only on the nodes started
    # with them (`ray start --resources`); the loop group (runtime.loop=target) takes target_resources.
    # Typed Any (a {name: amount} mapping or null, checked by validation): OmegaConf cannot merge
    # `cluster.target_resources={gpu_a: 1}` into a typed empty dict under Hydra's struct mode.
    target_resources: Any = None
    draft_resources: Any = None  # runtime.loop=driver only


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


def loop_host(cfg: Config) -> str:
    """Where the decode loop runs: "inline" (runtime=inline), "target" (in rank 0 of the target's Ray
    group, with the draft model in the same process; what `auto` picks) or "driver" (this process; the
    draft in its own actor)."""
    if cfg.runtime.kind == "inline":
        return "inline"
    return "target" if cfg.runtime.loop == "auto" else cfg.runtime.loop


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
    `+`/`++`/`~`, `hydra.` and `group@package` overrides are Hydra's to check."""
    keys = [key for key, equals, _ in (arg.partition("=") for arg in overrides) if equals]
    plain = [key for key in keys if key[:1] not in ("", "+", "~", "-") and "@" not in key]
    lines = [_unknown_path(key.split("."), Config(), "", groups) for key in plain if key.split(".")[0] != "hydra"]
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
