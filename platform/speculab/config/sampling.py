"""How a point decodes: `sampling.*` (how each token is drawn, how many prompts a round decodes
together) and `measure.*` (how many times each batch is decoded), with the checks of their values."""

from __future__ import annotations

import math
from dataclasses import dataclass

from speculab.config.errors import at_least


@dataclass
class SamplingConfig:
    temperature: float = 1.0
    top_p: float = 1.0  # draft only
    top_k: int = 0  # draft only; 0 = no limit
    max_new_tokens: int = 64
    seed: int = 0
    batch_size: int = 1  # prompts decoded together per round


# `measure.generate`: the form of transformers' generate that `baseline_hf` times (`speculab.baselines`)
GENERATE_FORMS = {
    "auto": "compiled on a GPU, eager on the CPU",
    "compiled": "static cache + torch.compile",
    "eager": "eager, dynamic cache",
}


@dataclass
class MeasureConfig:
    repeats: int = 3  # each unit (batch of prompts) decoded this many times by every method, interleaved
    generate: str = "auto"  # baseline_hf's form, one of GENERATE_FORMS; a plan resolves auto by the target's device


def generate_form(choice: str, device: str) -> str:
    """`measure.generate` resolved for a target on `device`: auto is compiled on a GPU (transformers'
    documented fast path there) and eager elsewhere (compiling on the CPU takes minutes, and a CPU
    user runs generate eagerly)."""
    if choice == "auto":
        return "compiled" if device.startswith("cuda") else "eager"
    return choice


def sampling_errors(s: SamplingConfig, m: MeasureConfig) -> list[str]:
    """A finite temperature >= 0, top_p in (0, 1], and counts at their least."""
    errors: list[str] = []
    if not (math.isfinite(s.temperature) and s.temperature >= 0):
        errors.append(f"sampling.temperature={s.temperature}: must be a finite number >= 0 (0 = greedy)")
    if not 0 < s.top_p <= 1:
        errors.append(f"sampling.top_p={s.top_p}: must be in (0, 1]")
    at_least(errors, "sampling.top_k", s.top_k, 0)
    at_least(errors, "sampling.max_new_tokens", s.max_new_tokens, 1)
    at_least(errors, "sampling.batch_size", s.batch_size, 1)
    at_least(errors, "sampling.seed", s.seed, 0)
    at_least(errors, "measure.repeats", m.repeats, 1)
    if m.generate not in GENERATE_FORMS:
        errors.append(f"measure.generate={m.generate}: must be one of {', '.join(GENERATE_FORMS)}")
    return errors
