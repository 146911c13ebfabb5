"""How many tokens a round any one-pass block drafter could get accepted on the tiny target.

    PYTHONPATH=platform python benchmarks/block_ceiling.py [--prompts 8] [--max-new-tokens 48]
        [--samples 512] [--L 7]

A block drafter such as DFlash drafts all L positions in one pass, before any of them is
sampled: the best it can propose at depth j is the target's own marginal of the token j steps
ahead, given the context only (the earlier draft tokens summed out). This script builds that
oracle from the target itself: each round it samples `--samples` continuations of L tokens
from the target at the decoding temperature and uses their empirical per-depth frequencies as
the drafter's marginals q [1, L, V]; the engine then decodes with them exactly as it decodes
with DFlash (token verification of one path drawn from q_j at each depth, DDTree's chain, the
argmax of each q_j, and DDTree's best-first tree of 64 nodes). At T = 0 the oracle is the
greedy continuation and every draft is accepted; at T = 1 what it reaches bounds every block
drafter of this target from above (up to the marginals' sampling error), however it is trained.
Prints tau (accepted draft tokens + the bonus per round) per temperature and method.
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
from pair import load_pair
from rich.console import Console
from rich.table import Table

from speculab.config import resolve_path
from speculab.core.engine import DecodeSettings, Drafter, decode
from speculab.drafting.ddtree import TREES, MarginalPathDrafter, Marginals, TreeDrafter, tree_builder
from speculab.drafting.sampling import SamplingParams, sample, tempered_probs
from speculab.models import TreeTarget
from speculab.models.hf import load_causal_lm
from speculab.registry import get_verifier


class OracleMarginals:
    """A `MarginalSource` whose q_j are the empirical frequencies of the target's own samples."""

    def __init__(self, path: str, samples: int) -> None:
        self.model = load_causal_lm(path)
        self.samples = samples
        self.temperature = 1.0  # the decoding temperature: the oracle samples at it whatever it is asked
        self.gen = torch.Generator()
        self.rows: list[list[int]] = []

    def prefill(
        self, contexts: list[list[int]], roots: list[int], seed: int, features: Any = None, room: int = 0
    ) -> None:
        self.rows = [context + [root] for context, root in zip(contexts, roots)]
        self.gen.manual_seed(seed)

    @torch.inference_mode()
    def _row(self, row: list[int], length: int, temperature: float) -> torch.Tensor:
        """q [L, V] after ``row``: one prefill, then `samples` continuations decoded as one batch."""
        out = self.model(input_ids=torch.tensor([row]), use_cache=True)
        cache = out.past_key_values
        cache.batch_repeat_interleave(self.samples)
        logits = out.logits[:, -1].expand(self.samples, -1)  # [S, V]
        q = torch.zeros(length, logits.shape[-1])
        for depth in range(length):
            tokens = sample(tempered_probs(logits, temperature), 1, self.gen)  # [S, 1]
            q[depth] = torch.bincount(tokens[:, 0], minlength=logits.shape[-1]) / self.samples
            if depth + 1 < length:
                logits = self.model(input_ids=tokens, past_key_values=cache, use_cache=True).logits[:, -1]
        return q

    def marginals(self, length: int, temperature: float) -> Marginals:
        """DDTree asks for T = 1 marginals at T = 0 to rank its tree; the oracle's are the target's at
        the decoding temperature, which at T = 0 is the greedy continuation."""
        q = torch.stack([self._row(row, length, self.temperature) for row in self.rows])
        return Marginals(torch.tensor([row[-1] for row in self.rows]), q)

    def commit(self, emitted: list[list[int]], features: Any = None) -> None:
        for row, tokens in zip(self.rows, emitted):
            row += tokens

    def retain(self, rows: torch.Tensor) -> None:
        self.rows = [self.rows[r] for r in rows.tolist()]

    def kv_bytes(self) -> int:
        return 0


def tau(target: TreeTarget, drafter: Drafter, verifier: str, prompts: list[list[int]], s: DecodeSettings) -> float:
    run = decode(target, drafter, get_verifier(verifier), prompts, s)
    rounds = sum(r.rows for r in run.rounds)
    return sum(len(p.tokens) for p in run.prompts) / rounds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="assets/tiny-pycode")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--L", type=int, default=7)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    pair = load_pair(args.model, args.prompts)
    source = OracleMarginals(str(resolve_path(args.model) / "target"), args.samples)
    table = Table(title=f"block-drafter ceiling: the target's own marginals, L = {args.L}, {args.samples} samples")
    for column in ("T", "one path drawn from q_j (token)", "DDTree chain (argmax q_j)", "DDTree B = 64"):
        table.add_column(column)
    for temperature in (0.0, 1.0):
        s = DecodeSettings(1, args.L, SamplingParams(temperature), args.max_new_tokens, 1, 0, pair.eos_token_id)
        source.temperature = temperature
        sampled = tau(pair.target, MarginalPathDrafter(source, torch.Generator()), "token", pair.prompts, s)
        trees = [
            tau(pair.target, TreeDrafter(source, tree_builder(tree, 64)), "ddtree", pair.prompts, s) for tree in TREES
        ]
        table.add_row(f"{temperature:g}", f"{sampled:.2f}", *(f"{t:.2f}" for t in reversed(trees)))
    Console().print(table)


if __name__ == "__main__":
    main()
