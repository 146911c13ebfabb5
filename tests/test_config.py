"""Config composition and validation: every bad input is refused before anything loads."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf
from safetensors.numpy import save_file

from speculab.config import ConfigError, config_warnings, resolve, resolve_device, unknown_keys, validate
from speculab.config import prompts as config_prompts
from speculab.point import experiment
from support.configs import CONF, compose_config, fake_checkpoint, load


@pytest.mark.parametrize("group", ["model", "algorithm", "drafter", "dataset", "runtime", "cluster", "tracking"])
def test_every_group_option_composes_to_the_values_its_file_sets(group: str) -> None:
    """Each option's YAML over its group's dataclass: every key the file sets reaches the config as
    written, not a dataclass default nor another file's value."""
    for option in sorted((CONF / group).glob("*.yaml")):
        written = OmegaConf.to_container(OmegaConf.load(option))
        composed = OmegaConf.to_container(OmegaConf.structured(getattr(load([f"{group}={option.stem}"]), group)))
        assert isinstance(written, dict) and isinstance(composed, dict)
        assert {key: composed[key] for key in written} == written, option.name


def test_default_config_is_valid_with_a_model_pair(weightless_pair_overrides: list[str]) -> None:
    validate(load(weightless_pair_overrides))


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
        ("drafter.ahead=pearl", "drafter.ahead", "off, ssd"),
        ("drafter.ahead_fan_out=wide", "drafter.ahead_fan_out", "geometric, uniform"),
        ("drafter.ahead_budget=4", "drafter.ahead_budget=4", "applies with drafter.ahead=ssd"),
    ],
)
def test_bad_values_are_named_with_what_is_allowed(
    weightless_pair_overrides: list[str], override: str, field: str, allowed: str
) -> None:
    with pytest.raises(ConfigError) as err:
        validate(load([*weightless_pair_overrides, override]))
    message = str(err.value)
    assert field in message and allowed in message


