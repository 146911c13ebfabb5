"""Nothing runs on weights it did not load (`models.tensors`, `config.checkpoints`): every tensor a checkpoint's
model needs is checked by name and shape against its config from the safetensors headers before any weight
loads, for both roles and every family (Llama and Qwen3 from the config alone, the same layout as
transformers' model; others by transformers' loading report on the meta device; DFlash by its module);
missing, misshaped, unused and untied-without-a-head tensors are refused in one line naming the file and the
tensor; config and tokenizer files are read as typed values; a weights file that is not a regular file is
refused without opening it; and non-finite weights are refused as they load, naming the tensor."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from speculab.config import ConfigError, validate
from speculab.models.checkpoint_lm import checkpoint_lm
from speculab.models.hf import load_causal_lm
from speculab.models.tensors import needed_shapes
from speculab.models.weights import WeightsError
from support.cli import runs, small_run, speculab
from support.configs import load
from support.models import TINY_PAIR, save_random_lm, save_random_opt

Tensors = dict[str, torch.Tensor]


@pytest.mark.parametrize(
    "arch, config",
    [
        ("llama", {}),
        ("llama", {"tie_word_embeddings": True, "attention_bias": True, "mlp_bias": True}),
        ("llama", {"head_dim": 16, "num_key_value_heads": 1}),
        ("qwen3", {}),
        ("qwen3", {"tie_word_embeddings": True, "attention_bias": True}),
    ],
)
def test_the_layout_read_from_the_config_is_transformers_models(arch: str, config: dict) -> None:
    """`needed_shapes` (a Llama's or a Qwen3's tensors, from its config alone, so that validation imports no
    model code) against the parameters of transformers' own model of the config, tied head left out."""
    from transformers import AutoConfig, AutoModelForCausalLM

    parsed = AutoConfig.for_model(
        arch, vocab_size=50, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, **config
    )
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(parsed)
    assert needed_shapes(parsed) == {name: tuple(p.shape) for name, p in model.named_parameters()}


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random untied Llama with the character tokenizer (vocabulary 128, the draft of the pair below)."""
    return save_random_lm(tmp_path_factory.mktemp("llama") / "lm", 2, 32, seed=4)


def damaged(source: Path, into: Path, tensors: Callable[[Tensors], None] = lambda t: None, **config: object) -> Path:
    """A copy of `source` with its tensors edited by `tensors` and `config` written into its config.json."""
    shutil.copytree(source, into)
    weights = load_file(into / "model.safetensors")
    tensors(weights)
    save_file(weights, into / "model.safetensors", metadata={"format": "pt"})
    if config:
        entries = json.loads((into / "config.json").read_text())
        (into / "config.json").write_text(json.dumps(entries | config))
    return into


def refused(target: Path, draft: Path) -> str:
    """The one line validation refuses the pair with."""
    with pytest.raises(ConfigError) as err:
        validate(load([f"model.target_path={target}", f"model.draft_path={draft}"]))
    lines = [line.strip() for line in str(err.value).splitlines()[1:]]
    assert len(lines) == 1, lines
    return lines[0]


def swapped(key: str, value: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[Tensors], None]:
    return lambda tensors: tensors.update({key: value(tensors[key])})


DAMAGES: dict[str, tuple[Callable[[Tensors], None], dict, list[str]]] = {
    # name: (what is done to the tensors, to config.json; what the refusal names)
    "no head, untied": (lambda t: t.pop("lm_head.weight"), {}, ["no tensor lm_head.weight", "tie_word_embeddings"]),
    "a layer's tensor missing": (
        lambda t: t.pop("model.layers.1.mlp.down_proj.weight"),
        {},
        ["no tensor model.layers.1.mlp.down_proj.weight", "needs"],
    ),
    "a projection transposed": (
        swapped("model.layers.0.self_attn.k_proj.weight", lambda w: w.T.contiguous()),
        {},
        ["model.safetensors: model.layers.0.self_attn.k_proj.weight is [32, 16], config.json needs [16, 32]"],
    ),
    "embeddings short of vocab_size": (
        swapped("model.embed_tokens.weight", lambda w: w[:120].contiguous()),
        {},
        ["model.embed_tokens.weight is [120, 32], config.json needs [128, 32] (vocab_size 128 rows)"],
    ),
    "a bias the config leaves out": (
        lambda t: t.update({"model.layers.0.self_attn.q_proj.bias": torch.zeros(32)}),
        {},
        ["model.layers.0.self_attn.q_proj.bias", "the config and the weights disagree"],
    ),
    "weights stored as integers": (
        lambda t: t.update({k: (v * 100).to(torch.int8) for k, v in t.items()}),
        {},
        ["tensors stored as integers with no quantization_config", "I8", "save them in a float dtype"],
    ),
    "a layer more than the config": (
        lambda t: t.update({"model.layers.2.input_layernorm.weight": torch.ones(32)}),
        {},
        ["model.layers.2.input_layernorm.weight", "no tensor of its config's model (llama)"],
    ),
}


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("role", ["target", "draft"])
def test_a_damaged_checkpoint_is_refused_in_one_line_before_any_weight_loads(
    damage: str, role: str, llama: Path, tmp_path: Path
) -> None:
    edit, config, named = DAMAGES[damage]
    bad = damaged(llama, tmp_path / "bad", edit, **config)
    line = refused(*((bad, llama) if role == "target" else (llama, bad)))
    assert line.startswith(f"model.{role}_path: {bad}") and all(part in line for part in named), line


def test_the_shipped_pair_and_a_saved_checkpoint_of_each_family_pass(llama: Path, tmp_path: Path) -> None:
    validate(load([f"model.target_path={TINY_PAIR / 'target'}", f"model.draft_path={TINY_PAIR / 'draft'}"]))
    validate(load([f"model.target_path={llama}", f"model.draft_path={llama}"]))
    for arch in ("qwen3", "qwen3_moe"):
        saved = save_random_lm(tmp_path / arch, 2, 32, arch=arch)
        validate(load([f"model.target_path={saved}", f"model.draft_path={llama}"]))
    validate(load([f"model.target_path={save_random_opt(tmp_path / 'opt', 2, 32)}", f"model.draft_path={llama}"]))


def test_another_family_is_checked_by_transformers_report(llama: Path, tmp_path: Path) -> None:
    """OPT: a missing tensor and a misshaped one, as transformers' loading on the meta device finds them."""
    opt = save_random_opt(tmp_path / "opt", 2, 32)
    missing = damaged(opt, tmp_path / "missing", lambda t: t.pop("model.decoder.layers.1.fc2.weight"))
    assert "no tensor model.decoder.layers.1.fc2.weight" in refused(missing, llama)
    rows = damaged(opt, tmp_path / "rows", swapped("model.decoder.embed_tokens.weight", lambda w: w[:100]))
    assert "model.decoder.embed_tokens.weight is [100, 32], config.json needs [128, 32]" in refused(rows, llama)


