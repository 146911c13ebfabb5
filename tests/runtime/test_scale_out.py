"""The scale-out runtime on CPU: a TP=2 target group over gloo (DeepSpeed AutoTP) and a draft
actor on Ray, against the single-process backend; reuse of loaded groups; lost actors; cleanup.

The session's Ray cluster serves the module (tests/conftest.py): the tests on the TP=2 group share
its groups; the reuse and cleanup tests start from an empty pool, so the tests pass in any order.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import mlflow
import pytest
import torch
from transformers import AutoTokenizer

from speculab.config import Config, ConfigError, validate
from speculab.core.autoregressive import autoregressive
from speculab.core.engine import DecodeSettings, decode
from speculab.data import encode_prompt, load_prompts
from speculab.drafting.sampling import SamplingParams
from speculab.models import DraftModel, LMSpec, TreeTarget
from speculab.models.tp import checkpoint_files
from speculab.registry import get_verifier
from speculab.results.names import mlflow_name
from speculab.runtime import start_models
from speculab.runtime.groups import GroupPool, draft_bundles, group_name, target_bundles
from support.models import TINY_PAIR

TARGET = LMSpec("hf", str(TINY_PAIR / "target"), threads=1)
DRAFT = LMSpec("hf", str(TINY_PAIR / "draft"), threads=1)
TP2 = LMSpec("hf", str(TINY_PAIR / "target"), threads=1, tp_size=2)


def test_target_ranks_take_whole_gpus_and_the_draft_a_share_beside_rank_0() -> None:
    assert target_bundles(2, "cpu", 1.0, 1.0) == [{"CPU": 1.0}, {"CPU": 1.0}]
    assert target_bundles(4, "cuda", 2.0, 1.0) == [{"GPU": 1.0, "CPU": 2.0}] * 4
    assert target_bundles(4, "cuda", 1.0, 0.25) == [{"GPU": 0.75, "CPU": 1.0}] + [{"GPU": 1.0, "CPU": 1.0}] * 3
    assert draft_bundles("cuda", 1.0, 0.25) == [{"GPU": 0.25, "CPU": 1.0}]
    assert draft_bundles("cpu", 1.0, 0.25) == [{"CPU": 1.0}]


def test_group_names_change_with_tp_size_dtype_device_and_passes() -> None:
    bundles = target_bundles(2, "cpu", 1.0, 1.0)
    names = {
        group_name("target", spec, bundles)
        for spec in (
            TP2,
            LMSpec("hf", TP2.path, threads=1, tp_size=4),
            LMSpec("hf", TP2.path, "bfloat16", threads=1, tp_size=2),
            LMSpec("hf", TP2.path, device="cuda", threads=1, tp_size=2),
            LMSpec("hf", TP2.path, device="cuda", threads=1, tp_size=2, passes="graphs"),
        )
    }
    assert len(names) == 5
    assert group_name("target", TP2, bundles) == group_name(
        "target", LMSpec("hf", TP2.path, threads=1, tp_size=2), bundles
    )


def test_checkpoint_files_follow_the_shard_index(tmp_path: Path) -> None:
    weight_map = {"a": "model-00002-of-00002.safetensors", "b": "model-00001-of-00002.safetensors"}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    assert checkpoint_files(tmp_path) == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert checkpoint_files(TINY_PAIR / "target") == ["model.safetensors"]


def test_tensor_parallel_inline_is_refused() -> None:
    cfg = Config()
    cfg.model.name, cfg.model.target_path, cfg.model.draft_path = (
        "tiny",
        str(TINY_PAIR / "target"),
        str(TINY_PAIR / "draft"),
    )
    cfg.runtime.kind, cfg.cluster.tp_size = "inline", 2
    with pytest.raises(ConfigError, match="cluster.tp_size=2: tensor parallelism needs runtime=ray"):
        validate(cfg)


@pytest.fixture
def ray_models(module_ray_pool: GroupPool) -> tuple[Any, Any]:
    """(TP=2 target proxy, draft proxy): the module's groups, loaded by the first test that asks (again
    after a test that emptied the pool), then reused."""
    return start_models("ray", TP2, DRAFT)


@pytest.fixture(scope="module")
def prompts() -> tuple[list[list[int]], int]:
    tokenizer = AutoTokenizer.from_pretrained(TINY_PAIR / "target")
    return [encode_prompt(p, tokenizer) for p in load_prompts("humaneval", 3)], tokenizer.eos_token_id


def log_probs(p: torch.Tensor) -> torch.Tensor:
    """Logits up to a per-position constant (what the 1e-5 comparison is about)."""
    return p.clamp_min(1e-30).log()


@pytest.mark.slow
def test_tp2_group_scores_like_the_single_process_model(ray_models, prompts) -> None:
    group, _ = ray_models
    single, drafter = TreeTarget(TARGET), DraftModel(DRAFT)
    contexts = [p[:-1] for p in prompts[0][:2]]
    for target in (group, single):
        target.prefill(contexts)
    drafter.prefill(contexts, [p[-1] for p in prompts[0][:2]], seed=0)
    for _ in range(2):  # the second tree is scored after KV compaction to the accepted path
        tree = drafter.propose(2, 3, SamplingParams(1.0)).tree
        p_group, p_single = group.score(tree, 1.0), single.score(tree, 1.0)  # [B, N, V]
        torch.testing.assert_close(log_probs(p_group), log_probs(p_single), rtol=1e-5, atol=1e-5)
        accepted = torch.tensor([[0, 1, -1], [0, -1, -1]])
        for target in (group, single):
            target.commit(accepted)
        drafter.commit([tree.tokens[0, 1:2].tolist(), [5]])
    assert group.kv_bytes() == single.kv_bytes()  # each rank holds one of the two KV heads


@pytest.mark.slow
def test_greedy_speculative_run_through_the_tp_group_equals_greedy_autoregressive(ray_models, prompts) -> None:
    group, draft = ray_models
    encoded, eos = prompts
    settings = DecodeSettings(2, 3, SamplingParams(0.0), 24, 2, 0, eos)
    reference = [p.tokens for p in autoregressive(TreeTarget(TARGET), encoded, settings).prompts]
    run = decode(group, draft, get_verifier("block"), encoded, settings)
    assert [p.tokens for p in run.prompts] == reference
    assert sum(len(p.accepted) for p in run.prompts) < sum(map(len, reference))  # drafts were accepted


@pytest.mark.slow
def test_groups_are_reused_not_reloaded(module_ray_pool: GroupPool) -> None:
    """On the module's groups (loaded here if no test before did): asking again loads nothing."""
    first = start_models("ray", TP2, DRAFT)
    loads = [g.group.loads for g in first]
    again = start_models("ray", TP2, DRAFT)
    assert [g.group.members for g in again] == [g.group.members for g in first]
    assert [g.group.loads for g in again] == loads  # none again (an earlier test may have restarted them)


