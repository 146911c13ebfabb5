"""A point's shape (`speculab.results.point.PointShape`): built from a config as the point runs and
from its logged params as the report reads it back, the two agree, and one rule decides what it shows."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from speculab.config import Config, ModelConfig
from speculab.results.point import PointShape
from speculab.tracking.tracker import flat_params


def config(**algorithm: object) -> Config:
    cfg = Config(model=ModelConfig(name="tiny-pycode"))
    for key, value in algorithm.items():
        setattr(cfg.algorithm, key, value)
    return cfg


@pytest.mark.parametrize(
    ("algorithm", "name"),
    [
        ({"name": "gbv", "K": 4, "L": 8}, "gbv K=4 L=8 T=1.0 · iid · humaneval×12 · tiny-pycode"),
        ({"name": "spectr", "K": 2, "node_rule": "kseq"}, "spectr K=2 L=4 T=1.0 · iid · humaneval×12 · tiny-pycode"),
        (
            {"name": "spectr", "K": 2, "node_rule": "ot_lp"},
            "spectr/ot_lp K=2 L=4 T=1.0 · iid · humaneval×12 · tiny-pycode",
        ),
        ({"name": "ddtree", "budget": 32}, "ddtree best_first B=32 L=4 T=1.0 · iid · humaneval×12 · tiny-pycode"),
        ({"name": "ddtree", "tree": "chain"}, "ddtree chain L=4 T=1.0 · iid · humaneval×12 · tiny-pycode"),
    ],
)
def test_a_shape_from_the_config_and_from_its_logged_params_agree(algorithm: dict, name: str) -> None:
    cfg = config(**algorithm)
    shape = PointShape.of(cfg)
    params = {key: str(value) for key, value in flat_params(asdict(cfg)).items()}  # MLflow keeps params as text
    assert shape.name == name and PointShape.from_params(params) == shape


def test_one_rule_for_what_a_shape_shows() -> None:
    paths, tree, chain = (
        PointShape.of(config(**a)) for a in ({"name": "block"}, {"name": "ddtree"}, {"name": "ddtree", "tree": "chain"})
    )
    assert (paths.K, paths.tree, paths.budget, paths.node_rule) == (1, None, None, None)  # block has no node rule
    assert (tree.K, tree.tree, tree.budget) == (None, "best_first", 64)
    assert (chain.K, chain.tree, chain.budget) == (None, "chain", None)  # a chain has no budget
    assert PointShape.of(config(name="spectr")).node_rule == "kseq"
    everything = Config(model=ModelConfig(name="m"))
    everything.dataset.num_prompts = None
    assert PointShape.of(everything).prompt_count == "all" and "humaneval×all" in PointShape.of(everything).name


@pytest.mark.parametrize(
    ("ahead", "name"),
    [
        ({"ahead": "ssd", "ahead_budget": 4}, "block K=1 L=4 T=1.0 · iid ahead ssd B=4 · humaneval×12 · tiny-pycode"),
        (
            {"ahead": "ssd", "ahead_fan_out": "uniform"},
            "block K=1 L=4 T=1.0 · iid ahead ssd B=8 uniform · humaneval×12 · tiny-pycode",
        ),
        ({"ahead": "off", "ahead_budget": 4}, "block K=1 L=4 T=1.0 · iid · humaneval×12 · tiny-pycode"),
    ],
)
def test_points_that_draft_ahead_differently_have_names_of_their_own(ahead: dict, name: str) -> None:
    """A sweep over `drafter.ahead_budget` or the fan-out labels its points apart, and a resumed sweep reads
    them back from their logged params."""
    cfg = config(name="block")
    for key, value in ahead.items():
        setattr(cfg.drafter, key, value)
    shape = PointShape.of(cfg)
    params = {key: str(value) for key, value in flat_params(asdict(cfg)).items()}
    assert shape.name == name and PointShape.from_params(params) == shape
    assert ("ahead" in shape.columns()) == (ahead["ahead"] != "off")
