"""Memory planner: parameter counts, per-GPU bytes, and the refusals of `validate`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from speculab.models.memory import (
    GIB,
    KV_SLACK,
    RESERVE_BYTES,
    Workload,
    architecture,
    fit_errors,
    memory_footprint,
    tp_errors,
)
from support.configs import header_weights
from support.hub_configs import HUB_CONFIGS

LLAMA_70B = architecture(HUB_CONFIGS["meta-llama/Meta-Llama-3-70B-Instruct"])
LLAMA_8B = architecture(HUB_CONFIGS["meta-llama/Meta-Llama-3-8B-Instruct"])
BF16 = 2


@pytest.mark.parametrize("hub_id", sorted(HUB_CONFIGS))
def test_parameter_count_equals_the_transformers_model(hub_id: str) -> None:
    config = HUB_CONFIGS[hub_id]
    with torch.device("meta"):  # shapes only, no memory
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
    assert architecture(config).params == sum(p.numel() for p in model.parameters())


def test_llama3_70b_known_figures() -> None:
    assert LLAMA_70B.params == 70_553_706_496  # the published count
    assert LLAMA_70B.params * BF16 == pytest.approx(141e9, rel=0.01)  # ~140 GB of bf16 weights
    work = Workload(1, 2048, 64, 5, BF16)
    footprint = memory_footprint(LLAMA_70B, LLAMA_8B, work, tp_size=4, draft_place="own")
    assert footprint.target_shard.weights == pytest.approx(35.3e9, rel=0.01)  # ~35 GB per GPU at TP=4
    assert LLAMA_70B.kv_bytes_per_token(BF16) == 80 * 8 * 128 * 2 * 2 == 320 * 1024  # 320 KiB per token


def test_kv_cache_counts_batch_prompt_new_tokens_and_tree_split_over_ranks() -> None:
    work = Workload(batch=4, prompt_tokens=1000, max_new_tokens=200, tree_nodes=33, dtype_bytes=BF16)
    footprint = memory_footprint(LLAMA_70B, LLAMA_8B, work, tp_size=8, draft_place="own")
    assert footprint.target_shard.kv_cache == int(4 * 1233 * 320 * 1024 * KV_SLACK) // 8
    assert footprint.draft.kv_cache == int(4 * 1232 * LLAMA_8B.kv_bytes_per_token(BF16) * KV_SLACK)


def test_draft_beside_a_shard_adds_to_that_gpu() -> None:
    work = Workload(1, 512, 64, 9, BF16)
    apart = memory_footprint(LLAMA_70B, LLAMA_8B, work, 4, draft_place="own")
    beside = memory_footprint(LLAMA_70B, LLAMA_8B, work, 4, draft_place="beside")
    assert (apart.gpus, beside.gpus) == (5, 4)
    assert apart.busiest_gpu == apart.target_shard.total + RESERVE_BYTES
    assert beside.busiest_gpu == apart.busiest_gpu + beside.draft.total


def test_larger_trees_need_more_activation_memory() -> None:
    small, large = (memory_footprint(LLAMA_70B, LLAMA_8B, Workload(1, 16, 0, n, BF16), 4, "own") for n in (9, 512))
    assert large.target_shard.activations > small.target_shard.activations


def test_tp_size_must_divide_query_and_kv_heads() -> None:
    assert tp_errors(LLAMA_70B, 8, "t") == []
    (error,) = tp_errors(LLAMA_70B, 3, "t")
    assert "tp_size=3" in error and "64 attention heads and 8 KV heads" in error and "1, 2, 4, 8" in error
    assert tp_errors(LLAMA_70B, 16, "t") != []  # divides the 64 heads, not the 8 KV heads


def test_fit_errors_name_the_numbers() -> None:
    footprint = memory_footprint(LLAMA_70B, LLAMA_8B, Workload(1, 2048, 64, 5, BF16), 4, draft_place="beside")
    (error,) = fit_errors(footprint, 48.0)
    assert "gpu_memory_gib=48.0" in error and "weights 32.9 GiB" in error and "weights 15.0 GiB" in error
    assert fit_errors(footprint, footprint.busiest_gpu / GIB) == []


def test_unknown_model_type_is_named() -> None:
    with pytest.raises(ValueError, match="model_type 'gpt2'"):
        architecture({"model_type": "gpt2", "hidden_size": 8, "num_attention_heads": 2})


# --- validate: refusals before anything starts, on checkpoint dirs holding config.json and no tensor ---


def fake_pair(root: Path, target: str, draft: str) -> list[str]:
    overrides = []
    for role, hub_id in (("target", target), ("draft", draft)):
        path = root / role
        path.mkdir()
        (path / "config.json").write_text(json.dumps(HUB_CONFIGS[hub_id]))
        header_weights(path)
        overrides.append(f"model.{role}_path={path}")
    return overrides


def cluster(tp: int, gpus: int, gib: float, draft_gpu: float = 1.0) -> list[str]:
    return [
        f"cluster.tp_size={tp}",
        f"cluster.num_gpus={gpus}",
        f"cluster.gpu_memory_gib={gib}",
        f"cluster.draft_gpu={draft_gpu}",
        "model.device=cuda",
        "model.dtype=bfloat16",
        "cluster.address=auto",  # a remote GPU cluster: validation does not look for CUDA on this machine
    ]


@pytest.fixture
def llama_pair(tmp_path: Path) -> list[str]:
    return fake_pair(tmp_path, "meta-llama/Meta-Llama-3-70B-Instruct", "meta-llama/Meta-Llama-3-8B-Instruct")


@pytest.mark.parametrize(
    ("cluster_overrides", "expected"),
    [
        (cluster(3, 8, 80.0), "cluster.tp_size=3: must divide the 64 attention heads and 8 KV heads"),
        # the draft on a GPU of its own needs its own actor (with the loop beside the target it shares rank 0's)
        ([*cluster(8, 8, 80.0), "runtime.loop=driver"], "tp_size=8 target GPUs + 1 draft GPU > cluster.num_gpus=8"),
        # the whole draft beside a shard (`auto` shards it instead: test_config_presets.py)
        ([*cluster(4, 4, 48.0, draft_gpu=0.5), "cluster.draft_placement=beside"], "the busiest GPU needs 53.2 GiB"),
        (cluster(4, 4, 48.0, draft_gpu=1.5), "cluster.draft_gpu=1.5: must be in (0, 1]"),
        (cluster(4, 4, 0.0, draft_gpu=0.5), "cluster.gpu_memory_gib=0.0: must be > 0"),
    ],
)
def test_validate_refuses_clusters_that_cannot_hold_the_pair(
    llama_pair: list[str], cluster_overrides: list[str], expected: str
) -> None:
    from test_config import load

    from speculab.config import ConfigError, validate

    with pytest.raises(ConfigError) as err:
        validate(load([*llama_pair, *cluster_overrides]))
    assert expected in str(err.value)


@pytest.mark.parametrize(
    "cluster_overrides",
    [
        cluster(4, 8, 140.0),
        cluster(8, 8, 140.0, draft_gpu=0.25),
        [*cluster(4, 5, 48.0), "runtime.loop=driver"],  # the draft's own actor on the fifth GPU
        [*cluster(4, 5, 48.0), "model.draft_device=cuda:1"],  # rank 0 holds the draft on a second GPU
    ],
)
def test_validate_accepts_clusters_that_hold_the_pair(llama_pair: list[str], cluster_overrides: list[str]) -> None:
    from test_config import load

    from speculab.config import validate

    validate(load([*llama_pair, *cluster_overrides]))


def test_run_refuses_a_model_that_does_not_fit_before_starting_actors(
    llama_pair: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from test_config import load

    from speculab.config import ConfigError
    from speculab.point import experiment

    def must_not_start(*args, **kwargs):
        raise AssertionError("models started before validation")

    monkeypatch.setattr(experiment, "start_loop", must_not_start)
    with pytest.raises(ConfigError, match="does not fit"):
        experiment.run(load([*llama_pair, *cluster(4, 4, 48.0, draft_gpu=0.5), "cluster.draft_placement=beside"]))


def test_validate_refuses_a_cpu_point_larger_than_this_machine_s_memory(
    llama_pair: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the CPU every rank lives in this machine's memory (its cgroup limit when lower): a 70B target in
    bf16 is refused with the footprint's figures, the same pair on an attached cluster is left to its nodes."""
    from test_config import load

    from speculab.config import ConfigError, validate
    from speculab.config import cluster_plan as cluster_checks

    monkeypatch.setattr(cluster_checks, "host_memory_bytes", lambda: 24 * 2**30)
    cpu = ["model.device=cpu", "model.dtype=bfloat16", "runtime=inline"]
    with pytest.raises(
        ConfigError, match=r"the point needs 1\d\d\.\d GiB of host memory, more than this machine's 24\.0 GiB"
    ):
        validate(load([*llama_pair, *cpu]))
    validate(load([*llama_pair, "model.device=cpu", "model.dtype=bfloat16", "cluster.address=auto"]))


def test_deepspeed_cannot_shard_a_mixture_of_experts_target_and_the_refusal_names_transformers() -> None:
    """DeepSpeed AutoTP ends a Qwen3-MoE load at TP > 1 in "Cannot copy out of meta tensor" inside the
    actor; validation refuses it first and names the backend that shards experts."""
    moe = architecture(HUB_CONFIGS["Qwen/Qwen3-Coder-30B-A3B-Instruct"])
    assert moe.experts == 128 and architecture(HUB_CONFIGS["meta-llama/Meta-Llama-3-70B-Instruct"]).experts == 0
    (error,) = tp_errors(moe, 4, "model m (target)", "deepspeed")
    assert error.startswith("cluster.tp_backend=deepspeed: DeepSpeed AutoTP cannot shard model m (target)")
    assert error.endswith("use cluster.tp_backend=transformers") and "128 experts" in error
    assert tp_errors(moe, 4, "t", "transformers") == [] and tp_errors(moe, 1, "t", "deepspeed") == []
