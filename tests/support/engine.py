"""Decoding fixtures: prompts, settings, toy roles and a plain transformers greedy reference."""

from __future__ import annotations

import torch

from speculab.drafting.sampling import SamplingParams
from speculab.engine import DecodeSettings
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
