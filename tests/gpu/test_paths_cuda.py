"""Every decode path of the tiny pair on CUDA, eager and captured, against the CPU: at T = 0 the
same tokens on all three; at T = 1 the same first tokens eager and captured on CUDA (the same draws:
the engine's uniforms come from a CPU generator, the drafter's from its device's, so the CPU itself
draws other paths and is compared at the verifier level in test_verify_cuda).

Why only the first tokens at T = 1: a captured pass attends over the cache's whole capacity, so its
float32 sums run in another order than the eager pass's and its probabilities differ in the last
bits. A draw that lands in that sliver of a decision boundary flips, and the row diverges from
there: on an H100 (2026-11-27), SpecTr's row 1 of this batch first differed at token 15 of 20, and
three other seeds gave equal rows for spectr, specinfer, gbv, nss and token. A wrong mask, slot or
cache write diverges at once (and breaks T = 0 too)."""

from __future__ import annotations

import pytest
import torch

from speculab.core.engine import DecodeSettings, decode
from speculab.drafting.ddtree import TreeDrafter, tree_builder
from speculab.drafting.sampling import SamplingParams
from speculab.models import DraftModel, LMSpec, TreeTarget
from speculab.models.dflash_layout import read_layout
from speculab.registry import ALGORITHMS, PATH_ALGORITHMS, get_verifier
from support.models import TINY_PAIR

pytestmark = pytest.mark.gpu

TARGET, DRAFT, DFLASH = (str(TINY_PAIR / name) for name in ("target", "draft", "dflash"))
# (device, passes): the CPU reference, then CUDA eager and CUDA graphs
PLACES = (("cpu", "eager"), ("cuda", "eager"), ("cuda", "graphs"))
FIRST = 8  # tokens of each row that must agree at T = 1 (module docstring)


def prompts() -> list[list[int]]:
    """Three rows of different lengths: padded rows, holes and repacks in one batch."""
    g = torch.Generator().manual_seed(3)
    return [torch.randint(3, 60, (n,), generator=g).tolist() for n in (6, 19, 12)]


def decode_path(name: str, device: str, passes: str, temperature: float) -> list[list[int]]:
    """Tokens of algorithm `name` on the tiny pair (DDTree on the DFlash drafter, budget 16)."""
    if name == "ddtree":
        layers = read_layout(DFLASH).target_layer_ids
        target = TreeTarget(LMSpec("hf", TARGET, device=device, feature_layers=layers, passes=passes))
        source = DraftModel(LMSpec("dflash", DFLASH, device=device, target_path=TARGET, passes=passes))
        drafter: object = TreeDrafter(source, tree_builder("best_first", 16))
        length = read_layout(DFLASH).block_size - 1
        settings = DecodeSettings(1, length, SamplingParams(temperature), 20, 3, 0, None, 17)
    else:
        k = 2 if ALGORITHMS[name].multi_path and ALGORITHMS[name].lossless(2) else 1
        target = TreeTarget(LMSpec("hf", TARGET, device=device, passes=passes))
        drafter = DraftModel(LMSpec("hf", DRAFT, device=device, passes=passes))
        settings = DecodeSettings(k, 4, SamplingParams(temperature), 20, 3, 0, None, k * 4 + 1)
    run = decode(target, drafter, get_verifier(name), prompts(), settings)  # type: ignore[arg-type]
    return [p.tokens for p in run.prompts]


@pytest.mark.parametrize("name", [*PATH_ALGORITHMS, "ddtree"])
def test_greedy_tokens_are_the_same_on_the_cpu_and_on_cuda_eager_and_captured(name: str) -> None:
    """On a GPU, T = 0: each path verifier on the tiny pair, and DDTree on DFlash, decodes the CPU's tokens
    on CUDA with eager passes and with passes replayed from CUDA graphs."""
    cpu, eager, captured = (decode_path(name, device, passes, 0.0) for device, passes in PLACES)
    assert eager == cpu and captured == cpu


@pytest.mark.parametrize("name", [*PATH_ALGORITHMS, "ddtree"])
def test_sampled_rows_start_the_same_eager_and_captured_on_cuda(name: str) -> None:
    """On a GPU, T = 1: each row's first FIRST tokens are the same with eager and captured passes on CUDA,
    for the same draws (the module docstring says why not every token)."""
    eager, captured = (decode_path(name, "cuda", passes, 1.0) for _, passes in PLACES[1:])
    assert [row[:FIRST] for row in captured] == [row[:FIRST] for row in eager]
