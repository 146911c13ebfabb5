"""The field's own decoding loop as a baseline: transformers' `generate`, plain or assisted.

Small pure functions over a loaded transformers model (the same object a `TreeLM` wraps),
prompts as token lists and the engine's `DecodeSettings`, so a baseline runs on exactly the
prompts, sampling, budget, eos and batching of the speculab run it is compared with. Each
returns the generated tokens per prompt (cut after the first eos, which is kept, like
`core.engine.truncate`), the wall and CPU seconds of the `generate` calls, and the number of tokens
every target forward carried (a forward pre-hook), which gives target calls and block
efficiency. No I/O, no logging.

`generate` runs in one of two forms (`GenerateForm`, config `measure.generate`): eager, with its
dynamic cache (what a CPU user runs), or compiled, with a static cache and transformers' own
`torch.compile` of the decoding step (its documented fast path, what a GPU user runs). The compiled
form sizes one static cache for the whole point and is warmed untimed at each batch size before it
is timed, so no compilation or CUDA graph recording falls inside a timing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from speculab.core.engine import DecodeSettings

if TYPE_CHECKING:
    from transformers import PreTrainedModel


WARM_UP_TOKENS = 4  # decoding steps of an untimed warm-up: compiled, then recorded as a CUDA graph, then replayed


@dataclass(frozen=True)
class GenerateForm:
    """How `generate` runs for a point: compiled (static cache + torch.compile) or eager, and the static
    cache's length, one for every unit of the point (its widest prompt plus its new tokens), so that
    the compiled step keeps one shape across units."""

    compiled: bool = False
    cache_len: int = 0

    @classmethod
    def of(cls, form: str, prompts: list[list[int]], max_new_tokens: int) -> GenerateForm:
        """form: a resolved `measure.generate` (compiled or eager)."""
        return cls(form == "compiled", max(map(len, prompts), default=0) + max_new_tokens)


@dataclass
class BaselineResult:
    tokens: list[list[int]]  # generated tokens per prompt, eos kept
    wall_s: float
    cpu_s: float  # time.process_time of this process (every thread) during the generate calls
    call_widths: list[int]  # tokens per target forward (batch row 0), prefills included


@contextmanager
def forward_widths(model: PreTrainedModel) -> Iterator[list[int]]:
    """Records the input length of every forward of `model` while the context is open."""
    widths: list[int] = []

    def hook(module: Any, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        widths.append(int(ids.shape[1]) if ids is not None else int(kwargs["inputs_embeds"].shape[1]))

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield widths
    finally:
        handle.remove()


def left_padded(prompts: list[list[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids [B, W] left-padded with pad_token_id and attention_mask [B, W]."""
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros(len(prompts), width, dtype=torch.long)
    for b, prompt in enumerate(prompts):
        ids[b, width - len(prompt) :] = torch.tensor(prompt)
        mask[b, width - len(prompt) :] = 1
    return ids, mask


def cut_at_eos(tokens: list[int], eos: int | None) -> list[int]:
    """Generated tokens up to and including the first eos (what follows is padding)."""
    return tokens[: tokens.index(eos) + 1] if eos is not None and eos in tokens else tokens


def sampling_kwargs(temperature: float) -> dict[str, Any]:
    """generate() arguments for plain sampling at `temperature` (0 = greedy), no truncation."""
    if temperature == 0:
        return {"do_sample": False}
    return {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}


def set_assistant_length(assistant: PreTrainedModel, length: int) -> None:
    """Fixed L: transformers 5 reads these from the assistant's generation_config and ignores
    num_assistant_tokens passed to generate; threshold 0 stops early exits on low confidence."""
    config = assistant.generation_config
    config.num_assistant_tokens = length
    config.num_assistant_tokens_schedule = "constant"
    config.assistant_confidence_threshold = 0.0


def check_assisted_widths(widths: list[int], length: int, num_prompts: int) -> None:
    """Raise unless assisted generation ran at L = length over num_prompts prompts (batch 1): only
    the prefills (the prompt plus the first candidates) carry more than L+1 tokens, and most
    other target calls carry exactly L+1 (fewer: the assistant drafted eos, or the token budget
    cut the candidates)."""
    rounds = [w for w in widths if w <= length + 1]
    if len(widths) - len(rounds) != num_prompts or 2 * rounds.count(length + 1) < len(rounds):
        raise RuntimeError(f"assisted generation did not run at L={length}: target call widths {widths}")


def form_kwargs(form: GenerateForm) -> dict[str, Any]:
    """generate() arguments of a form: nothing for eager; for compiled, a static cache of the point's
    length and transformers' compile config, which it applies on accelerators only unless told
    `_compile_all_devices` (so a compiled form chosen on the CPU compiles there too)."""
    if not form.compiled:
        return {}
    from transformers import CompileConfig

    config = CompileConfig()
    config._compile_all_devices = True  # type: ignore[assignment]  # declared None, read as a flag
    return {"cache_implementation": "static", "max_cache_len": form.cache_len, "compile_config": config}


def generate(
    model: PreTrainedModel,
    prompts: list[list[int]],
    settings: DecodeSettings,
    assistant: PreTrainedModel | None = None,
    form: GenerateForm = GenerateForm(),
    warmed: set[int] | None = None,
) -> BaselineResult:
    """`model.generate` over prompts in batches of settings.batch_size (left padding).

    With an assistant: assisted generation drafting settings.length tokens per round (batch 1
    only, as in transformers). Sampling uses torch's global RNG, seeded per batch with
    settings.seed + the index of the batch's first prompt, like the engine's drafters. A compiled
    form first runs a few untimed steps at each batch size not in `warmed` (the model's, kept by its
    caller across units) and adds it there."""
    warmed = set() if warmed is None else warmed
    if assistant is not None:
        if settings.batch_size != 1:
            raise ValueError("transformers' assisted generation runs batch 1 only")
        set_assistant_length(assistant, settings.length)
    pad = model.generation_config.pad_token_id
    pad = pad if pad is not None else (settings.eos_token_id or 0)
    kwargs = (
        sampling_kwargs(settings.sampling.temperature)
        | {
            "max_new_tokens": settings.max_new_tokens,
            "eos_token_id": settings.eos_token_id,
            "pad_token_id": pad,
            "assistant_model": assistant,
        }
        | form_kwargs(form)
    )
    tokens: list[list[int]] = []
    wall = cpu = 0.0
    with forward_widths(model) as widths:
        for first in range(0, len(prompts), settings.batch_size):
            ids, mask = (t.to(model.device) for t in left_padded(prompts[first : first + settings.batch_size], pad))
            if form.compiled and len(ids) not in warmed:
                before = len(widths)
                with torch.inference_mode():  # untimed: compiles and records this batch size's step
                    model.generate(input_ids=ids, attention_mask=mask, **kwargs | {"max_new_tokens": WARM_UP_TOKENS})  # type: ignore[operator]
                warmed.add(len(ids))
                del widths[before:]  # the warm-up's calls are not the baseline's
            torch.manual_seed(settings.seed + first)
            wall_start, cpu_start = time.perf_counter(), time.process_time()
            with torch.inference_mode():
                out = model.generate(  # type: ignore[operator]  # typed as a Tensor attribute by nn.Module
                    input_ids=ids, attention_mask=mask, **kwargs
                )
            wall += time.perf_counter() - wall_start
            cpu += time.process_time() - cpu_start
            tokens += [cut_at_eos(row, settings.eos_token_id) for row in out[:, ids.shape[1] :].tolist()]
    return BaselineResult(tokens, wall, cpu, widths)
