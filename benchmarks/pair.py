"""The local target/draft pair and HumanEval prompts that the end-to-end benchmarks decode."""

from __future__ import annotations

from dataclasses import dataclass

from transformers import AutoTokenizer

from speculab.config import resolve_path
from speculab.data import encode_prompt, load_prompts
from speculab.models import DraftModel, LMSpec, TreeTarget


@dataclass
class Pair:
    prompts: list[list[int]]  # encoded HumanEval prompts
    eos_token_id: int | None
    target: TreeTarget
    drafter: DraftModel


def load_pair(model_dir: str, num_prompts: int) -> Pair:
    """`model_dir`/{target,draft} (relative: from the project root) and the first `num_prompts` prompts."""
    root = resolve_path(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(root / "target")
    prompts = [encode_prompt(p, tokenizer) for p in load_prompts("humaneval", num_prompts)]
    target = TreeTarget(LMSpec("hf", str(root / "target")))
    return Pair(prompts, tokenizer.eos_token_id, target, DraftModel(LMSpec("hf", str(root / "draft"))))