def bad_files(root: Path) -> dict[str, Path]:
    """Checkpoint dirs (the `weightless_pair_overrides` fixture's vocabulary), each with one bad file, by
    placeholder name."""

    def checkpoint(name: str, **config: int) -> Path:
        return fake_checkpoint(root / name, 10, {"a": 0}, **config)

    def truncated_weights(path: Path) -> Path:
        save_file({"w": np.zeros((64, 64), np.float32)}, path / "model.safetensors")
        data = (path / "model.safetensors").read_bytes()
        (path / "model.safetensors").write_bytes(data[: len(data) // 2])
        return path

    paths = {
        "short_context": checkpoint("short_context", n_positions=64),
        "corrupt_config": checkpoint("corrupt_config"),
        "corrupt_tokenizer": checkpoint("corrupt_tokenizer"),
        "corrupt_block": checkpoint("corrupt_block"),
        "truncated": truncated_weights(checkpoint("truncated")),
        "truncated_block": truncated_weights(checkpoint("truncated_block")),
    }
    (paths["corrupt_config"] / "config.json").write_text('{"vocab_size": 10,')
    (paths["corrupt_tokenizer"] / "tokenizer.json").write_text("{")
    (paths["corrupt_block"] / "block.json").write_text("block_size: 16")
    (paths["truncated_block"] / "block.json").write_text('{"block_size": 16, "mask_token_id": 1}')
    return paths


# (overrides, field, fragment of what is allowed): all refused, on the checkpoints of the
# `weightless_pair_overrides` fixture.
# {name} stands for a checkpoint dir of `bad_files`; torch.cuda.is_available() is False.
BAD_CONFIGS: list[tuple[list[str], str, str]] = [
    (["+foo=1"], "foo: unknown key", "top-level keys are model, algorithm, drafter"),
    (["+algorithm.foo=1"], "algorithm.foo: unknown key", "algorithm takes name, K, L, node_rule"),
    (["algorithm.L=100000"], "algorithm.L=100000", ">= 1 and <= 128"),
    (["algorithm=gbv", "algorithm.K=65"], "algorithm.K=65", ">= 1 and <= 64"),
    (
        ["model.target_path={short_context}", "sampling.max_new_tokens=60"],
        "sampling.max_new_tokens=60 + algorithm.L=4 + 1 = 65",
        "target's context of 64 (n_positions in {short_context}/config.json)",
    ),
    (
        [
            "model.target_path=assets/tiny-pycode/target",
            "model.draft_path=assets/tiny-pycode/draft",
            "sampling.max_new_tokens=1020",
        ],
        "sampling.max_new_tokens=1020",
        "context of 1024 (max_position_embeddings in",
    ),
    (["algorithm=block", "algorithm.K=4"], "algorithm.K=4", "gbv, spectr, specinfer, nss, traversal"),
    (
        ["algorithm=ddtree", "drafter=ar_marginals", "algorithm.K=4"],
        "algorithm.K=4: algorithm=ddtree verifies one path",
        "multi-path algorithm: gbv, spectr",
    ),
    (
        ["algorithm=spectr_gbv", "algorithm.K=2"],
        "algorithm.K=2: algorithm=spectr_gbv is lossless only for K <= 1",
        "set algorithm.allow_lossy=true",
    ),
    (["algorithm.compare=[token,bogus]"], "algorithm.compare: 'bogus'", "must be among token, block"),
    (["algorithm.compare=[token]", "algorithm.compare_repeats=0"], "algorithm.compare_repeats=0", ">= 1 and <= 1024"),
    (
        ["algorithm=gbv", "algorithm.compare=[spectr_gbv]"],
        "algorithm.compare: spectr_gbv is not lossless at K=2",
        "algorithm.allow_lossy=true",
    ),
    (
        ["algorithm=ddtree", "drafter=parallel", "algorithm.compare=[token]"],
        "algorithm.compare: algorithm=ddtree drafts a tree",
        "(path algorithms)",
    ),
    (["algorithm=token", "algorithm.tree=bogus"], "algorithm.tree='bogus'", "only algorithm=ddtree builds a tree"),
    (["algorithm=gbv", "algorithm.budget=32"], "algorithm.budget=32", "only algorithm=ddtree builds a tree"),
    (["algorithm=gbv", "algorithm.node_rule=lp"], "algorithm.node_rule='lp'", "only algorithm=spectr"),
    (["sampling.seed=-1"], "sampling.seed=-1", "must be an integer in [0, 9223372032559808512)"),
    (["model.draft_path={corrupt_config}"], "model.draft_path:", "{corrupt_config}/config.json is not valid JSON"),
    (
        ["model.target_path={corrupt_tokenizer}"],
        "model.target_path:",
        "{corrupt_tokenizer}/tokenizer.json is not valid JSON",
    ),
    (
        ["algorithm=ddtree", "drafter=parallel", "drafter.path={corrupt_block}"],
        "drafter.path:",
        "{corrupt_block}/block.json is not valid JSON",
    ),
    (["model.device=cuda", "runtime=inline"], "model.device='cuda'", "set model.device=cpu"),
    (["model.device=cuda", "runtime=ray"], "model.device='cuda'", "cluster.address=auto"),
    (["model.device=cuda", "cluster.address=auto"], "model.device='cuda'", "set cluster.num_gpus"),
    (["model.device=gpu"], "model.device='gpu'", "must be one of cpu, cuda, cuda:N, auto"),
    (["model.device=cuda:x"], "model.device='cuda:x'", "must be one of cpu, cuda, cuda:N, auto"),
    (["model.draft_device=cuda", "runtime=inline"], "model.draft_device='cuda'", "set model.draft_device=cpu"),
    (["model.device=cuda:1", "runtime=ray"], "model.device='cuda:1'", "on runtime=ray each model actor sees only"),
    (["measure.repeats=0"], "measure.repeats=0", ">= 1"),
    (["tracking.ui_port=70000"], "tracking.ui_port=70000", ">= 1 and <= 65535"),
    (["cluster.actor_cpus=-1"], "cluster.actor_cpus=-1.0", "must be > 0"),
    (["cluster.actor_cpus=0"], "cluster.actor_cpus=0.0", "must be > 0"),
    (["cluster.num_cpus=0"], "cluster.num_cpus=0", ">= 1"),
    (["cluster.gpu_memory_gib=-1"], "cluster.gpu_memory_gib=-1.0", ">= 0"),
    (["model.target_path={truncated}"], "model.target_path:", "{truncated}/model.safetensors is not a complete"),
    (
        ["algorithm=ddtree", "drafter=parallel", "drafter.path={truncated_block}"],
        "drafter.path:",
        "{truncated_block}/model.safetensors is not a complete",
    ),
]


@pytest.mark.parametrize(("overrides", "field", "allowed"), BAD_CONFIGS, ids=[" ".join(row[0]) for row in BAD_CONFIGS])
def test_every_bad_config_is_refused_naming_the_field_and_what_is_allowed(
    weightless_pair_overrides: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    overrides: list[str],
    field: str,
    allowed: str,
) -> None:
    """As the CLI does it: unknown keys first (before the conversion drops them), then `validate`."""
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    paths = bad_files(tmp_path / "bad")
    raw = compose_config([*weightless_pair_overrides, *(override.format(**paths) for override in overrides)])
    errors = unknown_keys(raw)
    if not errors:
        with pytest.raises(ConfigError) as err:
            validate(OmegaConf.to_object(raw))
        errors = str(err.value).splitlines()
    field, allowed = field.format(**paths), allowed.format(**paths)
    assert any(field in line and allowed in line for line in errors), errors


def one_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine, as validation sees it, with one CUDA device."""
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    monkeypatch.setattr("torch.cuda.device_count", lambda: 1)
    monkeypatch.setattr("torch.cuda.get_device_name", lambda index: "NVIDIA H100 80GB HBM3")


def test_a_draft_gpu_of_its_own_beside_rank_0_needs_the_loop_there(random_llama_pair, monkeypatch) -> None:
    """`model.draft_device=cuda:1` on Ray: rank 0's bundle asks for a second GPU, the draft's; the loop in the
    driver has no such bundle, and the cluster must offer the GPU."""
    one_gpu(monkeypatch)
    monkeypatch.setattr("torch.cuda.device_count", lambda: 2)
    target, draft = random_llama_pair
    own = [f"model.target_path={target}", f"model.draft_path={draft}", "model.device=cuda", "model.draft_device=cuda:1"]
    validate(load([*own, "cluster.num_gpus=2", "cluster.gpu_memory_gib=80"]))
    with pytest.raises(ConfigError, match=r"model.draft_device='cuda:1': on runtime=ray .* runtime.loop=target"):
        validate(load([*own, "runtime.loop=driver"]))
    with pytest.raises(ConfigError, match=r"cluster.tp_size=1 target GPUs \+ 1 draft GPU > cluster.num_gpus=1"):
        validate(load([*own, "cluster.num_gpus=1", "cluster.gpu_memory_gib=80"]))


def test_a_gpu_this_machine_lacks_is_refused_naming_what_it_has(
    weightless_pair_overrides: list[str], monkeypatch
) -> None:
    one_gpu(monkeypatch)
    with pytest.raises(ConfigError) as err:
        validate(load([*weightless_pair_overrides, "runtime=inline", "model.device=cuda:7"]))
    assert "model.device='cuda:7': this machine has 1 CUDA device(s): cuda:0 (NVIDIA H100 80GB HBM3)" in str(err.value)
    validate(load([*weightless_pair_overrides, "runtime=inline", "model.device=cuda:0", "model.draft_device=cpu"]))
    validate(load([*weightless_pair_overrides, "model.device=cuda"]))  # an embedded Ray on this machine


@pytest.mark.parametrize(("gpus", "expected"), [(True, "cuda"), (False, "cpu")])
def test_auto_places_the_models_on_cuda_where_they_run_has_one(
    weightless_pair_overrides: list[str], monkeypatch: pytest.MonkeyPatch, gpus: bool, expected: str
) -> None:
    if gpus:
        one_gpu(monkeypatch)
    else:
        monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    cfg = load([*weightless_pair_overrides, "runtime=inline", "model.device=auto"])
    validate(cfg)
    target, draft = experiment.model_specs(resolve(cfg))
    assert target.device == draft.device == expected
    remote = load(
        [
            *weightless_pair_overrides,
            "model.device=auto",
            "cluster.address=auto",
            "cluster.num_gpus=2",
            "cluster.gpu_memory_gib=80",
        ]
    )
    assert resolve_device(remote, remote.model.device) == "cuda"  # the cluster's GPUs, not this machine's


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


def test_run_refuses_bad_input_before_loading_anything(
    weightless_pair_overrides: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def must_not_start(*args, **kwargs):
        raise AssertionError("models started before validation")

    monkeypatch.setattr(experiment, "start_loop", must_not_start)
    monkeypatch.setattr(config_prompts, "load_prompts", must_not_start)
    with pytest.raises(ConfigError, match="algorithm.K"):
        experiment.run(load([*weightless_pair_overrides, "algorithm.K=0"]))


def test_a_drafter_with_its_own_weights_needs_no_draft_model() -> None:
    """drafter=parallel reads drafter.path: model.draft_path / draft_id may be unset."""
    validate(load(["algorithm=ddtree", "drafter=parallel", "model.draft_path=null", "model.draft_id=null"]))


def test_parallel_drafter_vocabulary_must_match_the_target(tmp_path: Path) -> None:
    target = fake_checkpoint(tmp_path / "t", 10, {"a": 0})
    with pytest.raises(ConfigError) as err:
        validate(load(["algorithm=ddtree", "drafter=parallel", f"model.target_path={target}"]))
    line = next(line for line in str(err.value).splitlines() if "vocabularies differ" in line)
    assert line.strip().startswith("drafter.path:") and "target 10 tokens, draft 4096" in line


# DFlash drafters against the tiny target (7 layers, hidden 256): (config.json overrides, overrides, field, allowed)
DFLASH_BAD: list[tuple[dict, list[str], str, str]] = [
    (
        {"dflash_config": {"block_size": 16, "mask_token_id": 1}, "num_target_layers": None},
        [],
        "dflash_config.target_layer_ids is missing",
        "num_target_layers=None",
    ),
    (
        {"dflash_config": {"target_layer_ids": [], "block_size": 16, "mask_token_id": 1}},
        [],
        "dflash_config.target_layer_ids=[]",
        "must be a non-empty list of target layer ids",
    ),
    ({"dflash_config": {"target_layer_ids": [1], "block_size": 16}}, [], "mask_token_id=None", "token id"),
    ({"layer_types": ["full_attention", "sliding_attention"]}, [], "layer_types[1]='sliding_attention'", "only full"),
    (
        {"dflash_config": {"target_layer_ids": [1, 7], "block_size": 16, "mask_token_id": 1}},
        [],
        "dflash_config.target_layer_ids=[1, 7]",
        "each must be in 0..6 (the target",
    ),
    ({"hidden_size": 128}, [], "hidden_size=128", "differs from the target's hidden_size=256"),
    ({}, ["algorithm.L=16"], "algorithm.L=16", "at most block_size - 1 = 15 tokens"),
    ({}, ["drafter=iid", "algorithm=block"], "drafter.name='iid'", "it drafts only as drafter=dflash"),
]


@pytest.mark.parametrize(("config", "overrides", "field", "allowed"), DFLASH_BAD, ids=[row[2] for row in DFLASH_BAD])
def test_bad_dflash_drafters_are_refused_before_weights_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: dict, overrides: list[str], field: str, allowed: str
) -> None:
    from support.models import TINY_PAIR, save_random_dflash

    def must_not_load(*args, **kwargs):
        raise AssertionError("weights loaded before validation finished")

    monkeypatch.setattr("speculab.models.dflash.load_dflash", must_not_load)
    draft = save_random_dflash(tmp_path / "d", TINY_PAIR / "target", [1, 3, 5], block_size=16, **config)
    paths = [f"model.target_path={TINY_PAIR / 'target'}", f"model.draft_path={draft}"]
    with pytest.raises(ConfigError) as err:
        validate(load([*paths, "algorithm=ddtree", "drafter=dflash", *overrides]))
    assert any(field in line and allowed in line for line in str(err.value).splitlines()), str(err.value)


# DFlash2 against the tiny target: (DFlash2 settings or None for a DFlash checkpoint, overrides, field, allowed)
DFLASH2_BAD: list[tuple[bool, list[str], str, str]] = [
    (True, ["drafter=dflash"], "drafter.name='dflash'", "is a DFlash2 checkpoint"),
    (False, ["drafter=dflash2"], "drafter.name='dflash2'", "names no candidate selector"),
    (True, ["drafter=dflash2", "algorithm=greedy_block"], "drafter", "greedy_block"),
    (True, ["drafter=dflash2", "algorithm=spectr_gbv"], "drafter", "spectr_gbv"),
]


@pytest.mark.parametrize(
    ("dflash2", "overrides", "field", "allowed"), DFLASH2_BAD, ids=[" ".join(r[1]) for r in DFLASH2_BAD]
)
def test_dflash2_checkpoints_and_drafters_are_matched_before_weights_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dflash2: bool, overrides: list[str], field: str, allowed: str
) -> None:
    from support.models import DFLASH2, TINY_PAIR, save_random_dflash

    def must_not_load(*args, **kwargs):
        raise AssertionError("weights loaded before validation finished")

    monkeypatch.setattr("speculab.models.dflash.load_dflash", must_not_load)
    settings = DFLASH2 if dflash2 else None
    draft = save_random_dflash(tmp_path / "d", TINY_PAIR / "target", [1, 3, 5], block_size=8, dflash2=settings)
    paths = [f"model.target_path={TINY_PAIR / 'target'}", f"model.draft_path={draft}"]
    with pytest.raises(ConfigError) as err:
        validate(load([*paths, "algorithm=ddtree", *overrides]))
    assert any(field in line and allowed in line for line in str(err.value).splitlines()), str(err.value)


def test_a_dflash2_checkpoint_missing_a_selector_tensor_is_refused_naming_it(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    from support.models import DFLASH2, TINY_PAIR, save_random_dflash

    draft = save_random_dflash(tmp_path / "d", TINY_PAIR / "target", [1, 3, 5], block_size=8, dflash2=DFLASH2)
    tensors = load_file(draft / "model.safetensors")
    del tensors["candidate_selector.successor_codebook"]
    save_file(tensors, str(draft / "model.safetensors"))
    paths = [f"model.target_path={TINY_PAIR / 'target'}", f"model.draft_path={draft}", "drafter=dflash2"]
    with pytest.raises(ConfigError) as err:
        validate(load([*paths, "algorithm=ddtree"]))
    lines = [line for line in str(err.value).splitlines() if "candidate_selector.successor_codebook" in line]
    assert len(lines) == 1 and "no tensor" in lines[0], str(err.value)


def test_a_dflash2_drafter_in_vllm_s_layout_validates(tmp_path: Path) -> None:
    from support.models import DFLASH2, TINY_PAIR, save_random_dflash

    draft = save_random_dflash(tmp_path / "d", TINY_PAIR / "target", [1, 3, 5], block_size=8, dflash2=DFLASH2)
    paths = [f"model.target_path={TINY_PAIR / 'target'}", f"model.draft_path={draft}", "drafter=dflash2"]
    for overrides in (
        ["algorithm=ddtree"],
        ["algorithm=token"],
        ["algorithm=spectr", "algorithm.K=2", "algorithm.L=4"],
    ):
        validate(load([*paths, *overrides]))


def test_a_dflash_drafter_in_the_published_layout_validates(tmp_path: Path) -> None:
    from support.models import TINY_PAIR, save_random_dflash

    draft = save_random_dflash(tmp_path / "d", TINY_PAIR / "target", [1, 3, 5], block_size=16)
    target = f"model.target_path={TINY_PAIR / 'target'}"
    for overrides in (["algorithm=ddtree"], ["algorithm=token", "algorithm.L=15"], ["algorithm=block"]):
        validate(load([target, f"model.draft_path={draft}", "drafter=dflash", *overrides]))
        validate(load([target, f"drafter.path={draft}", "drafter=dflash", *overrides]))  # drafter.path wins


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ([], []),
        (["algorithm=spectr", "algorithm.node_rule=maxflow", "sampling.top_k=10"], []),
        (["algorithm=spectr_gbv", "algorithm.K=2", "algorithm.allow_lossy=true"], ["spectr_gbv with K=2 is not"]),
        (["algorithm=gbv", "algorithm.K=4", "sampling.temperature=0"], ["algorithm.K=4 with sampling.temperature=0"]),
        (["algorithm=gbv", "algorithm.K=4", "sampling.temperature=0.5"], []),
        (["runtime=inline", "cluster=gpu1", "model.device=cpu"], ["cluster=gpu1 (cluster.address=None) is not used"]),
    ],
)
def test_valid_settings_worth_a_warning_are_named(overrides: list[str], expected: list[str]) -> None:
    cfg = load(overrides)
    validate(cfg)
    notes = config_warnings(cfg)
    assert len(notes) == len(expected)
    assert all(note.startswith(start) for note, start in zip(notes, expected))


def test_drafter_dflash_on_a_pair_without_one_names_the_presets_that_have_one() -> None:
    with pytest.raises(ConfigError) as err:
        validate(load(["model=tiny-pycode", "drafter=dflash", "algorithm=ddtree"]))
    line = next(line for line in str(err.value).splitlines() if "DFlash" in line)
    assert "drafter.name='dflash'" in line and "model=tiny-pycode_dflash" in line and "model=qwen3-8b_dflash" in line


def test_ddtree_on_a_dflash_drafter_drafts_its_whole_block_unless_L_is_set() -> None:
    dflash = ["model=tiny-pycode_dflash", "drafter=dflash", "algorithm=ddtree", "runtime=inline"]
    assert resolve(load(dflash)).cfg.algorithm.L == 7
    assert resolve(load(["drafter=ar_marginals", "algorithm=ddtree", "runtime=inline"])).cfg.algorithm.L == 8
    assert resolve(load([*dflash, "algorithm.L=3"])).cfg.algorithm.L == 3


def test_resolve_looks_up_each_checkpoint_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The draft length (read from the draft's block), the checks and the plan share one lookup a role."""
    from speculab.config import model as model_config

    lookups: list[str] = []
    lookup = model_config.locate
    monkeypatch.setattr(model_config, "locate", lambda cfg, role: lookups.append(role) or lookup(cfg, role))
    plan = resolve(load(["model=tiny-pycode_dflash", "drafter=dflash", "algorithm=ddtree", "runtime=inline"]))
    assert sorted(lookups) == ["draft", "target"]
    assert plan.cfg.algorithm.L == 7 and plan.draft_dir == lookup(plan.cfg, "draft")[1]


# One per class of bad input (issue 30): (overrides, a file to create, what the message must name)
BAD_SETTINGS: list[tuple[list[str], str, str]] = [
    (["sampling.temperature=nan"], "", "sampling.temperature=nan: must be a finite number >= 0"),
    (["sampling.temperature=inf"], "", "sampling.temperature=inf: must be a finite number >= 0"),
    (["dataset=jsonl", "dataset.path={tmp}/empty.jsonl"], "empty.jsonl:", "holds no prompts"),
    (["dataset=jsonl", "dataset.path={tmp}/bad.jsonl"], "bad.jsonl:not json", "bad.jsonl:1: not valid JSON"),
    (["dataset=humaneval", "dataset.path={tmp}/bad.jsonl"], "bad.jsonl:{}", "only dataset=jsonl reads a path"),
    (["model.target_path={tmp}/ckpt"], "ckpt/config.json:{}", "holds a config.json but no weights"),
    (["model.draft_path={tmp}/ckpt"], "ckpt/config.json:{}", "vocab_size=None: not a language model's config"),
    (
        ["model.draft_path={tmp}/ckpt"],
        'ckpt/config.json:{"vocab_size": 64, "model_type": "falcon", "alibi": true}',
        "{tmp}/ckpt is a falcon model with ALiBi position biases, which cannot score a draft tree",
    ),
    (["runtime.torch_threads=-1"], "", "runtime.torch_threads=-1: must be an integer >= 0"),
    (["tracking.spool_dir={tmp}/file"], "file:x", "tracking.spool_dir='{tmp}/file': a file, not a directory"),
    (["tracking.spool_dir={tmp}/file/spool"], "file:x", "is a file, so the spool cannot be created"),
    (["tracking.uri=banana://x"], "", "unknown store scheme 'banana'; must be one of sqlite:"),
    (["tracking.uri=https:///mlflow"], "", "tracking.uri='https:///mlflow': names no server; give https://HOST:PORT"),
    (["tracking.experiment=''"], "", "tracking.experiment='': must name an MLflow experiment"),
    (["tracking.uri=file:{tmp}/file/mlruns"], "file:x", "{tmp}/file is a file, so the store"),
    (["tracking.uri=sqlite:///{tmp}/file/mlflow.db"], "file:x", "{tmp}/file is a file, so the store"),
    (["tracking.uri=sqlite:///{tmp}/dir.db"], "dir.db/x:", "{tmp}/dir.db is a directory, not a SQLite database"),
    (["tracking.uri=postgresql://u@127.0.0.1/db"], "", "its database driver is not installed (no module 'psycopg')"),
    (["cluster.actor_cpus=4", "cluster.num_cpus=2"], "", "the local Ray cluster has 2 CPUs"),
    (["cluster.address=localhost"], "", "cluster.address='localhost': not a Ray address; use null"),
    (["runtime.placement_timeout_s=0"], "", "runtime.placement_timeout_s=0.0: must be >= 1 and <= 86400 (seconds"),
    (["runtime.placement_timeout_s=1e-9"], "", "runtime.placement_timeout_s=1e-09: must be >= 1 and <= 86400 (seconds"),
    (["cluster.target_resources={{node_b: 1}}"], "", "custom resources need runtime=ray attached to a cluster"),
    (["cluster.target_resources={{node_b: x}}"], "", "must be a mapping of Ray resource names to amounts > 0"),
    (
        ["cluster.address=auto", "cluster.draft_resources={{node_b: 1}}"],
        "",
        "with runtime.loop=target the draft runs in rank 0's process",
    ),
    (["drafter.path={tmp}"], "", "drafter=iid drafts with the pair's draft model"),
    (
        ["algorithm=spectr", "algorithm.node_rule=lp", "sampling.top_k=0"],
        "",
        "8,390,657 draft columns (at most 200,000",
    ),
]


def test_a_head_that_does_not_answer_is_named_before_a_run_starts_and_a_plan_needs_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Validation checks the address's form only (a preset cluster's plan is valid on a laptop); before a
    run starts, `attach_errors` asks the head: `auto` as Ray looks it up, finding none in one line, not
    Ray's 20 s of retries (a head that wants a token: tests/runtime/test_job_submission.py)."""
    from ray._private import services

    from speculab.config.attach import attach_errors, reach_errors

    def nowhere(address: str) -> str:
        raise ConnectionError("Could not find any running Ray instance.")

    monkeypatch.setattr(services, "canonicalize_bootstrap_address", nowhere)
    reach_errors.cache_clear()
    try:
        auto = load(["runtime=ray", "cluster.address=auto"])
        validate(auto)
        assert attach_errors(auto)[0].startswith("cluster.address='auto': no Ray cluster runs on this machine")
        for address in ("ray://127.0.0.1:1", "127.0.0.1:1"):
            cfg = load(["runtime=ray", f"cluster.address={address}"])
            validate(cfg)
            (line,) = attach_errors(cfg)
            assert line.startswith(f"cluster.address='{address}': nothing answers at 127.0.0.1:1 within 5 s")
        assert attach_errors(load(["runtime=inline", "cluster.address=127.0.0.1:1"])) == []
    finally:
        reach_errors.cache_clear()


@pytest.mark.parametrize(("overrides", "make", "message"), BAD_SETTINGS, ids=[row[2][:40] for row in BAD_SETTINGS])
def test_every_class_of_bad_setting_is_refused_naming_it(
    tmp_path: Path, overrides: list[str], make: str, message: str
) -> None:
    """Refused by `validate`, in a message naming the setting; a check that hung (a probe with no timeout of
    its own) is left to the suite's timeout, since how long a refusal takes is no claim of this test."""
    if make:
        name, _, text = make.partition(":")
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError) as err:
        validate(load([o.format(tmp=tmp_path) for o in overrides]))
    assert message.format(tmp=tmp_path) in str(err.value)


