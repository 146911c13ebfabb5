"""How a point decodes: `sampling.*` (how each token is drawn, how many prompts a round decodes
together) and `measure.*` (how many times each batch is decoded), with the checks of their values."""

from __future__ import annotations

import math
from dataclasses import dataclass

from speculab.config.errors import within


@dataclass
class SamplingConfig:
    temperature: float = 1.0
    top_p: float = 1.0  # draft only
    top_k: int = 0  # draft only; 0 = no limit
    max_new_tokens: int = 64
    seed: int = 0
    batch_size: int = 1  # prompts decoded together per round


# The least temperature above 0 (greedy). `tempered_probs` takes a float32 softmax of logits / T: at
# T <= 1e-6 a logit gap of 1e-3 or more becomes >= 1000, and exp(-1000) is 0 in float32, so every
# token but the argmax already has probability 0 and T decodes as greedy (use 0); far below, logits / T
# overflows float32 to inf, the probabilities turn NaN and a sampled id falls outside the vocabulary.
MIN_TEMPERATURE = 1e-6

# One past the largest seed. A unit seeds its generators with `sampling.seed` + the index of its first
# prompt (+ 1 for its paired comparison), and torch's manual_seed raises mid-run on a seed past 64 bits;
# the sum is kept a signed 64-bit integer (below 2**63), which every generator and store takes as is,
# and 2**32 of headroom covers the prompt index of any run.
SEED_LIMIT = 2**63 - 2**32
# Every count has an upper bound too: a value past it is a typo, not a workload (10**12 repetitions read as
# 181 million hours on the progress bar)
TOP_K_RANGE = (0, 1 << 20)  # sampling.top_k (0: no limit; one above the vocabulary limits nothing either)
NEW_TOKENS_RANGE = (1, 1 << 20)  # sampling.max_new_tokens (the target's context bounds it further)
BATCH_RANGE = (1, 4096)  # sampling.batch_size
MEASURE_REPEATS_RANGE = (1, 1000)  # measure.repeats


# `measure.generate`: the form of transformers' generate that `baseline_hf` times (`speculab.models.generate`)
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
    """A finite temperature, 0 or at least MIN_TEMPERATURE; top_p in (0, 1]; a seed below SEED_LIMIT;
    and counts within their ranges."""
    errors: list[str] = []
    if not (math.isfinite(s.temperature) and s.temperature >= 0):
        errors.append(f"sampling.temperature={s.temperature}: must be a finite number >= 0 (0 = greedy)")
    elif 0 < s.temperature < MIN_TEMPERATURE:
        errors.append(f"sampling.temperature={s.temperature}: must be 0 (greedy) or at least {MIN_TEMPERATURE}")
    if not 0 < s.top_p <= 1:
        errors.append(f"sampling.top_p={s.top_p}: must be in (0, 1]")
    within(errors, "sampling.top_k", s.top_k, TOP_K_RANGE)
    within(errors, "sampling.max_new_tokens", s.max_new_tokens, NEW_TOKENS_RANGE)
    within(errors, "sampling.batch_size", s.batch_size, BATCH_RANGE)
    if not 0 <= s.seed < SEED_LIMIT:
        errors.append(f"sampling.seed={s.seed}: must be an integer in [0, {SEED_LIMIT})")
    within(errors, "measure.repeats", m.repeats, MEASURE_REPEATS_RANGE)
    if m.generate not in GENERATE_FORMS:
        errors.append(f"measure.generate={m.generate}: must be one of {', '.join(GENERATE_FORMS)}")
    return errors
