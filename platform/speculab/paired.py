"""Paired (counterfactual) comparison of verifiers on the same drafts (`algorithm.compare`).

Every round, the drafts the run just verified (the same paths, p and q) are also verified by
each compared verifier `repeats` times in one batched call, while decoding goes on with the
configured verifier and its own randomness (so the decoded tokens are the same with or without
the comparison). Common random numbers: each round, every compared verifier gets a generator
with the same fresh seed, so verifiers that draw the same uniforms (token and block draw one
per position) decide on the same ones; each verifier's own law is unchanged. Verifiers that
carry a modified target into the next round (greedy_block, spectr_gbv) start from a fresh
carry every round here, so they are compared as one-round rules. A single-path verifier given
K > 1 paths verifies the first.

The unit of the statistics is one sequence-round: its accepted length averaged over the
repeats. Differences are taken unit by unit against the configured verifier, which is always
among the compared ones, so draft-to-draft variation cancels out of them: that is what makes
small differences measurable (docs/algorithms.md, "Paired comparison").
"""

from __future__ import annotations

import math

import torch
from rich.table import Table

from speculab.engine import Verifier

PREFIX = "compare/"


class PairedComparison:
    """The engine's `PairedCheck`: collects, per compared verifier, the mean accepted length of every unit."""

    def __init__(self, verifiers: dict[str, Verifier], repeats: int, seed: int) -> None:
        self.verifiers = verifiers
        self.repeats = repeats
        self.rng = torch.Generator().manual_seed(seed)
        self.accepted: dict[str, list[torch.Tensor]] = {name: [] for name in verifiers}  # per round: [B] float64

    # paths [B, K, L]; p [B, K, L+1, V]; q [B, K, L, V]
    def __call__(self, paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor) -> None:
        batch = paths.shape[0]
        tiled = [x.repeat(self.repeats, *([1] * (x.dim() - 1))) for x in (paths, p, q)]  # repeat-major [R*B, ...]
        seed = int(torch.randint(2**62, (), generator=self.rng))
        for name, verify in self.verifiers.items():
            verdict = verify(*tiled, rng=torch.Generator().manual_seed(seed), carry=None)
            taus = (verdict.num_tokens - 1).to(torch.float64).view(self.repeats, batch)
            self.accepted[name].append(taus.mean(0).cpu())

    def units(self) -> dict[str, torch.Tensor]:
        """Per verifier, [U] the mean accepted length of every sequence-round so far."""
        return {name: torch.cat(rounds) if rounds else torch.empty(0) for name, rounds in self.accepted.items()}


# values [U]
def mean_and_se(values: torch.Tensor) -> tuple[float, float]:
    """The mean and its standard error (NaN with fewer than two units)."""
    count = values.numel()
    mean = float(values.mean()) if count else math.nan
    return mean, float(values.std() / math.sqrt(count)) if count > 1 else math.nan


def paired_metrics(units: dict[str, torch.Tensor], configured: str) -> dict[str, float]:
    """`compare/<verifier>/...` metrics: accepted length and block efficiency (1 + accepted, the
    untruncated tokens per round) with standard errors, and the paired difference from ``configured``."""
    metrics: dict[str, float] = {}
    for name, values in units.items():
        mean, se = mean_and_se(values)
        metrics |= {
            f"{PREFIX}{name}/accepted_mean": mean,
            f"{PREFIX}{name}/accepted_se": se,
            f"{PREFIX}{name}/block_efficiency": 1.0 + mean,
            f"{PREFIX}{name}/block_efficiency_se": se,
        }
        if name != configured:
            diff, diff_se = mean_and_se(values - units[configured])
            metrics |= {
                f"{PREFIX}{name}/diff_block_efficiency": diff,
                f"{PREFIX}{name}/diff_block_efficiency_se": diff_se,
            }
    return metrics


def paired_table(metrics: dict[str, float], configured: str, repeats: int) -> Table:
    """The console's side-by-side table of `paired_metrics`."""
    names = dict.fromkeys(key.removeprefix(PREFIX).split("/")[0] for key in metrics if key.startswith(PREFIX))
    table = Table(title=f"paired comparison on the same drafts ({repeats} verifications each, ± standard error)")
    for column in ("verifier", "block efficiency", "accepted", f"minus {configured}"):
        table.add_column(column, justify="left" if column == "verifier" else "right")
    for name in names:
        m = {
            key.removeprefix(f"{PREFIX}{name}/"): value
            for key, value in metrics.items()
            if key.startswith(f"{PREFIX}{name}/")
        }
        diff = "-" if name == configured else f"{m['diff_block_efficiency']:+.4f} ± {m['diff_block_efficiency_se']:.4f}"
        table.add_row(
            name,
            f"{m['block_efficiency']:.4f} ± {m['block_efficiency_se']:.4f}",
            f"{m['accepted_mean']:.4f} ± {m['accepted_se']:.4f}",
            diff,
        )
    return table