@pytest.mark.parametrize(
    ("override", "locked", "message"),
    [
        (
            "tracking.uri=sqlite:///{tmp}/ro/mlflow.db",
            "ro/mlflow.db",
            "{tmp}/ro/mlflow.db is not writable by this user",
        ),
        ("tracking.uri=sqlite:///{tmp}/ro/mlflow.db", "ro", "{tmp}/ro is not writable (SQLite writes a journal"),
        ("tracking.uri=sqlite:///{tmp}/ro/new/mlflow.db", "ro", "{tmp}/ro is not writable by this user, so the store"),
        ("tracking.spool_dir={tmp}/ro/spool", "ro", "tracking.spool_dir='{tmp}/ro/spool': {tmp}/ro is not writable"),
    ],
)
def test_a_store_or_spool_this_user_cannot_write_is_refused_naming_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, override: str, locked: str, message: str
) -> None:
    """Read-only files and directories (os.access: as root, chmod alone would not refuse the write)."""
    import os

    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / "mlflow.db").write_bytes(b"")
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != tmp_path / locked and real(path, mode))
    with pytest.raises(ConfigError) as err:
        validate(load([override.format(tmp=tmp_path), "runtime=inline"]))
    assert message.format(tmp=tmp_path) in str(err.value)


# Issue 51: values that passed validation and then crashed mid-run (or decoded fewer prompts than the run
# says), each refused with its one line. {tmp}/one.jsonl holds one prompt.
SEED_RANGE = "must be an integer in [0, 9223372032559808512)"  # 2**63 - 2**32
CRASHING_VALUES: list[tuple[list[str], str]] = [
    (["sampling.seed=18446744073709551616"], "sampling.seed=18446744073709551616: " + SEED_RANGE),
    (["sampling.seed=9223372032559808512"], "sampling.seed=9223372032559808512: " + SEED_RANGE),
    (["sampling.temperature=1e-40"], "sampling.temperature=1e-40: must be 0 (greedy) or at least 1e-06"),
    (["sampling.temperature=9.9e-07"], "sampling.temperature=9.9e-07: must be 0 (greedy) or at least 1e-06"),
    (
        ["dataset.num_prompts=165"],
        "dataset.num_prompts=165: humaneval holds 164 prompts; "
        "must be an integer >= 1 and <= 164, or null (every prompt)",
    ),
    (
        ["dataset=jsonl", "dataset.path={tmp}/one.jsonl", "dataset.num_prompts=5"],
        "dataset.num_prompts=5: dataset.path='{tmp}/one.jsonl' holds 1 prompt; "
        "must be an integer >= 1 and <= 1, or null (every prompt)",
    ),
    (
        ["dataset.sample_seed=-1"],
        "dataset.sample_seed=-1: must be an integer in [0, 9223372032559808512) (a random sample of the prompts) or "
        "null (the first dataset.num_prompts)",
    ),
]


