"""Every conf/ preset composes; cluster x model presets are accepted or refused as planned.

Checkpoints are fake: a Hugging Face cache holding only config.json per hub id (the real
models' architecture numbers, tests/hub_configs.py), so nothing is downloaded.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import huggingface_hub.constants
import pytest
from test_config import CONF, load

from speculab.config import ConfigError, checkpoint_dir, resolve, validate
from support.configs import header_weights
from support.hub_configs import HUB_CONFIGS

MODELS = sorted(p.stem for p in (CONF / "model").glob("*.yaml") if not p.stem.startswith("tiny-pycode"))
CLUSTERS = sorted(p.stem for p in (CONF / "cluster").glob("*.yaml"))
# Weights alone need 131.4 GiB (all of 70B) + 15.0 GiB (the 8B draft) on one 80 GiB GPU. On a 48 GiB A6000 a
# TP=4 shard of 70B (32.9 GiB) leaves no room for the whole draft beside it: there `auto` shards the draft.
REFUSED = {
    ("llama3-70b_8b", "gpu1"): "does not fit",
}


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An HF hub cache (models--org--name/refs/main, snapshots/<sha>/) with a config.json per preset model."""
    sha = "0" * 40
    for hub_id, config in HUB_CONFIGS.items():
        repo = tmp_path / f"models--{hub_id.replace('/', '--')}"
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text(sha)
        (repo / "snapshots" / sha).mkdir(parents=True)
        (repo / "snapshots" / sha / "config.json").write_text(json.dumps(config))
        header_weights(repo / "snapshots" / sha)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    return tmp_path


