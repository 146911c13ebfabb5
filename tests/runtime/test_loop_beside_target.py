"""The decode loop beside the target (`runtime.loop=target`) at TP = 1: one Ray actor holds the target,
the draft and the point's loop; the driver makes one call per unit. Same tokens as inline and as the
loop in the driver, one process for every figure, and a lost actor costs only its unit's redo.
At TP > 1: tests/runtime/test_tp_loop.py."""

from __future__ import annotations

import itertools
import logging
import os
from functools import partial
from types import SimpleNamespace

import pytest
from transformers import AutoTokenizer

from speculab.config import ConfigError, loop_host, validate
from speculab.core.engine import DecodeSettings
from speculab.core.records import RunResult
from speculab.data import encode_prompt, load_prompts
from speculab.drafting.sampling import SamplingParams
from speculab.models import LMSpec
from speculab.runtime import loop_groups, start_loop
from speculab.runtime.groups import GroupPool, group_name, loop_bundles
from speculab.runtime.loop import PointWork
from speculab.runtime.loop_host import LoopSpec
from speculab.runtime.transport import proxy
from speculab.runtime.transport.proxy import GroupProxy
from support.configs import load
from support.faults import kill_when_in_flight
from support.models import TINY_PAIR

TARGET, DRAFT = LMSpec("hf", str(TINY_PAIR / "target"), threads=1), LMSpec("hf", str(TINY_PAIR / "draft"), threads=1)


def plan(algorithm: str = "block", temperature: float = 1.0, compare: tuple[str, ...] = ()) -> PointWork:
    tokenizer = AutoTokenizer.from_pretrained(TINY_PAIR / "target")
    prompts = [encode_prompt(p, tokenizer) for p in load_prompts("humaneval", 2)]
    settings = DecodeSettings(1, 3, SamplingParams(temperature), 24, 1, 5, tokenizer.eos_token_id)
    units = ((0, prompts[:1]), (1, prompts[1:]))
    return PointWork(algorithm, "kseq", "iid", "best_first", 16, compare, 2, units, settings)


def tokens(loop: object, method: str, units: int) -> list[list[int]]:
    found = []
    for unit in range(units):
        result = loop.decode_unit(method, unit, 0).result  # type: ignore[attr-defined]
        assert isinstance(result, RunResult)
        found += [p.tokens for p in result.prompts]
    return found


@pytest.mark.parametrize("tp_size", [1, 2])
def test_auto_puts_the_loop_beside_the_target_at_any_tp_size(tp_size: int) -> None:
    cfg = load([f"cluster.tp_size={tp_size}"])
    assert loop_host(cfg) == "target"
    validate(cfg)
    cfg.runtime.loop = "driver"
    assert loop_host(cfg) == "driver"
    cfg.runtime.kind = "inline"
    assert loop_host(cfg) == "inline"


def test_a_bad_loop_setting_is_refused_before_anything_starts() -> None:
    cfg = load([])
    cfg.runtime.loop = "beside"
    with pytest.raises(ConfigError, match="runtime.loop='beside': must be one of auto, target, driver"):
        validate(cfg)


def test_the_loop_group_has_its_own_name_and_a_bundle_per_target_rank() -> None:
    pair = LoopSpec(TARGET, DRAFT)
    assert group_name("loop", pair, loop_bundles("cpu", 1.0, 1)) != group_name("target", TARGET, [{"CPU": 1.0}])
    assert loop_bundles("cuda", 2.0, 1) == [{"GPU": 1.0, "CPU": 2.0}]
    assert loop_bundles("cpu", 0.5, 2) == [{"CPU": 0.5}] * 2
    assert loop_bundles("cuda", 1.0, 2, own_draft_gpu=True) == [{"GPU": 2.0, "CPU": 1.0}, {"GPU": 1.0, "CPU": 1.0}]
    assert LoopSpec(TARGET, LMSpec("hf", DRAFT.path, device="cuda")).device == "cuda"


@pytest.fixture(scope="module")
def beside(module_ray_pool: GroupPool) -> GroupProxy:
    """The loop beside the target, for the module's tests (beside, later, the driver loop's two groups)."""
    return start_loop("target", TARGET, DRAFT, plan())


@pytest.mark.slow
def test_beside_the_target_decodes_what_inline_and_the_driver_loop_decode(beside) -> None:
    """T = 1, seeded per unit: the three placements of the loop give the same tokens, for the
    speculative decode and the autoregressive baseline."""
    inline = start_loop("inline", TARGET, DRAFT, plan())
    driver = start_loop("driver", TARGET, DRAFT, plan())
    for method in ("speculative", "autoregressive"):
        reference = tokens(inline, method, 2)
        assert tokens(beside, method, 2) == reference, method
        assert tokens(driver, method, 2) == reference, method
    assert set(loop_groups(beside)) == {"loop"} and set(loop_groups(driver)) == {"target", "draft"}
    assert loop_groups(inline) == {}


