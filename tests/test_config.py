"""Config composition and validation: every bad input is refused before anything loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import speculab.cli  # noqa: F401  registers the structured schema
from speculab import experiment
from speculab.config import PROJECT_ROOT, Config, ConfigError, validate

CONF = PROJECT_ROOT / "conf"


def fake_checkpoint(path: Path, vocab_size: int, vocab: dict[str, int] | None = None) -> Path:
    """A checkpoint directory with config (and tokenizer) but no weights: validation only reads those."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"vocab_size": vocab_size, "model_type": "llama"}))
    if vocab is not None:
        (path / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab}}))
    return path


def load(overrides: list[str]) -> Config:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return OmegaConf.to_object(compose("config", overrides=overrides))


@pytest.fixture
def pair(tmp_path: Path) -> list[str]:
    target = fake_checkpoint(tmp_path / "t", 10, {"a": 0})
    draft = fake_checkpoint(tmp_path / "d", 10, {"a": 0})
    return [f"model.target_path={target}", f"model.draft_path={draft}"]


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
