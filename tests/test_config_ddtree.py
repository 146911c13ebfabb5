"""DDTree config: composition, validation of budget / tree / drafter combinations, one inline run."""

from __future__ import annotations

import pytest

from speculab import experiment
from speculab.config import ConfigError, validate
from support.configs import CONF, load


def test_every_drafter_option_composes(weightless_pair_overrides: list[str]) -> None:
    for option in sorted((CONF / "drafter").glob("*.yaml")):
        load([f"drafter={option.stem}", "algorithm=ddtree", *weightless_pair_overrides])


@pytest.mark.parametrize(
    ("overrides", "field", "allowed"),
    [
        (["algorithm=ddtree"], "drafter.name='iid'", "ar_marginals, parallel"),
        (["algorithm=gbv", "drafter=ar_marginals"], "drafter.name='ar_marginals'", "iid"),  # token/block take it
        (["algorithm=ddtree", "drafter=ar_marginals", "algorithm.budget=8"], "algorithm.budget=8", "16..1024"),
        (["algorithm=ddtree", "drafter=ar_marginals", "algorithm.budget=2048"], "algorithm.budget=2048", "16..1024"),
        (
            ["algorithm=ddtree", "drafter=ar_marginals", "algorithm.tree=bush"],
            "algorithm.tree='bush'",
            "best_first, chain",
        ),
        (["algorithm=ddtree", "drafter=parallel", "drafter.path=/nowhere"], "drafter.path='/nowhere'", "block.json"),
        (["algorithm=ddtree", "drafter.name=nope"], "drafter.name='nope'", "iid, ar_marginals, parallel"),
    ],
)
def test_bad_ddtree_configs_name_field_and_allowed_values(
    weightless_pair_overrides: list[str], overrides: list[str], field: str, allowed: str
) -> None:
    with pytest.raises(ConfigError) as err:
        validate(load([*overrides, *weightless_pair_overrides]))
    line = next(line for line in str(err.value).splitlines() if field in line)
    assert allowed in line


def tiny_point(*overrides: str) -> dict[str, float]:
    """experiment.run inline on the tiny pair: 2 prompts x 16 tokens at T = 0, untracked, 1 thread, L = 4."""
    fixed = ["algorithm.L=4", "runtime=inline", "tracking=none", "dataset.num_prompts=2"]
    fixed += ["sampling.max_new_tokens=16", "sampling.temperature=0", "runtime.torch_threads=1"]
    return experiment.run(load([*overrides, *fixed])).metrics


@pytest.mark.slow
@pytest.mark.parametrize("tree", ["best_first", "chain"])
def test_ddtree_experiment_runs_inline_on_the_tiny_pair(tree: str) -> None:
    metrics = tiny_point("algorithm=ddtree", "drafter=ar_marginals", f"algorithm.tree={tree}", "algorithm.budget=32")
    assert metrics["time_tree_build_s"] > 0 and 1 <= metrics["block_efficiency"] <= 5
    assert metrics["tree_nodes_mean"] <= (33 if tree == "best_first" else 5)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["ddtree", "token"])
def test_dflash_experiment_runs_inline_on_the_tiny_pair(algorithm: str) -> None:
    metrics = tiny_point("model=tiny-pycode_dflash", "drafter=dflash", f"algorithm={algorithm}", "baseline_hf=false")
    assert metrics["feature_bytes_per_round"] > 0 and metrics["time_feature_s"] > 0
    assert metrics["accepted_mean"] > 0
