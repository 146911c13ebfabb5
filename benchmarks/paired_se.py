"""Standard error of one verifier's acceptance length over another's: paired on the same drafts vs
separate runs.

    PYTHONPATH=platform python benchmarks/paired_se.py [--prompts 16] [--tokens 64] [--repeats 1,8]

On the tiny pair and HumanEval prompts (T = 1, K = 1, L = 4), token's acceptance length (1 + accepted
a round) over block's is estimated two ways, both as ratios of sums over prompts with their
linearised standard error on the log scale: unpaired, from two separate runs (one per verifier, each
decoding its own drafts: the two runs' errors add), and paired, from one run with
`algorithm.compare=[token]` (both verifiers on every round's drafts, `repeats` verifications each,
the sums paired prompt by prompt: `compare/token/relative`). The last column is unpaired SE over
paired SE. This measures statistical efficiency, not speed.
"""

from __future__ import annotations

import argparse
import math

import torch
from pair import load_pair
from rich.console import Console
from rich.table import Table

from speculab.core.engine import DecodeSettings, decode
from speculab.core.paired import PairedComparison
from speculab.core.records import RunResult
from speculab.drafting.sampling import SamplingParams
from speculab.registry import get_verifier
from speculab.results.figures import relative
from speculab.stats import LogRatio, Totals, log_ratio


def acceptance_length(run: RunResult) -> LogRatio:
    """A run's acceptance length, a ratio of sums over prompts: (accepted + rounds) over rounds."""
    rounds = [float(len(p.accepted)) for p in run.prompts]
    accepted = [float(sum(p.accepted)) for p in run.prompts]
    return log_ratio(Totals.of((1, [a + r for a, r in zip(accepted, rounds)]), (-1, rounds)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", default="assets/tiny-pycode")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", default="1,8")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_pair(args.model_dir, args.prompts)
    settings = DecodeSettings(1, 4, SamplingParams(1.0), args.tokens, 1, 0, pair.eos_token_id)

    def run(name: str, paired: PairedComparison | None = None) -> RunResult:
        return decode(pair.target, pair.drafter, get_verifier(name), pair.prompts, settings, None, paired)

    block, token = (acceptance_length(run(name)) for name in ("block", "token"))
    unpaired_se = math.hypot(block.se, token.se)
    title = f"token's acceptance length over block's, tiny pair, {args.prompts} prompts x {args.tokens} tokens"
    table = Table(title=title)
    for column in ("estimate", "ratio", "standard error (log)", "unpaired SE / SE"):
        table.add_column(column, justify="left" if column == "estimate" else "right")
    table.add_row("unpaired (two runs)", f"{token.value / block.value:.4f}", f"{unpaired_se:.4f}", "1.0")
    for repeats in map(int, args.repeats.split(",")):
        verifiers = {"block": get_verifier("block"), "token": get_verifier("token")}
        paired = PairedComparison(verifiers, repeats, 1, len(pair.prompts))
        run("block", paired)
        found = log_ratio(relative(paired.sums(), "token", "block"))
        row = (f"{found.value:.4f}", f"{found.se:.4f}", f"{unpaired_se / found.se:.1f}")
        table.add_row(f"paired, {repeats} verification(s) each", *row)
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
