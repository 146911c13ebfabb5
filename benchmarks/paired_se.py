"""Standard error of a block efficiency difference: paired on the same drafts vs separate runs.

    PYTHONPATH=platform python benchmarks/paired_se.py [--prompts 16] [--tokens 64] [--repeats 1,8]

On the tiny pair and HumanEval prompts (T = 1, K = 1, L = 4), the difference block minus token
is estimated two ways: unpaired, from two separate runs (one per verifier, each decoding its
own drafts: SE = sqrt(se_block^2 + se_token^2) over their sequence-rounds), and paired, from
one run with `algorithm.compare=[token]` (both verifiers on every round's drafts, `repeats`
verifications each, SE of the per-round differences). The ratio is unpaired SE over paired SE.
This measures statistical efficiency, not speed.
"""

from __future__ import annotations

import argparse
import math

import torch
from pair import load_pair
from rich.console import Console
from rich.table import Table

from speculab.algorithms import get_verifier
from speculab.drafting.sampling import SamplingParams
from speculab.engine import DecodeSettings, decode
from speculab.paired import PairedComparison, mean_and_se
from speculab.records import RunResult


def round_taus(run: RunResult) -> torch.Tensor:
    """[U] the accepted length of every sequence-round of a run."""
    return torch.tensor([tau for r in run.rounds for tau in r.accepted], dtype=torch.float64)


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

    (block_mean, block_se), (token_mean, token_se) = (mean_and_se(round_taus(run(n))) for n in ("block", "token"))
    unpaired_se = math.hypot(block_se, token_se)
    table = Table(title=f"block minus token accepted length, tiny pair, {args.prompts} prompts x {args.tokens} tokens")
    for column in ("estimate", "difference", "standard error", "unpaired SE / SE"):
        table.add_column(column, justify="left" if column == "estimate" else "right")
    table.add_row("unpaired (two runs)", f"{block_mean - token_mean:+.4f}", f"{unpaired_se:.4f}", "1.0")
    for repeats in map(int, args.repeats.split(",")):
        paired = PairedComparison({"block": get_verifier("block"), "token": get_verifier("token")}, repeats, seed=1)
        run("block", paired)
        units = paired.units()
        diff, se = mean_and_se(units["block"] - units["token"])
        table.add_row(f"paired, {repeats} verification(s) each", f"{diff:+.4f}", f"{se:.4f}", f"{unpaired_se / se:.1f}")
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
