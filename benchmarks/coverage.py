"""How often a "95%" interval holds what it estimates, by simulation: the speed figures' interval of a
median before and now, and why the acceptance figures carry a standard error instead of one.

    PYTHONPATH=platform .venv/bin/python benchmarks/coverage.py [--trials 1000]

- Speed: per-unit speedups drawn from four shapes (`tests/test_coverage.py`'s), n units; the median's
  interval by a percentile bootstrap (SciPy's `bootstrap`, 2000 resamples: the platform's method until
  issue 48) and by order statistics (`speculab.stats.median_estimate`, distribution-free), each
  against the true median. "-": no interval printed at that n.
- Acceptance: prompts decoded by a simulated speculative loop (L = 4, 64 new tokens, eos with
  probability 0.3 at a uniform length), each prompt with its own acceptance rate drawn from a Beta
  law (similar prompts, and code mixed with prose); block efficiency is kept tokens over rounds,
  summed over prompts; the ratio estimator's Student-t interval and a percentile bootstrap over
  prompts, against the population's ratio.
- A throughput speedup over the prompt mixes hardest for its interval (`support.sweeps`: long code at 2.0x
  among short chat at 0.8x, one unit ten times the others, log-normal lengths) and code and prose on the
  noise measured here: the symmetric bootstrap-t alone, and as printed (never narrower than Student's t
  at the units' effective degrees of freedom, `stats.LogRatio.interval`), by units.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # test_coverage, support.sweeps

from test_coverage import SHAPES

from speculab.results.ratios import speedup
from speculab.stats import RESAMPLES, LogRatio, Totals, _resampled_t, log_ratio, median_estimate
from support.sweeps import (
    MEASURED,
    design_truth,
    draw_units,
    heavy_tailed_lengths,
    mixed_prompts,
    one_dominant_unit,
    seconds,
    timed,
)

Interval = tuple[float, float] | None
NS = (2, 4, 6, 8, 16, 32, 64)
L, T = 4, 64


def bootstrap_median(values: np.ndarray, rng: np.random.Generator) -> Interval:
    result = stats.bootstrap((values,), np.median, n_resamples=2000, method="percentile", rng=rng)
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def order_statistics(values: np.ndarray, rng: np.random.Generator) -> Interval:
    found = median_estimate([[float(v)] for v in values])
    return (found.low, found.high) if found.has_interval else None


def covered(method: Callable[[np.ndarray, np.random.Generator], Interval], draw, truth, n, trials) -> str:
    rng = np.random.default_rng(n)
    found = [method(draw(rng, n), rng) for _ in range(trials)]
    if any(interval is None for interval in found):
        return "-"
    return f"{np.mean([lo <= truth <= hi for lo, hi in found]):.3f}"


def speed_table(trials: int) -> str:
    lines = ["| shape | method | " + " | ".join(f"n={n}" for n in NS) + " |", "|" + "---|" * (len(NS) + 2)]
    for shape, (draw, truth) in SHAPES.items():
        for name, method in (("bootstrap (before)", bootstrap_median), ("order statistics (now)", order_statistics)):
            cells = [covered(method, draw, truth, n, trials) for n in NS]
            lines.append(f"| {shape} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def decode_prompts(rng: np.random.Generator, n: int, beta: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    """(kept tokens, rounds) of n prompts: each round accepts a geometric run of draft tokens (the
    prompt's rate, at most L) plus the bonus token, until eos or T tokens."""
    rates = rng.beta(*beta, size=n)
    kept, rounds = np.zeros(n), np.zeros(n)
    for i, rate in enumerate(rates):
        limit = T if rng.random() > 0.3 else int(rng.integers(1, T + 1))
        while kept[i] < limit:
            tau = min(int(rng.geometric(1 - rate)) - 1, L) if rate < 1 else L
            kept[i] = min(limit, kept[i] + tau + 1)
            rounds[i] += 1
    return kept, rounds


def t_ratio(y: np.ndarray, x: np.ndarray, rng: np.random.Generator) -> Interval:
    n, ratio = len(y), y.sum() / x.sum()
    se = math.sqrt(((y - ratio * x) ** 2).sum() / ((n - 1) * n)) / x.mean()
    half = float(stats.t.ppf(0.975, n - 1)) * se
    return ratio - half, ratio + half


def bootstrap_ratio(y: np.ndarray, x: np.ndarray, rng: np.random.Generator) -> Interval:
    picks = rng.integers(0, len(y), size=(2000, len(y)))
    ratios = y[picks].sum(1) / x[picks].sum(1)
    return float(np.quantile(ratios, 0.025)), float(np.quantile(ratios, 0.975))


def acceptance_table(trials: int) -> str:
    lines = ["| prompts' rates | method | " + " | ".join(f"n={n}" for n in NS[1:]) + " |", "|" + "---|" * (len(NS) + 1)]
    for beta, label in (((8, 2), "alike, Beta(8, 2)"), ((0.5, 2), "code and prose, Beta(0.5, 2)")):
        rng = np.random.default_rng(0)
        y, x = decode_prompts(rng, 20_000, beta)
        truth = y.sum() / x.sum()
        for name, method in (("Student t (ratio)", t_ratio), ("bootstrap", bootstrap_ratio)):
            cells = []
            for n in NS[1:]:
                draws = [decode_prompts(rng, n, beta) for _ in range(trials)]
                found = [method(yy, xx, rng) for yy, xx in draws]
                cells.append(f"{np.mean([lo <= truth <= hi for lo, hi in found]):.3f}")
            lines.append(f"| {label} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def code_and_prose(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    units = draw_units(rng, n)
    return (units.tokens, *seconds(units, 1.0))


CELLS = {
    "code and prose": code_and_prose,
    "mixed prompts (2.0x code, 0.8x chat)": mixed_prompts,
    "one dominant unit": one_dominant_unit,
    "heavy-tailed lengths": heavy_tailed_lengths,
}
UNITS = (8, 12, 16, 32)


def bootstrap_alone(found: LogRatio) -> Interval:
    """The symmetric bootstrap-t interval without the Student floor (the platform's until the answers issue)."""
    if not len(found.t):
        return None
    half = float(np.quantile(np.abs(found.t), 0.95, method="higher")) * found.se
    return math.exp(found.log - half), math.exp(found.log + half)


def resampled(totals: Totals) -> LogRatio:
    """`stats.log_ratio` with its bootstrap at any count of units, below MIN_CLUSTERS too, where the
    platform prints no interval: to show why it does not."""
    found = log_ratio(totals, resamples=0)
    return LogRatio(found.log, found.se, found.n, found.df, _resampled_t((totals,), found.log, found.se, RESAMPLES, 0))


def ratio_table(trials: int) -> str:
    lines = ["| prompts | interval | " + " | ".join(f"n={n}" for n in UNITS) + " |", "|" + "---|" * (len(UNITS) + 2)]
    for label, cell in CELLS.items():
        rows: dict[str, list[str]] = {"bootstrap-t alone": [], "as printed (Student floor)": []}
        for n in UNITS:
            truth, rng = design_truth(cell, n), np.random.default_rng(n)
            held = np.zeros(2)
            for _ in range(trials):
                found = resampled(speedup(*timed(rng, *cell(rng, n), MEASURED)))
                for i, interval in enumerate((bootstrap_alone(found), found.interval())):
                    held[i] += interval is not None and interval[0] <= truth <= interval[1]
            for name, share in zip(rows, held / trials):
                rows[name].append(f"{share:.3f}")
        lines += [f"| {label} | {name} | " + " | ".join(cells) + " |" for name, cells in rows.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000, help="simulated runs per cell (1000: ±0.7 points)")
    args = parser.parse_args(argv)
    print(f"Speed figures: coverage of the median's 95% interval, {args.trials} trials a cell\n")
    print(speed_table(args.trials))
    print(f"\nAcceptance figures: coverage of block efficiency's 95% interval, {args.trials} trials a cell\n")
    print(acceptance_table(args.trials))
    print(
        f"\nThroughput speedup: coverage of its 95% interval, {args.trials} trials a cell (printed from 12 units on)\n"
    )
    print(ratio_table(args.trials))


if __name__ == "__main__":
    main()
