"""DDTree config: composition, validation of budget / tree / drafter combinations, one inline run."""

from __future__ import annotations

import re

import pytest
from omegaconf import OmegaConf

from speculab.config import ConfigError, resolve, resolve_path, validate
from speculab.point import experiment
from speculab.results.names import Figures
from support.configs import CONF, load
from support.models import TINY_PAIR

# Each drafter option beside algorithm=ddtree on the tiny pair: None where it resolves, else what its refusal says
BESIDE_DDTREE = {
    "ar_marginals": None,
    "parallel": None,
    "dflash": "has no dflash_config, so model=tiny-pycode's draft is not a DFlash drafter",
    "dflash2": "has no dflash_config, so model=tiny-pycode's draft is not a DFlash drafter",
    "iid": "drafter.name='iid': algorithm=ddtree needs drafter one of ar_marginals",
}


@pytest.mark.parametrize("option", sorted(path.stem for path in (CONF / "drafter").glob("*.yaml")))
def test_every_drafter_option_composes_to_its_file_and_resolves_or_is_refused(option: str) -> None:
    """The option's name and path reach the config, and beside algorithm=ddtree it resolves (its draft
    checkpoint `drafter.path`, else the pair's draft) or is refused saying why."""
    written = OmegaConf.load(CONF / "drafter" / f"{option}.yaml")
    cfg = load([f"drafter={option}", "algorithm=ddtree", "runtime=inline"])
    assert (cfg.drafter.name, cfg.drafter.path) == (written.name, written.get("path"))
    assert option in BESIDE_DDTREE, f"conf/drafter/{option}.yaml: add what it does beside algorithm=ddtree"
    if (refusal := BESIDE_DDTREE[option]) is not None:
        with pytest.raises(ConfigError, match=re.escape(refusal)):
            resolve(cfg)
        return
    plan = resolve(cfg)
    assert plan.draft_dir == (resolve_path(written.path) if written.get("path") else TINY_PAIR / "draft")


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


def tiny_point(*overrides: str) -> Figures:
    """experiment.run inline on the tiny pair: 2 prompts x 16 tokens at T = 0, untracked, 1 thread, L = 4."""
    fixed = ["algorithm.L=4", "runtime=inline", "tracking=none", "dataset.num_prompts=2"]
    fixed += ["sampling.max_new_tokens=16", "sampling.temperature=0", "runtime.torch_threads=1"]
    return experiment.run(load([*overrides, *fixed])).result.figures


@pytest.mark.slow
@pytest.mark.parametrize("tree", ["best_first", "chain"])
def test_ddtree_experiment_runs_inline_on_the_tiny_pair(tree: str) -> None:
    figures = tiny_point("algorithm=ddtree", "drafter=ar_marginals", f"algorithm.tree={tree}", "algorithm.budget=32")
    assert figures.value("time_tree_build_s") > 0
    # batch 1: one sequence-round per target call, so block efficiency is kept tokens over target calls
    calls, kept = figures.value("target_calls"), figures.value("generated_tokens")
    assert figures.value("block_efficiency") == pytest.approx(kept / calls)
    # eos or the token budget cuts at most each prompt's last round, by at most its L = 4 drafts
    assert figures.value("accepted_mean") == pytest.approx(kept / calls - 1, abs=figures.value("prompts") * 4 / calls)
    # a chain is the root and L = 4 nodes every round; a best-first tree at most its budget and the root
    assert figures.value("tree_nodes_mean") == 5 if tree == "chain" else 5 < figures.value("tree_nodes_mean") <= 33


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["ddtree", "token"])
def test_dflash_experiment_runs_inline_on_the_tiny_pair(algorithm: str) -> None:
    figures = tiny_point("model=tiny-pycode_dflash", "drafter=dflash", f"algorithm={algorithm}", "baseline_hf=false")
    assert figures.value("feature_bytes_per_round") > 0 and figures.value("time_feature_s") > 0
    # the drafter absorbs each round's committed tokens' features: at least one token's worth, float32
    hidden = 3 * 256  # three target layers (dflash_config.target_layer_ids) of the tiny target's 256 dimensions
    assert figures.value("feature_bytes_per_round") >= hidden * 4
    calls, kept = figures.value("target_calls"), figures.value("generated_tokens")
    assert figures.value("block_efficiency") == pytest.approx(kept / calls) and kept / calls > 1  # it accepts
