"""Config composition and validation: every bad input is refused before anything loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from speculab import experiment
from speculab.config import Config, ConfigError, validate
from support.configs import CONF, fake_checkpoint, load


def test_every_config_group_option_composes(pair: list[str]) -> None:
    for group in ("model", "algorithm", "dataset", "runtime", "cluster", "tracking"):
        for option in sorted((CONF / group).glob("*.yaml")):
            cfg = load([f"{group}={option.stem}", *pair])
            assert isinstance(cfg, Config)


def test_default_config_is_valid_with_a_model_pair(pair: list[str]) -> None:
    validate(load(pair))


@pytest.mark.parametrize(
    ("override", "field", "allowed"),
    [
        ("algorithm.K=0", "algorithm.K", ">= 1"),
        ("algorithm.L=0", "algorithm.L", ">= 1"),
        ("sampling.temperature=-0.5", "sampling.temperature", ">= 0"),
        ("sampling.top_p=0", "sampling.top_p", "(0, 1]"),
        ("sampling.top_p=1.5", "sampling.top_p", "(0, 1]"),
        ("algorithm.name=nope", "algorithm.name", "block"),
        ("dataset.name=nope", "dataset.name", "humaneval"),
        ("runtime.kind=nope", "runtime.kind", "inline, ray"),
        ("dataset=jsonl", "dataset.path", "JSONL"),
        ("model.target_path=/nonexistent/model", "model.target_path", "config.json"),
    ],
)
def test_bad_values_are_named_with_what_is_allowed(pair: list[str], override: str, field: str, allowed: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate(load([*pair, override]))
    message = str(err.value)
    assert field in message and allowed in message


@pytest.mark.parametrize("sizes", [(10, 12), (10, 10)])
def test_different_vocabularies_are_refused(tmp_path: Path, sizes: tuple[int, int]) -> None:
    target = fake_checkpoint(tmp_path / "t", sizes[0], {"a": 0})
    draft = fake_checkpoint(tmp_path / "d", sizes[1], {"b": 0})
    with pytest.raises(ConfigError, match="vocabularies differ"):
        validate(load([f"model.target_path={target}", f"model.draft_path={draft}"]))


@pytest.mark.parametrize("group", ["model", "algorithm", "dataset"])
def test_unknown_group_option_lists_the_available_ones(group: str) -> None:
    with pytest.raises(Exception, match=f"Available options in '{group}'"):
        load([f"{group}=nope"])


def test_run_refuses_bad_input_before_loading_anything(pair: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    def must_not_start(*args, **kwargs):
        raise AssertionError("models started before validation")

    monkeypatch.setattr(experiment, "start_models", must_not_start)
    monkeypatch.setattr(experiment, "load_prompts", must_not_start)
    with pytest.raises(ConfigError, match="algorithm.K"):
        experiment.run(load([*pair, "algorithm.K=0"]))


def test_a_drafter_with_its_own_weights_needs_no_draft_model() -> None:
    """drafter=block reads drafter.path: model.draft_path / draft_id may be unset."""
    validate(load(["algorithm=ddtree", "drafter=block", "model.draft_path=null", "model.draft_id=null"]))


def test_block_drafter_vocabulary_must_match_the_target(tmp_path: Path) -> None:
    target = fake_checkpoint(tmp_path / "t", 10, {"a": 0})
    with pytest.raises(ConfigError) as err:
        validate(load(["algorithm=ddtree", "drafter=block", f"model.target_path={target}"]))
    line = next(line for line in str(err.value).splitlines() if "vocabularies differ" in line)
    assert line.strip().startswith("drafter.path:") and "target 10 tokens, draft 4096" in line
