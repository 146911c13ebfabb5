"""A point's prompts as it will decode them: loaded, encoded with the target's tokenizer and checked against
its context, which only loading can tell (a Hugging Face dataset's size, a prompt's length in tokens)."""

from __future__ import annotations

from dataclasses import dataclass

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from speculab.config.dataset import slice_errors, too_many_prompts
from speculab.config.errors import ConfigError
from speculab.config.model import prompt_length_errors
from speculab.config.plan import RunPlan
from speculab.data import Prompt, encode_prompt, load_prompts


@dataclass(frozen=True)
class PointPrompts:
    """A point's prompts, encoded with the target's tokenizer and checked against its context."""

    prompts: list[Prompt]
    tokenizer: PreTrainedTokenizerBase
    encoded: list[list[int]]  # [prompt][token]


def point_prompts(plan: RunPlan) -> PointPrompts:
    """Load and encode the prompts; ConfigError for what only loading tells (a Hugging Face dataset's
    size, a prompt too long for the target's context), before the point's run exists."""
    cfg = plan.cfg
    d = cfg.dataset
    part = (d.slice[0], d.slice[1]) if d.slice is not None else None
    prompts = load_prompts(d.name, d.num_prompts, d.path, d.sample_seed, part)
    if d.num_prompts is not None and len(prompts) < d.num_prompts and part is None:  # a dataset counted on load
        raise ConfigError.listing([too_many_prompts(cfg.dataset, len(prompts))])
    if part is not None and len(prompts) < part[1] - part[0]:  # a slice past a dataset counted on load
        raise ConfigError.listing(slice_errors(d, part[0] + len(prompts) if prompts else None))
    tokenizer = AutoTokenizer.from_pretrained(str(plan.target_dir))
    encoded = [encode_prompt(p, tokenizer) for p in prompts]
    if errors := prompt_length_errors(cfg, plan.target_dir, [(p.id, len(e)) for p, e in zip(prompts, encoded)]):
        raise ConfigError.listing(errors)
    return PointPrompts(prompts, tokenizer, encoded)
