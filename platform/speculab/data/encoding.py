"""Turn a ``Prompt`` into the token ids a model is prefilled with.

Instruction prompts (``Prompt.chat``) go through the tokenizer's chat template as a single
user turn followed by the generation prompt, when the tokenizer has a template; every other
prompt is tokenized as plain text. No truncation and no padding happen here.
"""

from __future__ import annotations

from typing import Any

from speculab.data.prompts import Prompt


def encode_prompt(prompt: Prompt, tokenizer: Any) -> list[int]:
    """Token ids of ``prompt`` for ``tokenizer`` (a transformers tokenizer); never empty."""
    if prompt.chat and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt.text}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=True,
        )["input_ids"]
    else:
        # verbose=False: the length check against the target's context is speculab's, in one line
        # (`config.prompt_length_errors`), not transformers' warning about the tokenizer's own limit
        ids = tokenizer(prompt.text, verbose=False)["input_ids"]
    if len(ids) == 0:
        raise ValueError(f"prompt {prompt.id!r} encodes to no tokens")
    return [int(token) for token in ids]
