"""How far a verifier's first emitted token is from the target's, on a real pair (statistical).

    PYTHONPATH=platform python benchmarks/first_token_law.py [--rows 200000] [--prompts 4] [--paths 2,3,4]

For each HumanEval prompt, p and q are the tiny pair's next-token distributions after the
prompt (temperature 1). Every row drafts K i.i.d. tokens from q (L = 1) and is verified once;
a lossless verifier emits its first token with law p. The table gives the total variation
between the empirical law of the first emitted token over ``--rows`` rows and p, for
`spectr_gbv` (the SpecTr-GBV paper's scan, not lossless for K >= 2) beside the lossless `gbv`
and `spectr` on the same p and q (their distance is the sampling noise floor at this many
rows), with the chi-square p-value of each against p. This measures correctness, not speed.
"""

from __future__ import annotations

import argparse

import torch
from pair import load_pair
from rich.console import Console
from rich.table import Table
from scipy.stats import chisquare

from speculab.drafting.sampling import tempered_probs
from speculab.registry import get_verifier

VERIFIERS = ("spectr_gbv", "gbv", "spectr")


# p, q [V]
def first_token_counts(name: str, paths: int, p: torch.Tensor, q: torch.Tensor, rows: int, seed: int) -> torch.Tensor:
    """``[V]`` how often each token is emitted first, over ``rows`` one-round verifications."""
    verify, gen = get_verifier(name), torch.Generator().manual_seed(seed)
    counts = torch.zeros(p.shape[-1], dtype=torch.int64)
    chunk = 2_000
    for start in range(0, rows, chunk):
        n = min(chunk, rows - start)
        drafted = torch.multinomial(q, n * paths, replacement=True, generator=gen).view(n, paths, 1)
        target_rows = p.expand(n, paths, 2, -1)  # row 1 (after the draft) only shapes the bonus token
        verdict = verify(drafted, target_rows, q.expand(n, paths, 1, -1), rng=gen)
        counts += torch.bincount(verdict.tokens[:, 0], minlength=p.shape[-1])
    return counts


# counts [V]; p [V]
def distance(counts: torch.Tensor, p: torch.Tensor) -> tuple[float, float]:
    """(total variation of the empirical law from p, chi-square p-value over cells with >= 5 expected)."""
    total = int(counts.sum())
    tv = 0.5 * float((counts.double() / total - p.double()).abs().sum())
    expected = p.double() * total
    small = expected < 5
    observed = torch.cat([counts[~small].double(), counts[small].double().sum().reshape(1)])
    wanted = torch.cat([expected[~small], expected[small].sum().reshape(1)])
    return tv, float(chisquare(observed.numpy(), wanted.numpy() * observed.sum().item() / wanted.sum().item()).pvalue)


@torch.inference_mode()
def next_token_laws(model_dir: str, prompts: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(p, q) [V] after each of the first ``prompts`` HumanEval prompts, at temperature 1."""
    pair = load_pair(model_dir, prompts)
    laws = []
    for prompt in pair.prompts:
        ids = torch.tensor([prompt])
        p = pair.target.lm.model(input_ids=ids).logits[0, -1]
        q = pair.drafter.lm.model(input_ids=ids).logits[0, -1]
        laws.append((tempered_probs(p, 1.0), tempered_probs(q, 1.0)))
    return laws


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", default="assets/tiny-pycode")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--paths", default="2,3,4")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    table = Table(title=f"first emitted token vs the target, {args.rows} rows each, L = 1, T = 1")
    table.add_column("prompt")
    table.add_column("K")
    for name in VERIFIERS:
        table.add_column(f"{name}\nTV", justify="right")
        table.add_column(f"{name}\nchi2 p", justify="right")
    for index, (p, q) in enumerate(next_token_laws(args.model_dir, args.prompts)):
        for paths in map(int, args.paths.split(",")):
            cells = []
            for name in VERIFIERS:
                tv, pvalue = distance(first_token_counts(name, paths, p, q, args.rows, seed=index), p)
                cells += [f"{tv:.4f}", f"{pvalue:.2g}"]
            table.add_row(str(index), str(paths), *cells)
    Console().print(table)


if __name__ == "__main__":
    main()
