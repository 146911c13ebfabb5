"""The DFlash2 drafter: vLLM's qwen3_dflash2 layout loads exactly; its block's logits and its selector's
candidates and scores equal a slow reference written from the layout's maths; a checkpoint with missing or
misshaped convolution or selector tensors, or a config naming only part of DFlash2's settings, is refused
in one line before any weight loads; and each drafter name takes only its own kind of checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from speculab.models.dflash import DFlash2LM, DFlashLM, load_dflash, load_dflash_lm
from speculab.models.dflash_layout import dflash_layout
from speculab.models.roles import aligned_valid
from speculab.models.tensors import weight_problems
from support.dflash_reference import reference_hidden, reference_selector
from support.models import DFLASH2, save_random_dflash

LAYER_IDS = [0, 2]


@pytest.fixture(scope="module")
def dflash2_pair(random_llama_pair, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(target, DFlash2 drafter) on the random 3-layer Llama target, block size 8."""
    target = random_llama_pair[0]
    return target, save_random_dflash(tmp_path_factory.mktemp("dflash2") / "d", target, LAYER_IDS, dflash2=DFLASH2)


def weights_of(path: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(path / "model.safetensors"), framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open is not a dict)


def test_the_published_layout_loads_with_no_missing_or_unexpected_key(dflash2_pair) -> None:
    target, draft = dflash2_pair
    keys = set(weights_of(draft))
    assert {"layers.0.attention_conv.base_kernel", "candidate_selector.successor_codebook"} <= keys
    assert set(load_dflash(draft).state_dict()) == keys
    assert isinstance(load_dflash_lm(draft, target), DFlash2LM)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_block_law_equals_the_reference(dflash2_pair, temperature: float) -> None:
    """Two rows of different context lengths: the candidates (top K of the block's logits) and the
    conditionals (softmax of the selector's scores at T) of every drafted position."""
    target, draft = dflash2_pair
    lm = load_dflash_lm(draft, target)
    assert isinstance(lm, DFlash2LM)
    config, weights = json.loads((draft / "config.json").read_text()), weights_of(draft)
    width = len(LAYER_IDS) * config["hidden_size"]
    gen = torch.Generator().manual_seed(0)
    contexts = [torch.randn(6, width, generator=gen), torch.randn(3, width, generator=gen)]
    lm.reset(2)
    features = torch.zeros(2, 6, width)
    features[0], features[1, 3:] = contexts[0], contexts[1]
    lm.absorb(features, aligned_valid([6, 3], 6, right=True))
    roots = [[5], [40]]
    law = lm.block_law(roots, 6, temperature)
    for b, context in enumerate(contexts):
        hidden = reference_hidden(weights, config, lm.embed, context, [roots[b][0]] + [0] * 7, len(context))[1:7]
        candidates, scores = reference_selector(weights, config, hidden, hidden @ lm.head.T, roots[b][0])
        assert torch.equal(law.candidates[b], candidates)
        want = torch.softmax(scores / temperature, dim=-1)
        torch.testing.assert_close(law.conditionals[b], want, atol=1e-5, rtol=1e-4)


def test_at_temperature_zero_the_law_is_the_selector_s_best_path(dflash2_pair) -> None:
    target, draft = dflash2_pair
    lm = load_dflash_lm(draft, target)
    assert isinstance(lm, DFlash2LM)
    lm.reset(1)
    lm.absorb(torch.randn(1, 4, 2 * 64, generator=torch.Generator().manual_seed(1)), torch.ones(1, 4, dtype=torch.bool))
    warm, greedy = lm.block_law([[7]], 5, 1.0), lm.block_law([[7]], 5, 0.0)
    assert torch.equal(greedy.candidates, warm.candidates)
    assert torch.equal(greedy.conditionals, torch.nn.functional.one_hot(warm.conditionals.argmax(-1), 4).float())


def test_a_dflash_checkpoint_still_loads_as_dflash(random_llama_pair, tmp_path: Path) -> None:
    target = random_llama_pair[0]
    draft = save_random_dflash(tmp_path / "d", target, LAYER_IDS)
    assert type(load_dflash_lm(draft, target)) is DFlashLM


@pytest.mark.parametrize(
    ("key", "change"),
    [
        ("candidate_selector.hidden_projection.weight", "drop"),
        ("layers.1.mlp_conv.kernel_projection.weight", "drop"),
        ("candidate_selector.predecessor_codebook", "shape"),
        ("layers.0.attention_conv.base_kernel", "shape"),
    ],
)
def test_missing_or_misshaped_selector_or_conv_tensors_are_refused_in_one_line(
    dflash2_pair, tmp_path: Path, key: str, change: str
) -> None:
    draft = dflash2_pair[1]
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text((draft / "config.json").read_text())
    tensors = weights_of(draft)
    if change == "drop":
        del tensors[key]
    else:
        tensors[key] = tensors[key][..., :-1].contiguous()
    save_file(tensors, str(bad / "model.safetensors"))
    problems = weight_problems(bad, json.loads((bad / "config.json").read_text()))
    assert len(problems) == 1 and key in problems[0], problems
    assert ("no tensor" if change == "drop" else "shaped otherwise") in problems[0]


@pytest.mark.parametrize("dropped", ["conv_kernel_size", "selector_top_k"])
def test_a_config_naming_part_of_dflash2_is_refused_by_key(dflash2_pair, dropped: str) -> None:
    config = json.loads((dflash2_pair[1] / "config.json").read_text())
    del config["dflash_config"][dropped]
    layout, errors = dflash_layout(config)
    assert layout is None and errors == [
        f"{dropped}=None: must be a positive integer (DFlash2 names all of conv_kernel_size, conv_group_size, "
        "selector_rank, selector_top_k)"
    ]


def test_a_group_size_that_does_not_divide_the_width_is_refused(dflash2_pair) -> None:
    config = json.loads((dflash2_pair[1] / "config.json").read_text())
    config["dflash_config"]["conv_group_size"] = 24
    assert dflash_layout(config)[1] == ["dflash_config.conv_group_size=24: must divide hidden_size=64"]


def test_the_convolution_stays_within_each_block() -> None:
    """Training runs several blocks in one pass: each convolves as it would alone."""
    from speculab.models.lean import block_convolve

    gen = torch.Generator().manual_seed(2)
    x, delta = torch.randn(2, 12, 32, generator=gen), torch.randn(2, 12, 3, 2, generator=gen)
    base = torch.randn(3, 32, generator=gen)
    together = block_convolve(x, delta, base, 16, 4)
    alone = torch.cat([block_convolve(x[:, i : i + 4], delta[:, i : i + 4], base, 16, 4) for i in (0, 4, 8)], dim=1)
    torch.testing.assert_close(together, alone)