@pytest.fixture
def gpu_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch sees four GPUs here: a cluster preset on this machine (local, gpu1, gpus_local) with a cuda
    preset validates as on a GPU box."""
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    monkeypatch.setattr("torch.cuda.device_count", lambda: 4)
    monkeypatch.setattr("torch.cuda.get_device_name", lambda index: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr("os.cpu_count", lambda: 16)  # and the cores such a box has, for the actors' CPUs


def test_every_preset_model_is_a_known_architecture() -> None:
    for model in MODELS:
        cfg = load([f"model={model}"]).model
        assert {cfg.target_id, cfg.draft_id} <= set(HUB_CONFIGS), model


@pytest.mark.parametrize("cluster", CLUSTERS)
@pytest.mark.parametrize("model", MODELS)
def test_preset_pairs_on_preset_clusters(hub_cache: Path, gpu_machine: None, model: str, cluster: str) -> None:
    drafter = ["drafter=dflash", "algorithm=ddtree"] if model.endswith("_dflash") else []
    cfg = load([f"model={model}", f"cluster={cluster}", *drafter])
    refusal = REFUSED.get((model, cluster))
    if refusal is None:
        validate(cfg)
    else:
        with pytest.raises(ConfigError, match=refusal):
            validate(cfg)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            [
                "model=qwen3-coder-30b-a3b_dflash",
                "drafter=dflash",
                "algorithm=ddtree",
                "cluster=h200x8",
                "cluster.tp_size=8",
                "cluster.draft_gpu=0.5",
            ],
            "cluster.tp_size=8: must divide the 32 attention heads and 4 KV heads",
        ),
        (
            ["model=qwen3-32b_0.6b", "cluster=a6000x4", "cluster.draft_gpu=1", "cluster.draft_placement=own"],
            "> cluster.num_gpus=4",
        ),
        (["model=qwen3-32b_0.6b", "cluster=a6000x4", "model.draft_device=cuda:1"], "> cluster.num_gpus=4"),
        (
            ["model=qwen3-32b_0.6b", "cluster=a6000x4", "model.draft_device=cuda:1", "cluster.draft_placement=sharded"],
            "a sharded draft lives on the target's GPUs",
        ),
        (
            ["model=qwen3-8b_dflash", "drafter=dflash", "algorithm=ddtree", "cluster=a6000x4"]
            + ["cluster.draft_placement=sharded"],
            "cluster.draft_placement=sharded: drafter=dflash loads its own checkpoint",
        ),
        (
            ["model=qwen3-32b_0.6b", "cluster=a6000x4", "runtime.loop=driver", "cluster.draft_placement=sharded"],
            "set runtime.loop=target",
        ),
        (
            ["model=qwen3-8b_dflash", "drafter=dflash", "algorithm=ddtree", "cluster=a6000x4"]
            + ["cluster.draft_placement=own", "runtime.loop=target"],
            r"rank 0 drives a draft actor of its own over a socket for drafter=iid only \(got dflash\)",
        ),
        (
            ["model=qwen3-32b_0.6b", "cluster=a6000x4", "cluster.draft_placement=aside"],
            "must be one of auto, own, beside, sharded",
        ),
        (["model=llama3-70b_8b", "cluster=h200x8", "cluster.tp_size=1", "sampling.batch_size=16"], "does not fit"),
        # the whole 8B draft beside half the 70B on an 80 GB GPU (`auto` shards it there)
        (
            ["model=llama3-70b_8b", "cluster=gpus_local", "cluster.draft_placement=beside"],
            r"the busiest GPU needs 86\.5 GiB.*shard the draft with the target \(cluster\.draft_placement=sharded\)",
        ),
        (
            ["model=qwen3-coder-30b-a3b_dflash", "drafter=dflash", "algorithm=ddtree", "cluster=a6000x4"]
            + ["cluster.tp_backend=deepspeed"],
            r"\n  cluster\.tp_backend=deepspeed: DeepSpeed AutoTP cannot shard model qwen3-coder-30b-a3b_dflash",
        ),
    ],
)
def test_preset_overrides_that_cannot_work_are_refused(hub_cache: Path, overrides: list[str], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        validate(load(overrides))


@pytest.mark.parametrize(
    ("model", "backend"), [("qwen3-coder-30b-a3b_dflash", "transformers"), ("qwen3-8b_dflash", "deepspeed")]
)
def test_the_tp_backend_is_chosen_by_the_target(hub_cache: Path, gpu_machine: None, model: str, backend: str) -> None:
    """`cluster.tp_backend=auto` (the default): transformers' tp_plan for a mixture-of-experts target, which
    DeepSpeed AutoTP cannot shard, and AutoTP for a dense one; the plan (and so the logged params) holds it."""
    plan = resolve(load([f"model={model}", "drafter=dflash", "algorithm=ddtree", "cluster=a6000x4"]))
    assert plan.cfg.cluster.tp_size == 4 and plan.cfg.cluster.tp_backend == backend


def test_the_gbv_table7_command_plans_the_70b_pair_on_four_a6000s(hub_cache: Path, gpu_machine: None) -> None:
    """The command conf/experiment/gbv_table7.yaml documents: the 8B draft sharded over the 70B target's four
    ranks fits a 48 GB A6000, and the plan `speculab --plan` prints names every figure of it (dataset=gsm8k
    left out: this machine has no copy of it to check)."""
    from speculab.config import plan_lines

    plan = resolve(load(["+experiment=gbv_table7", "model=llama3-70b_8b", "cluster=a6000x4"]))
    assert plan.cfg.cluster.draft_placement == "sharded" and plan.loop == "target"  # auto: only sharded fits
    small = resolve(load(["+experiment=gbv_table7", "model=qwen3-32b_0.6b", "cluster=a6000x4"]))
    assert small.cfg.cluster.draft_placement == "beside"  # a 0.6B draft fits beside a shard: no collectives
    lines = "\n".join(plan_lines(plan))
    assert "sharded with the target over the same 4 ranks" in lines and "4 of cluster.num_gpus=4" in lines
    assert re.search(r"busiest GPU needs (\d+\.\d) GiB: target shard \(tp_size=4\) weights 32\.9 GiB", lines)
    assert "draft sharded with the target (one shard a GPU): weights 3.7 GiB" in lines
    assert "fits cluster.gpu_memory_gib=48" in lines and "does not fit" not in lines
    with pytest.raises(ConfigError, match=r"the busiest GPU needs .* draft beside a target shard: weights 15\.0 GiB"):
        validate(
            load(["+experiment=gbv_table7", "model=llama3-70b_8b", "cluster=a6000x4", "cluster.draft_placement=beside"])
        )


def test_a_local_path_wins_over_the_hub_id(hub_cache: Path, tmp_path: Path) -> None:
    local = tmp_path / "local-opt"
    local.mkdir()
    (local / "config.json").write_text(json.dumps(HUB_CONFIGS["facebook/opt-6.7b"]))
    cfg = load(["model=opt-6.7b_125m", f"model.target_path={local}"]).model
    assert checkpoint_dir(cfg, "target") == local
    assert checkpoint_dir(cfg, "draft").parts[-3:-1] == ("models--facebook--opt-125m", "snapshots")


def test_a_model_missing_from_the_cache_says_how_to_download(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ConfigError) as err:
        validate(load(["model=qwen3-32b_0.6b"]))
    message = str(err.value)
    assert "model.target_id='Qwen/Qwen3-32B'" in message and "hf download Qwen/Qwen3-32B" in message
    assert "model.draft_path=DIR" in message


@pytest.mark.parametrize("model", [m for m in MODELS if m.endswith("_dflash")])
def test_dflash_presets_resolve_to_a_dflash_drafter_fed_by_target_features(
    hub_cache: Path, gpu_machine: None, model: str
) -> None:
    """The draft role loads the preset's DFlash checkpoint (backend dflash, with the target's dir for its
    embeddings and head); the target is told the drafter's target_layer_ids. Loading that layout is
    tested on a random-weight checkpoint (tests/models/test_dflash.py)."""
    from speculab.point.experiment import model_specs

    cfg = load([f"model={model}", "drafter=dflash", "algorithm=ddtree"])
    target, draft = model_specs(resolve(cfg))
    ids = HUB_CONFIGS[str(cfg.model.draft_id)]["dflash_config"]["target_layer_ids"]
    assert target.feature_layers == tuple(ids) and target.backend == "hf"
    assert draft.backend == "dflash" and draft.target_path == target.path
    assert draft.path == str(checkpoint_dir(cfg.model, "draft"))


# docs/runtime.md's replica plan: the smallest tp_size at which each preset pair fits one copy on each GPU
# preset (config.json files only), and the copies its GPUs hold (2 x 8 H200 nodes: twice h200x8's)
REPLICA_PLAN = [
    ("llama3-70b_8b", [], "a6000x4", 4, 1),
    ("llama3-70b_8b", [], "h200x8", 2, 4),
    ("qwen3-32b_0.6b", [], "a6000x4", 2, 2),
    ("qwen3-32b_0.6b", [], "h200x8", 1, 8),
    ("qwen3-8b_dflash", ["drafter=dflash", "algorithm=ddtree"], "a6000x4", 1, 4),
    ("qwen3-8b_dflash", ["drafter=dflash", "algorithm=ddtree"], "h200x8", 1, 8),
]


@pytest.mark.parametrize(("model", "extra", "cluster", "tp_size", "replicas"), REPLICA_PLAN)
def test_the_documented_replica_plan_is_what_the_memory_planner_allows(
    hub_cache: Path, model: str, extra: list[str], cluster: str, tp_size: int, replicas: int
) -> None:
    base = [f"model={model}", *extra, f"cluster={cluster}"]
    plan = resolve(load([*base, f"cluster.tp_size={tp_size}", f"cluster.replicas={replicas}"]))
    assert plan.cfg.cluster.num_gpus // tp_size == replicas
    if tp_size > 1:  # half the ranks do not fit
        with pytest.raises(ConfigError, match="does not fit"):
            validate(load([*base, f"cluster.tp_size={tp_size // 2}"]))
    with pytest.raises(ConfigError, match=f"set cluster.replicas to at most {replicas}"):
        validate(load([*base, f"cluster.tp_size={tp_size}", f"cluster.replicas={replicas + 1}"]))


# docs/runtime.md's plan for drafting ahead (drafter.ahead=ssd): the draft in an actor of its own on a GPU of
# its own (cluster.draft_placement=own, draft_gpu=1), the target at the smallest tp_size the planner fits; the
# copies a GPU preset holds (tp_size + 1 GPUs each)
AHEAD_PLAN = [
    ("llama3-70b_8b", "h200x8", 2, 2),
    ("qwen3-32b_0.6b", "a6000x4", 2, 1),
    ("qwen3-32b_0.6b", "h200x8", 1, 4),
]


@pytest.mark.parametrize(("model", "cluster", "tp_size", "replicas"), AHEAD_PLAN)
def test_the_documented_ahead_plan_is_what_the_memory_planner_allows(
    hub_cache: Path, model: str, cluster: str, tp_size: int, replicas: int
) -> None:
    base = [f"model={model}", f"cluster={cluster}", "cluster.draft_placement=own", "cluster.draft_gpu=1"]
    base += ["drafter.ahead=ssd", "algorithm=block", f"cluster.tp_size={tp_size}"]
    plan = resolve(load([*base, f"cluster.replicas={replicas}"]))
    assert plan.loop == "target" and plan.placement.draft_own
    with pytest.raises(ConfigError, match=f"set cluster.replicas to at most {replicas}"):
        validate(load([*base, f"cluster.replicas={replicas + 1}"]))


def test_the_70b_pair_cannot_draft_ahead_on_four_a6000(hub_cache: Path) -> None:
    """At TP = 4 the 70B target takes every GPU and the 8B draft fits beside no shard: no GPU for it."""
    base = ["model=llama3-70b_8b", "cluster=a6000x4", "cluster.draft_placement=own", "drafter.ahead=ssd"]
    with pytest.raises(ConfigError, match="> cluster.num_gpus=4"):
        validate(load([*base, "algorithm=block", "cluster.tp_size=4", "cluster.draft_gpu=1"]))
    with pytest.raises(ConfigError, match="does not fit"):
        validate(load([*base, "algorithm=block", "cluster.tp_size=4", "cluster.draft_gpu=0.3"]))
