"""The engine's autoregressive loop against transformers' `generate`, for every decoder family `generate` runs.

    PYTHONPATH=platform python benchmarks/families.py [--reps 3] [--prompts 4] [--max-new-tokens 32]
        [--layers 4] [--hidden 128] [--threads 1] [--families llama qwen2 ... falcon]

Issues 52 (item 2) and 61 (item 7): the loop that sets `speedup_vs_ar` must be at least as fast as
what a user would otherwise run, in every family (`FAMILIES`: Llama, Qwen2, Qwen3, Qwen3-MoE,
Mistral, Gemma, Phi-3, OPT and OPT-350m's shape, GPT-2, GPT-NeoX, Falcon). Per family, one
random-weight model of the same small size (`--layers`, `--hidden`, 4 heads, a 512-token vocabulary;
the family's own defaults otherwise, `family_config`) is built in this process with SDPA attention,
and both loops decode the same random prompts greedily (T = 0, batch 1, no eos) on the same model
object: transformers' `generate` (eager, its dynamic cache: the CPU's form) and speculab's
`autoregressive` (TreeTarget: the lean stack where the family runs on it, `models.families.runs_lean`,
else transformers' forward over speculab's slot cache). The two alternate, `--reps` times each, and
the figure is generated tokens over CPU seconds of this process; the ratio is the median [min-max]
of per-repetition ratios. "equal" counts prompts whose tokens match.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from rich.console import Console
from rich.table import Table
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel

from speculab.core.autoregressive import autoregressive
from speculab.core.engine import DecodeSettings
from speculab.drafting.sampling import SamplingParams
from speculab.models import LMSpec, TreeTarget, runs_lean
from speculab.models.generate import generate

VOCAB = 512


FAMILIES = (
    "llama",
    "qwen2",
    "qwen3",
    "qwen3_moe",
    "mistral",
    "gemma",
    "phi3",
    "opt",
    "opt-350m",
    "gpt2",
    "gpt_neox",
    "falcon",
)


def family_config(family: str, hidden: int) -> dict[str, object]:
    """What a family's config takes beyond the shared sizes: its MLP's width under its own name (2 x hidden),
    grouped keys (2 key heads) where the family has them. opt-350m: OPT-350m's shape (norms after each block,
    a narrower embedding projected in and out); qwen3_moe: 8 experts, 2 a token (Qwen3-30B-A3B's 128 and 8
    scaled down); falcon: Falcon-7B's shape (one key head, attention and MLP in parallel)."""
    grouped = dict(num_key_value_heads=2, head_dim=hidden // 4, intermediate_size=2 * hidden)
    post = family == "opt-350m"
    return {
        "qwen3_moe": grouped | dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=hidden),
        "opt": dict(ffn_dim=2 * hidden, do_layer_norm_before=not post, word_embed_proj_dim=hidden // (1 + post)),
        "gpt2": dict(n_inner=2 * hidden),
        "gpt_neox": dict(intermediate_size=2 * hidden),
        "falcon": dict(ffn_hidden_size=2 * hidden),
    }.get(family.removesuffix("-350m"), grouped)


def build(family: str, layers: int, hidden: int) -> PreTrainedModel:
    """A random model of `family` (`FAMILIES`): its config class's defaults but for the sizes, SDPA attention."""
    shared = dict(vocab_size=VOCAB, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4)
    shared |= dict(max_position_embeddings=1024, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model_type = family.removesuffix("-350m")
    config = AutoConfig.for_model(model_type, **shared, **family_config(family, hidden), attn_implementation="sdpa")
    return AutoModelForCausalLM.from_config(config).eval()


def timed(decode: Callable[[], list[list[int]]]) -> tuple[list[list[int]], float]:
    start = time.process_time()
    tokens = decode()
    return tokens, time.process_time() - start


def measure(family: str, args: argparse.Namespace) -> list[str]:
    torch.manual_seed(0)
    model = build(family, args.layers, args.hidden)
    target = TreeTarget(LMSpec("hf", model=model))
    g = torch.Generator().manual_seed(1)
    prompts = [
        torch.randint(3, VOCAB, (int(n),), generator=g).tolist()
        for n in torch.randint(24, 64, (args.prompts,), generator=g)
    ]
    settings = DecodeSettings(1, 0, SamplingParams(0.0), args.max_new_tokens, 1, 0, None)
    loops = {
        "generate": lambda: generate(model, prompts, settings).tokens,
        "speculab": lambda: [p.tokens for p in autoregressive(target, prompts, settings).prompts],
    }
    for loop in loops.values():  # warm-up, untimed
        loop()
    rates: dict[str, list[float]] = {name: [] for name in loops}
    tokens: dict[str, list[list[int]]] = {}
    for rep in range(args.reps):
        for name in list(loops)[rep % 2 :] + list(loops)[: rep % 2]:  # alternate who goes first
            tokens[name], cpu_s = timed(loops[name])
            rates[name].append(sum(map(len, tokens[name])) / cpu_s)
    ratios = [s / g for s, g in zip(rates["speculab"], rates["generate"])]
    equal = sum(a == b for a, b in zip(tokens["speculab"], tokens["generate"]))
    lean = "lean" if runs_lean(model) else "transformers' forward"
    return [
        family,
        lean,
        f"{statistics.median(rates['generate']):.1f}",
        f"{statistics.median(rates['speculab']):.1f}",
        f"{statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]",
        f"{equal}/{len(prompts)}",
    ]


def main(argv: list[str] | None = None) -> list[list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = [measure(family, args) for family in args.families]
    shape = f"{args.prompts} prompts x {args.max_new_tokens} tokens, {args.reps} reps"
    table = Table(title=f"autoregressive, CPU tokens/s, T = 0, batch 1, {shape}")
    for column in ("family", "speculab's stack", "generate", "speculab", "speculab / generate", "equal"):
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    Console().print(table)
    return rows


if __name__ == "__main__":
    main()