class KillOnCall:
    """Delegates to a proxy; kills one rank of its group before a given call of `method` in a batch."""

    def __init__(self, proxy: Any, method: str, batch: int, call: int, rank: int) -> None:
        self.proxy, self.method, self.batch, self.call, self.rank = proxy, method, batch, call, rank
        self.prefills = self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: self._forward(name, args, kwargs)

    def _forward(self, name: str, args: tuple, kwargs: dict) -> Any:
        import ray

        self.prefills += name == "prefill"
        self.calls = 0 if name == "prefill" else self.calls + (name == self.method)
        if (self.prefills, self.calls) == (self.batch, self.call) and name == self.method:
            victim = self.proxy.group.members[self.rank]
            ray.kill(victim)
            while True:  # kill is asynchronous: wait until the actor is gone
                try:
                    ray.get(victim.is_loaded.remote())
                    time.sleep(0.05)
                except ray.exceptions.RayActorError:
                    break
        return getattr(self.proxy, name)(*args, **kwargs)


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["draft", "tp_rank_1"])
def test_a_killed_actor_restarts_its_whole_group_and_the_run_completes_unchanged(
    ray_models, prompts, victim, caplog
) -> None:
    """T=1 with a fixed seed: replaying the interrupted batch reproduces the fault-free tokens."""
    group, draft = ray_models
    encoded, eos = prompts
    settings = DecodeSettings(2, 3, SamplingParams(1.0), 16, 1, 7, eos)
    clean = decode(group, draft, get_verifier("block"), encoded, settings)
    proxy = draft if victim == "draft" else group
    before = list(proxy.group.members)
    restarts = proxy.stats.restarts
    faulty = KillOnCall(proxy, "propose" if victim == "draft" else "score", batch=2, call=2, rank=len(before) - 1)
    models = (group, faulty) if victim == "draft" else (faulty, draft)
    with caplog.at_level(logging.WARNING, logger="speculab.runtime.transport.proxy"):
        run = decode(*models, get_verifier("block"), encoded, settings)
    assert [p.tokens for p in run.prompts] == [p.tokens for p in clean.prompts]
    assert proxy.stats.restarts == restarts + 1
    assert "lost an actor" in caplog.text and f"recreating all {len(before)} rank(s)" in caplog.text
    assert all(new != old for new, old in zip(proxy.group.members, before))  # no rank of the old group kept