def test_a_dflash_drafter_missing_a_tensor_is_refused(tmp_path: Path) -> None:
    bad = damaged(TINY_PAIR / "dflash", tmp_path / "dflash", lambda t: t.pop("fc.weight"))
    with pytest.raises(ConfigError, match=r"model.draft_path: .*dflash: no tensor fc.weight in its weights"):
        validate(load(["model=tiny-pycode_dflash", "drafter=dflash", "algorithm=ddtree", f"model.draft_path={bad}"]))


@pytest.mark.parametrize(
    "edit, named",
    [
        ({"vocab_size": "128"}, "config.json: vocab_size='128': must be a positive integer"),
        ({"num_hidden_layers": 2.5}, "config.json: num_hidden_layers=2.5: must be a positive integer"),
        ({"tie_word_embeddings": "false"}, "config.json: tie_word_embeddings='false': must be true or false"),
        ({"model_type": 7}, "config.json: model_type=7: must be a string"),
    ],
)
def test_config_json_values_of_the_wrong_type_are_refused_in_one_line(
    edit: dict, named: str, llama: Path, tmp_path: Path
) -> None:
    bad = damaged(llama, tmp_path / "bad", **edit)
    line = refused(llama, bad)
    assert line.startswith(f"model.draft_path: {bad}/") and named in line, line