@pytest.mark.parametrize(("overrides", "line"), CRASHING_VALUES, ids=[" ".join(row[0]) for row in CRASHING_VALUES])
def test_values_that_would_crash_mid_run_are_refused_in_one_line(
    weightless_pair_overrides: list[str], tmp_path: Path, overrides: list[str], line: str
) -> None:
    (tmp_path / "one.jsonl").write_text('{"prompt": "a"}\n\n')
    with pytest.raises(ConfigError) as err:
        validate(load([*weightless_pair_overrides, *(o.format(tmp=tmp_path) for o in overrides)]))
    assert str(err.value).splitlines()[1:] == [f"  {line.format(tmp=tmp_path)}"]


@pytest.mark.parametrize(
    "overrides",
    [
        ["sampling.seed=9223372032559808511"],
        ["sampling.seed=0"],
        ["sampling.temperature=1e-06"],
        ["sampling.temperature=0"],
        ["dataset.num_prompts=164"],
        ["dataset.num_prompts=null"],
        ["dataset.sample_seed=null"],
        ["dataset.sample_seed=12345"],
        ["dataset=jsonl", "dataset.path={tmp}/one.jsonl", "dataset.num_prompts=1"],
        ["dataset=jsonl", "dataset.path={tmp}/one.jsonl", "dataset.num_prompts=null"],
    ],
    ids=" ".join,
)
def test_the_boundary_values_are_accepted(
    weightless_pair_overrides: list[str], tmp_path: Path, overrides: list[str]
) -> None:
    (tmp_path / "one.jsonl").write_text('{"prompt": "a"}\n\n')
    validate(load([*weightless_pair_overrides, *(o.format(tmp=tmp_path) for o in overrides)]))