@pytest.mark.slow
def test_every_figure_beside_the_target_is_measured_in_the_actor_s_process(beside, monkeypatch) -> None:
    """The decode's figures come from the actor's process; the driver's wait on its one call is split into
    the actor's compute, which holds the decode it timed, and Ray's share, the rest (on a driver clock that
    reads 100 s later each time, so that the split is exact whatever the machine's load)."""
    where = beside.conditions()
    assert set(where) == {"target and generate", "draft", "loop"}
    assert len({c.pid for c in where.values()}) == 1 and where["loop"].pid != os.getpid()
    assert where["loop"].torch_threads == 1  # the spec's threads, for both models and the loop
    ray_s, compute_s = beside.stats.ray_s, beside.stats.compute_s
    monkeypatch.setattr(proxy, "time", SimpleNamespace(perf_counter=partial(next, itertools.count(0.0, 100.0))))
    done = beside.decode_unit("generate", 0, 0)  # transformers' generate beside the same models
    assert done.sample.tokens == sum(map(len, done.result.tokens)) > 0
    compute = beside.stats.compute_s - compute_s
    assert compute >= done.sample.wall_s > 0
    assert beside.stats.ray_s - ray_s == pytest.approx(100.0 - compute)


@pytest.mark.slow
def test_a_new_point_reuses_the_loaded_actor_and_brings_its_paired_comparison(beside) -> None:
    again = start_loop("target", TARGET, DRAFT, plan("token", 0.0, ("token", "block")))
    assert again.group is beside.group  # the pool's group: loaded once
    done = again.decode_unit("speculative", 1, 0)
    assert done.paired is not None and set(done.paired.accepted) == {"token", "block"}
    assert done.paired.rounds.tolist() == [float(len(p.accepted)) for p in done.result.prompts]  # summed per prompt
    assert sum(done.paired.rounds.tolist()) == sum(r.rows for r in done.result.rounds) > 0
    assert again.decode_unit("speculative", 1, 3).result is None  # only repetition 0 keeps its tokens


@pytest.mark.slow
def test_two_points_on_one_group_each_decode_their_own(beside) -> None:
    """The pool's group is shared: a later point's `start_point` must not change what an earlier
    point's proxy decodes (the proxy replays its own point first)."""
    greedy = start_loop("target", TARGET, DRAFT, plan("token", 0.0))
    assert greedy.group is beside.group
    inline = start_loop("inline", TARGET, DRAFT, plan())
    assert tokens(beside, "speculative", 1) == tokens(inline, "speculative", 1)
    assert tokens(greedy, "speculative", 1) == tokens(
        start_loop("inline", TARGET, DRAFT, plan("token", 0.0)), "speculative", 1
    )


@pytest.mark.slow
def test_a_killed_loop_actor_is_recreated_and_the_unit_decoded_again_unchanged(beside, caplog) -> None:

    loop = start_loop("target", TARGET, DRAFT, plan())
    clean = tokens(loop, "speculative", 2)
    victim = loop.group.members[0]
    killed = kill_when_in_flight(loop, victim)  # the first unit's call, once submitted
    with caplog.at_level(logging.WARNING, logger="speculab.runtime.transport.proxy"):
        again = tokens(loop, "speculative", 2)
    assert killed and again == clean
    assert loop.stats.restarts == 1 and "loop group" in caplog.text and "lost an actor" in caplog.text
    assert loop.group.members[0] != victim


@pytest.mark.slow
@pytest.mark.parametrize("tp_size", [1, 2])
def test_a_driver_loops_autoregressive_baseline_is_one_ray_call_a_unit(ray_pool: GroupPool, tp_size: int) -> None:
    """With the loop in the driver the speculative decode makes Ray calls every round, but its baseline is
    decoded whole by the target's ranks (`tp_loop.whole`): a Ray call a token would slow the baseline that
    every speedup is taken over. Its tokens and KV (summed over the ranks) are inline's."""
    from dataclasses import replace

    driver = start_loop("driver", replace(TARGET, tp_size=tp_size), DRAFT, plan())
    inline = start_loop("inline", TARGET, DRAFT, plan())
    target = loop_groups(driver)["target"]
    calls = target.stats.calls
    whole = driver.decode_unit("autoregressive", 1, 0).result
    assert target.stats.calls == calls + tp_size  # one call to each rank
    reference = inline.decode_unit("autoregressive", 1, 0).result
    assert [p.tokens for p in whole.prompts] == [p.tokens for p in reference.prompts]
    assert [r.kv_target_bytes for r in whole.rounds] == [r.kv_target_bytes for r in reference.rounds]