@pytest.mark.parametrize(
    "file, content, named",
    [
        ("tokenizer.json", '{"model": null}', "tokenizer.json: model=None: not a tokenizer's"),
        ("tokenizer.json", '{"model": {"vocab": 3}}', "tokenizer.json: model={'vocab': 3}: not a tokenizer's"),
        ("model.safetensors.index.json", "{not json", "model.safetensors.index.json is not valid JSON"),
    ],
)
def test_a_tokenizer_or_an_index_that_is_not_what_it_names_is_refused(
    file: str, content: str, named: str, llama: Path, tmp_path: Path
) -> None:
    bad = damaged(llama, tmp_path / "bad")
    (bad / file).write_text(content)
    assert named in refused(llama, bad)


@pytest.mark.parametrize("file", ["model.safetensors", "tokenizer.json"])
def test_a_file_that_is_not_a_regular_file_is_refused_without_opening_it(
    file: str, llama: Path, tmp_path: Path
) -> None:
    """A FIFO: opening it to read would wait for a writer for ever."""
    bad = damaged(llama, tmp_path / "bad")
    (bad / file).unlink()
    os.mkfifo(bad / file)
    assert f"{bad / file} is not a regular file" in refused(llama, bad)


def test_a_weights_file_that_leads_nowhere_is_refused_as_what_it_is(llama: Path, tmp_path: Path) -> None:
    """A loop of symbolic links, and a link to nothing: not a 'not complete' file to download again."""
    bad = damaged(llama, tmp_path / "bad")
    (bad / "model.safetensors").unlink()
    (bad / "model.safetensors").symlink_to(bad / "loop")
    (bad / "loop").symlink_to(bad / "model.safetensors")
    assert f"{bad / 'model.safetensors'} is a loop of symbolic links, not a file" in refused(llama, bad)
    (bad / "loop").unlink()
    assert f"is a symbolic link to {bad / 'loop'}, which does not exist" in refused(llama, bad)


def non_finite(source: Path, into: Path, key: str, value: float) -> Path:
    def spoil(tensors: Tensors) -> None:
        weight = tensors[key].clone()
        weight.view(-1)[7] = value
        tensors[key] = weight

    return damaged(source, into, spoil)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_weights_are_refused_as_they_load_naming_the_file_and_the_tensor(
    value: float, llama: Path, tmp_path: Path
) -> None:
    """Read without transformers' classes (a Llama) and by transformers (OPT) alike."""
    bad = non_finite(llama, tmp_path / "llama", "model.layers.1.mlp.up_proj.weight", value)
    with pytest.raises(WeightsError, match=rf"{bad}/model.safetensors: tensor model.layers.1.mlp.up_proj.weight holds"):
        checkpoint_lm(bad)
    key = "model.decoder.embed_tokens.weight"  # OPT's head too
    opt = non_finite(save_random_opt(tmp_path / "opt", 2, 32), tmp_path / "bad_opt", key, value)
    with pytest.raises(WeightsError, match=rf"bad_opt/model.safetensors: tensor {key} holds NaN or inf"):
        load_causal_lm(opt)


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["inline", "ray"])
def test_a_run_on_non_finite_weights_ends_in_one_line_with_nothing_left_running(runtime: str, tmp_path: Path) -> None:
    draft = non_finite(TINY_PAIR / "draft", tmp_path / "draft", "model.layers.0.mlp.up_proj.weight", float("nan"))
    store = tmp_path / "mlflow.db"
    args = [*small_run((TINY_PAIR / "target", draft), store), f"runtime={runtime}", "runtime.torch_threads=1"]
    done = speculab([*args, "baseline_hf=false"], tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "tensor model.layers.0.mlp.up_proj.weight holds NaN or inf values" in done.stderr
    assert {run.info.status for run in runs(store)} <= {"FAILED"}


def test_finite_half_precision_weights_whose_sum_overflows_are_not_refused() -> None:
    """The check sums each tensor in its own dtype (memory speed); a float16 sum of finite weights can pass
    65504, so a sum that is not finite is looked at element by element before anything is refused."""
    from speculab.models.weights import refuse_non_finite

    ones = torch.ones(100_000, dtype=torch.float16)
    assert not torch.isfinite(ones.sum())  # 100,000 > 65,504
    refuse_non_finite("ckpt", [("model.norm.weight", ones)])
    spoiled = ones.clone()
    spoiled[5] = float("inf")
    with pytest.raises(WeightsError, match="ckpt: tensor model.norm.weight holds NaN or inf"):
        refuse_non_finite("ckpt", [("model.norm.weight", spoiled)])