def test_a_checkpoint_whose_index_names_a_missing_shard_is_refused(tmp_path: Path) -> None:
    import shutil

    from support.models import TINY_PAIR

    target = shutil.copytree(TINY_PAIR / "target", tmp_path / "target")
    weight_map = {
        "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
        "lm_head.weight": "model-00002-of-00002.safetensors",
    }
    (target / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(ConfigError) as err:
        validate(load([f"model.target_path={target}"]))
    assert "names 2 shard file(s) missing" in str(err.value) and "model-00001-of-00002.safetensors" in str(err.value)


def test_a_prompt_longer_than_the_context_leaves_room_for_is_refused_naming_it(tmp_path: Path) -> None:
    from speculab.config import prompt_length_errors, resolve
    from support.models import TINY_PAIR

    plan = resolve(load(["runtime=inline", "sampling.max_new_tokens=64"]))
    errors = prompt_length_errors(plan.cfg, TINY_PAIR / "target", [("short", 10), ("long/1", 4401)])
    assert errors == [
        "dataset: prompt 'long/1' has 4401 tokens; with sampling.max_new_tokens=64 and algorithm.L=4 a prompt may "
        "have at most 955 (the target's context is 1024, max_position_embeddings); shorten or drop it, or lower "
        "sampling.max_new_tokens"
    ]


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        (["algorithm=gbv", "algorithm.K=2"], "drafter.ahead=ssd: drafts ahead for one i.i.d. path (algorithm.K=1"),
        (["drafter.ahead_budget=0"], "drafter.ahead_budget=0: must be an integer >= 1 and <= 256"),
        (["runtime.loop=driver"], "drafter.ahead=ssd: with the loop in the driver every draft call is a Ray call"),
    ],
)
def test_drafting_ahead_is_refused_where_it_cannot_run(
    weightless_pair_overrides: list[str], overrides: list[str], line: str
) -> None:
    with pytest.raises(ConfigError) as err:
        validate(load([*weightless_pair_overrides, "runtime=ray", "drafter.ahead=ssd", *overrides]))
    assert line in str(err.value)


