"""The tiny pair as the loop tests load it (one torch thread a process) and a two-unit point over two
HumanEval prompts, for the decode loop at TP = 1 and 2, inline and on Ray."""

from __future__ import annotations

from dataclasses import replace

from transformers import AutoTokenizer

from speculab.core.engine import DecodeSettings
from speculab.core.records import RunResult
from speculab.data import encode_prompt, load_prompts
from speculab.drafting.sampling import SamplingParams
from speculab.models import LMSpec
from speculab.runtime.loop import PointWork
from support.models import TINY_PAIR

TARGET, DRAFT = LMSpec("hf", str(TINY_PAIR / "target"), threads=1), LMSpec("hf", str(TINY_PAIR / "draft"), threads=1)
TP2 = replace(TARGET, tp_size=2)
DRAFT_TP2 = replace(DRAFT, tp_size=2)  # cluster.draft_placement=sharded: a draft shard on each target rank


def plan(temperature: float, algorithm: str = "block", drafter: str = "iid") -> PointWork:
    tokenizer = AutoTokenizer.from_pretrained(TINY_PAIR / "target")
    prompts = [encode_prompt(p, tokenizer) for p in load_prompts("humaneval", 2)]
    settings = DecodeSettings(1, 3, SamplingParams(temperature), 20, 1, 5, tokenizer.eos_token_id)
    units = ((0, prompts[:1]), (1, prompts[1:]))
    return PointWork(algorithm, "kseq", drafter, "best_first", 16, (), 2, units, settings)


def tokens(loop: object, method: str) -> list[list[int]]:
    found: list[list[int]] = []
    for unit in range(2):
        result = loop.decode_unit(method, unit, 0).result  # type: ignore[attr-defined]
        found += [p.tokens for p in result.prompts] if isinstance(result, RunResult) else result.tokens
    return found
