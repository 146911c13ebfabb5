"""The shipped tiny pair on HumanEval: greedy speculative output equals greedy autoregressive
output token for token, for token and block verification, in both runtimes (all of HumanEval inline)."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from speculab.core.autoregressive import autoregressive
from speculab.core.engine import DecodeSettings, decode
from speculab.data import encode_prompt, load_prompts
from speculab.drafting.sampling import SamplingParams
from speculab.models import LMSpec
from speculab.registry import PATH_ALGORITHMS, get_verifier
from speculab.runtime import start_models
from support.models import TINY_PAIR


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["inline", "ray"])
def test_greedy_speculative_equals_autoregressive_on_humaneval(runtime: str, request: pytest.FixtureRequest) -> None:
    if runtime == "ray":
        request.getfixturevalue("ray_pool")  # the inline variant needs no cluster
    tokenizer = AutoTokenizer.from_pretrained(TINY_PAIR / "target")
    # Half of HumanEval inline (82 prompts, 11 batches: the suite's time); on Ray, where every model step is a
    # Ray call, two batches: what the runtime could change (placement, transfers, batching) shows in any.
    prompts = [encode_prompt(p, tokenizer) for p in load_prompts("humaneval", 82 if runtime == "inline" else 16)]
    target, drafter = start_models(
        runtime, LMSpec("hf", str(TINY_PAIR / "target")), LMSpec("hf", str(TINY_PAIR / "draft"))
    )
    settings = DecodeSettings(2, 4, SamplingParams(0.0), 32, 8, 0, tokenizer.eos_token_id)
    reference = [p.tokens for p in autoregressive(target, prompts, settings).prompts]
    for verifier in ("token", "block"):
        run = decode(target, drafter, get_verifier(verifier), prompts, settings)
        assert [p.tokens for p in run.prompts] == reference, verifier
        assert sum(len(p.accepted) for p in run.prompts) < sum(map(len, reference))  # drafts were accepted


@pytest.fixture(scope="module")
def tiny_inline():
    tokenizer = AutoTokenizer.from_pretrained(TINY_PAIR / "target")
    prompts = [encode_prompt(p, tokenizer) for p in load_prompts("humaneval", 3)]
    target, drafter = start_models(
        "inline", LMSpec("hf", str(TINY_PAIR / "target")), LMSpec("hf", str(TINY_PAIR / "draft"))
    )
    return target, drafter, prompts, tokenizer.eos_token_id


@pytest.mark.parametrize("name", PATH_ALGORITHMS)
def test_every_verifier_runs_end_to_end(tiny_inline, name: str) -> None:
    target, drafter, prompts, eos = tiny_inline
    for temperature in (0.0, 0.6, 1.0):
        settings = DecodeSettings(2, 3, SamplingParams(temperature), 16, 2, 0, eos)
        run = decode(target, drafter, get_verifier(name), prompts, settings)
        assert all(len(p.tokens) == 16 or p.stop == "eos" for p in run.prompts)
        if temperature == 0.0:
            assert [p.tokens for p in run.prompts] == [
                p.tokens for p in autoregressive(target, prompts, settings).prompts
            ]