def test_drafting_ahead_puts_the_loop_on_the_target_driving_the_draft_actor(weightless_pair_overrides) -> None:
    from speculab.config import resolve

    plan = resolve(
        load([*weightless_pair_overrides, "runtime=ray", "cluster.draft_placement=own", "drafter.ahead=ssd"])
    )
    assert plan.loop == "target" and plan.placement.draft_own
    alone = resolve(load([*weightless_pair_overrides, "runtime=ray", "cluster.draft_placement=own"]))
    assert alone.loop == "driver"  # without drafting ahead, auto keeps the loop in the driver


def count_keys(node: type, at: str = "") -> list[str]:
    """Every integer key of the config's schema (`int` or `int | None`), by its dotted name."""
    import dataclasses
    import typing

    hints = typing.get_type_hints(node)
    found = []
    for field in dataclasses.fields(node):
        hint = hints[field.name]
        if dataclasses.is_dataclass(hint):
            found += count_keys(hint, f"{at}{field.name}.")  # type: ignore[arg-type]
        elif hint in (int, int | None):
            found.append(f"{at}{field.name}")
    return found


COUNT_KEYS = [*count_keys(experiment.Config), "cluster.replicas"]  # replicas: an integer or auto


@pytest.mark.parametrize("key", COUNT_KEYS)
def test_every_integer_key_has_an_upper_bound(key: str, weightless_pair_overrides: list[str]) -> None:
    """A value no workload has (measure.repeats=10**12 read as 181 million hours on the progress bar) is
    refused in one line naming the key and its range, for every integer key the schema has."""
    probe = 2**63  # past every range, seeds' too
    with pytest.raises(ConfigError) as err:
        validate(load([*weightless_pair_overrides, f"{key}={probe}"]))
    assert any(line.strip().startswith(f"{key}={probe}: ") for line in str(err.value).splitlines()), str(err.value)