@pytest.mark.slow
def test_cleanup_removes_every_named_actor_and_placement_group(ray_pool: GroupPool) -> None:
    import ray

    from speculab.runtime.cleanup import remove_leftovers

    start_models("ray", TP2, DRAFT)
    namespace = ray.get_runtime_context().namespace
    actors, groups = remove_leftovers(namespace)
    assert (actors, groups) == (3, 2)  # 2 target ranks, the draft; 2 placement groups
    assert ray.util.list_named_actors() == []


@pytest.mark.slow
def test_a_sweep_loads_each_model_once(tmp_path: Path) -> None:
    """A 2-point Hydra multirun over K (T = 1) with a TP=2 target and the loop in the driver: every point
    reports 2 loads and the Ray calls its rounds make (one per rank and model step)."""
    store = tmp_path / "mlflow.db"
    args = [
        "-m",
        "algorithm=gbv",
        "algorithm.K=1,2",
        "cluster.tp_size=2",
        "runtime.loop=driver",
        "cluster.num_cpus=4",
        "runtime.torch_threads=1",
        "baseline=false",
        "baseline_hf=false",  # loads and Ray calls are the speculative decode's: one timed repetition shows them
        "measure.repeats=1",
        "dataset.num_prompts=1",
        "sampling.max_new_tokens=8",
        f"tracking.uri=sqlite:///{store}",
    ]
    result = subprocess.run(
        [sys.executable, "-m", "speculab.launch.cli", *args], cwd=tmp_path, capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0, result.stderr[-3000:]
    mlflow.set_tracking_uri(f"sqlite:///{store}")
    children = [
        r
        for r in mlflow.search_runs(experiment_names=["speculab"], output_format="list")
        if r.data.tags.get("mlflow.parentRunId")
    ]
    assert len(children) == 2
    loads, restarts, ray_s, calls = (
        mlflow_name(key) for key in ("model_loads", "restarts", "time_ray_s", "ray_calls_per_round")
    )
    assert [r.data.metrics[loads] for r in children] == [2.0] * 2  # one target group, one draft
    assert all(r.data.metrics[restarts] == 0 for r in children)
    assert all(r.data.metrics[calls] >= 5 for r in children)  # propose, score and commit on 3 ranks at least
    # time_ray_s: the proxies' waits, all inside the decodes whose wall time the four phases add up to,
    # less the actors' compute in them (never all of a wait; clamped at 0 per wait). 0 would mean that
    # every wait was clamped (compute counted twice); the wall time or more, time from outside them.
    phases = [mlflow_name(f"time_{phase}_s") for phase in ("draft", "target", "verify", "other")]
    assert all(0 < r.data.metrics[ray_s] < sum(r.data.metrics[p] for p in phases) for r in children)
