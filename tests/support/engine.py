"""Decoding fixtures: prompts, settings, toy roles and a plain transformers greedy reference."""

from __future__ import annotations

from typing import Any

import torch

from speculab.core.engine import DecodeSettings
from speculab.core.records import RunResult
from speculab.drafting.sampling import SamplingParams
from speculab.models import DraftModel, LMSpec, TreeTarget
from speculab.models.toy import random_bigram

PROMPTS = [[1, 2, 3, 4, 5], [6, 7], [8, 9, 10], [11]]
TOY_PROMPTS = [[1, 2, 3], [4], [0, 5], [2]]  # vocabulary of 6


def settings(
    K: int = 2, L: int = 3, T: float = 0.0, batch: int = 2, max_new: int = 12, eos: int | None = None, seed: int = 0
) -> DecodeSettings:
    return DecodeSettings(K, L, SamplingParams(T), max_new, batch, seed, eos)


def greedy_reference(target_path: str, prompt: list[int], max_new: int) -> list[int]:
    """Plain transformers greedy decoding, no cache tricks."""
    from speculab.models.hf import load_causal_lm

    model = load_causal_lm(target_path)
    ids = list(prompt)
    with torch.inference_mode():
        for _ in range(max_new):
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt) :]


def toy_roles(seed: int = 0) -> tuple[TreeTarget, DraftModel]:
    g = torch.Generator().manual_seed(seed)
    return TreeTarget(LMSpec("toy", table=random_bigram(6, g))), DraftModel(LMSpec("toy", table=random_bigram(6, g)))


def tiny_pair_batch(
    passes: str, drafter: str, temperature: float, device: str = "cpu", compile: bool = False
) -> tuple[RunResult, TreeTarget, DraftModel]:
    """The tiny pair decodes three prompts of different lengths as one batch (holes, repacks, rows
    leaving; 20 new tokens each) with both models' passes as given (`models.static_pass.PASSES`, compiled
    with `compile`): the run, the target role and the draft model role. drafter: "draft" (GBV over K = 2
    paths of 4) or "dflash" (DDTree, budget 16, on the DFlash drafter)."""
    from speculab.core.engine import decode
    from speculab.drafting.ddtree import TreeDrafter, tree_builder
    from speculab.models.dflash_layout import read_layout
    from speculab.registry import get_verifier
    from support.models import TINY_PAIR

    target_path, draft_path, dflash = (str(TINY_PAIR / name) for name in ("target", "draft", "dflash"))
    if drafter == "dflash":
        layers = read_layout(dflash).target_layer_ids
        target = TreeTarget(
            LMSpec("hf", target_path, device=device, feature_layers=layers, passes=passes, compile=compile)
        )
        draft_model = DraftModel(
            LMSpec("dflash", dflash, device=device, target_path=target_path, passes=passes, compile=compile)
        )
        roles: Any = TreeDrafter(draft_model, tree_builder("best_first", 16))
        verifier, tree_nodes = get_verifier("ddtree"), 17
    else:
        target = TreeTarget(LMSpec("hf", target_path, device=device, passes=passes, compile=compile))
        draft_model = roles = DraftModel(LMSpec("hf", draft_path, device=device, passes=passes, compile=compile))
        verifier, tree_nodes = get_verifier("gbv"), 2 * 4 + 1
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, 60, (n,), generator=g).tolist() for n in (6, 19, 12)]
    settings = DecodeSettings(2, 4, SamplingParams(temperature), 20, 3, 0, None, tree_nodes)
    return decode(target, roles, verifier, prompts, settings), target, draft_model