def test_a_pair_lists_its_dflash2_drafter_beside_its_dflash_one(tmp_path: Path) -> None:
    """model.drafters: drafter=dflash loads the model's draft, drafter=dflash2 the listed checkpoint."""
    from speculab.config.model import locate
    from support.models import DFLASH2, TINY_PAIR, save_random_dflash

    dflash = save_random_dflash(tmp_path / "d", TINY_PAIR / "target", [1, 3, 5], block_size=8)
    dflash2 = save_random_dflash(tmp_path / "d2", TINY_PAIR / "target", [1, 3, 5], block_size=8, dflash2=DFLASH2)
    pair = [
        f"model.target_path={TINY_PAIR / 'target'}",
        f"model.draft_path={dflash}",
        f"+model.drafters={{dflash2: {dflash2}}}",
    ]
    for drafter, where in (("dflash", ("model.draft_path", dflash)), ("dflash2", ("model.drafters.dflash2", dflash2))):
        cfg = load([*pair, f"drafter={drafter}", "algorithm=ddtree"])
        validate(cfg)
        assert locate(cfg, "draft") == where


def test_model_drafters_names_drafters_only(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"model.drafters.dflash3: not a drafter; the keys must be among iid, "):
        validate(load([f"+model.drafters={{dflash3: {tmp_path}}}"]))
