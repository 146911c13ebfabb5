"""One point decoded inline on the tiny pair: it times only the methods the config asks for, and
its speed figures come with intervals."""

from __future__ import annotations

import math

import pytest

from speculab import experiment
from speculab.config import resolve
from speculab.models import TreeTarget
from speculab.tracking.runs import NoopTracker
from support.configs import load

SMALL = ["runtime=inline", "tracking=none", "dataset.num_prompts=2", "sampling.max_new_tokens=8", "measure.repeats=2"]


def test_a_point_runs_only_the_baselines_it_asks_for(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("transformers' generate ran with baseline_hf=false")

    monkeypatch.setattr(TreeTarget, "hf_generate", refuse)
    metrics = experiment.decode_point(resolve(load([*SMALL, "baseline_hf=false"])), NoopTracker())
    assert metrics["speedup_vs_ar_ci_low"] <= metrics["speedup_vs_ar"] <= metrics["speedup_vs_ar_ci_high"]
    assert math.isnan(metrics["speedup_vs_hf"]) and math.isnan(metrics["speedup_vs_hf_ci_low"])
    assert not any(key.startswith("baseline_hf/") for key in metrics)


def test_a_point_without_baselines_still_measures_its_own_speed() -> None:
    metrics = experiment.decode_point(resolve(load([*SMALL, "baseline=false", "baseline_hf=false"])), NoopTracker())
    assert metrics["tokens_per_s_ci_low"] <= metrics["tokens_per_s"] <= metrics["tokens_per_s_ci_high"]
    assert math.isnan(metrics["speedup_vs_ar"]) and math.isnan(metrics["speedup_vs_ar_cpu"])
