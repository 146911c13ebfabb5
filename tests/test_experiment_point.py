"""One point decoded inline on the tiny pair: it times only the methods the config asks for, and its
speed figures say how many units they are over (two prompts: too few for an interval)."""

from __future__ import annotations

import pytest

from speculab.config import prompts
from speculab.models import TreeTarget
from speculab.point import experiment
from speculab.tracking.tracker import NoopTracker
from support.configs import plan_and_shape

SMALL = ["runtime=inline", "tracking=none", "dataset.num_prompts=2", "sampling.max_new_tokens=8", "measure.repeats=2"]


def test_a_point_runs_only_the_baselines_it_asks_for(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("transformers' generate ran with baseline_hf=false")

    monkeypatch.setattr(TreeTarget, "hf_generate", refuse)
    result = experiment.decode_point(*plan_and_shape([*SMALL, "baseline_hf=false"]), NoopTracker())
    speedup = result.figures["speedup_vs_ar"]
    assert speedup.n == 2 and not speedup.has_interval  # two prompts: too few for an honest 95% interval
    assert "speedup_vs_hf" not in result.figures and result.generate is None and result.autoregressive is not None
    assert not any(name.startswith("baseline_hf/") for name in result.logged())


def test_a_point_without_baselines_still_measures_its_own_speed() -> None:
    result = experiment.decode_point(*plan_and_shape([*SMALL, "baseline=false", "baseline_hf=false"]), NoopTracker())
    speed = result.figures["tokens_per_s"]
    assert speed.value > 0 and speed.n == 2 and result.figures["units"].value == 2
    assert not {"speedup_vs_ar", "speedup_vs_ar_cpu", "speedup_vs_hf"} & set(result.figures)


def test_a_dataset_that_holds_fewer_prompts_than_asked_is_refused_before_the_models_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A dataset counted only when it loads (the Hugging Face ones) is checked there, before the point's
    run exists: a run named `×5` that decoded one prompt would misname itself."""
    from speculab.config import ConfigError

    plan, _ = plan_and_shape([*SMALL[:2], "dataset.num_prompts=5"])
    one = prompts.load_prompts("humaneval", 1)
    monkeypatch.setattr(prompts, "load_prompts", lambda *args: one)
    monkeypatch.setattr(experiment, "start_loop", lambda *args: pytest.fail("the loop started"))
    with pytest.raises(ConfigError, match=r"dataset.num_prompts=5: humaneval holds 1 prompt; must be an integer"):
        prompts.point_prompts(plan)


def test_a_prompt_too_long_for_the_context_is_refused_before_the_points_run_exists(tmp_path) -> None:
    """Only tokenising tells a prompt's length: it is checked before the point's MLflow run starts, so a
    refused point leaves nothing in the store."""
    import json

    from speculab.config import ConfigError, resolve
    from support.configs import load

    prompts = tmp_path / "long.jsonl"
    prompts.write_text(json.dumps({"id": "long/1", "prompt": "def f():\n" * 600}) + "\n")
    store = tmp_path / "mlflow.db"
    overrides = ["runtime=inline", "dataset=jsonl", f"dataset.path={prompts}", f"tracking.uri=sqlite:///{store}"]
    with pytest.raises(ConfigError, match="dataset: prompt 'long/1' has .* tokens"):
        experiment.run(load(overrides), resolve(load(overrides)))
    assert not store.exists()
