"""End-to-end speed on the shipped tiny pair: autoregressive vs token and block SD.

    .venv/bin/python benchmarks/e2e_tiny.py [--prompts 8] [--max-new-tokens 64]

Every row runs on the same HumanEval prompts, in one process (inline runtime, so no Ray
round trips), with the autoregressive baseline measured in the same run at each
temperature; ratios are tokens/s over that baseline.
"""

from __future__ import annotations

import argparse

import torch
from pair import load_pair
from rich.console import Console
from rich.table import Table

from speculab.core.autoregressive import autoregressive
from speculab.core.engine import DecodeSettings, decode
from speculab.drafting.sampling import SamplingParams
from speculab.registry import get_verifier
from speculab.results.figures import run_figures, tokens_per_second


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="assets/tiny-pycode")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    pair = load_pair(args.model, args.prompts)
    prompts, target, drafter = pair.prompts, pair.target, pair.drafter

    table = Table(
        title=f"tiny pair, {len(prompts)} HumanEval prompts, {args.max_new_tokens} new tokens, batch 1, "
        f"{torch.get_num_threads()} threads"
    )
    for column in ("T", "method", "L", "tokens/s", "ms/token", "block eff.", "speedup vs AR"):
        table.add_column(column, justify="right")
    for temperature in (0.0, 1.0):
        settings = DecodeSettings(1, 0, SamplingParams(temperature), args.max_new_tokens, 1, 0, pair.eos_token_id)
        ar = autoregressive(target, prompts, settings)
        m = run_figures(ar)
        table.add_row(
            f"{temperature:g}",
            "autoregressive",
            "-",
            f"{m.value('tokens_per_s'):.1f}",
            f"{m.value('ms_per_token'):.2f}",
            "1.00",
            "1.00",
        )
        for method in ("token", "block"):
            for length in (2, 4, 8):
                s = DecodeSettings(1, length, SamplingParams(temperature), args.max_new_tokens, 1, 0, pair.eos_token_id)
                run = decode(target, drafter, get_verifier(method), prompts, s)
                m = run_figures(run)
                table.add_row(
                    f"{temperature:g}",
                    f"{method} SD",
                    str(length),
                    f"{m.value('tokens_per_s'):.1f}",
                    f"{m.value('ms_per_token'):.2f}",
                    f"{m.value('block_efficiency'):.2f}",
                    f"{tokens_per_second(run) / tokens_per_second(ar):.2f}x",
                )
    Console().print(table)


if __name__ == "__main__":
    main()
