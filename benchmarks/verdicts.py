"""What a sweep of each size can decide, by simulation through the platform's own functions
(`speculab.results.verdicts.sweep_answer` on `tests/support/sweeps.py`'s points).

    PYTHONPATH=platform:tests .venv/bin/python benchmarks/verdicts.py [--trials 200]

- Power: one point truly 8% faster than every other (all of them 1.3x autoregressive decoding), the
  share of sweeps that name it the fastest, by sweep size (2, 5, 10, 20 points) and shared prompts (8, 12,
  16, 32), on an idle machine (`QUIET`) without and with a point-by-prompt interaction (each point's
  speedup on each prompt scaled by exp(N(0, 0.05)), mean 1), and on the noise measured here (`MEASURED`).
  The share that names the wrong point is printed beside it (it should be 0).
- The same where every point is as fast as the autoregressive baseline (1.0x): the baseline question
  then decides nothing, passes no share on, and the ranking keeps half the family's 5%.
- False verdicts: 20 points all truly equal, and equal to the baseline: the share of sweeps printing any
  false verdict (a named point, a point decided against the baseline), by prompts and machine.
- Racing (`hydra/sweeper=race`, stages [12, 32]): 20 points, one truly 8% faster, on an idle machine,
  the share of races naming it and the tokens decoded over a flat 32-prompt sweep's, beside the flat
  sweep's power (`support.sweeps.race`: the functions a real race decides with).
- The leader's figure: where all 20 are equal, how often its interval (simultaneous over the 20) holds its
  truth, against its own 95% interval, and by how much its value reads high on average.
Every figure states its sweep size and prompt count; `--trials` sweeps per cell.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from speculab.results.point import PointResult
from speculab.results.ratios import figure_groups
from speculab.results.verdicts import sweep_answer
from speculab.stats import log_ratio
from support.sweeps import LOADED, MEASURED, QUIET, Machine, draw_units, point, race, truth

SIZES = (2, 5, 10, 20)
PROMPTS = (8, 12, 16, 32)


def points(
    rng: np.random.Generator, speeds: list[float], prompts: int, machine: Machine, interaction: float, base: float
) -> list[PointResult]:
    """A sweep's points on the same prompts, point i truly speeds[i] times as fast as `base` x autoregressive."""
    units, cost = draw_units(rng, prompts), truth() / base
    return [
        point(rng, units, cost / s, machine, f"p{i}", interaction=interaction, intervals=False)
        for i, s in enumerate(speeds)
    ]


def power(size: int, prompts: int, machine: Machine, interaction: float, base: float, trials: int) -> tuple[float, int]:
    """(share of sweeps naming the truly fastest point, sweeps naming another)."""
    rng = np.random.default_rng(size * 1000 + prompts)
    named = wrong = 0
    for _ in range(trials):
        found = points(rng, [1.08] + [1.0] * (size - 1), prompts, machine, interaction, base)
        best = sweep_answer(found).best
        named += best is found[0]
        wrong += best is not None and best is not found[0]
    return named / trials, wrong


def false_rate(prompts: int, machine: Machine, interaction: float, trials: int) -> float:
    """The share of 20-point sweeps, every point truly as fast as every other and as the baseline, that
    print a false verdict (a named point, a point decided against the baseline)."""
    rng = np.random.default_rng(prompts)
    found = 0
    for _ in range(trials):
        answer = sweep_answer(points(rng, [1.0] * 20, prompts, machine, interaction, 1.0))
        found += answer.best is not None or any(v.decided for vs in answer.against.values() for v in vs)
    return found / trials


def leader(prompts: int, interaction: float, trials: int) -> tuple[float, float, float]:
    """Where 20 points are all truly 1.3x: (coverage of the leader's simultaneous interval, of its own 95%
    interval, mean relative excess of its value over 1.3)."""
    rng = np.random.default_rng(7 + prompts)
    held = own = 0
    excess = []
    for _ in range(trials):
        answer = sweep_answer(points(rng, [1.0] * 20, prompts, QUIET, interaction, 1.3))
        figure = answer.leader_figure.figure
        held += figure.low <= 1.3 <= figure.high
        alone = log_ratio(*(figure_groups(answer.leader.units, answer.key) or ())).interval()
        own += alone is not None and alone[0] <= 1.3 <= alone[1]
        excess.append(figure.value / 1.3 - 1)
    return held / trials, own / trials, statistics.fmean(excess)


def racing(interaction: float, trials: int) -> tuple[float, float, float]:
    """(share of races [12, 32] naming the truly fastest of 20, their tokens over a flat 32-prompt sweep's,
    the flat sweep's power)."""
    rng = np.random.default_rng(11)
    found = [race(rng, [1.08] + [1.0] * 19, [12, 32], QUIET, interaction) for _ in range(trials)]
    named = sum(r.named == 0 for r in found) / trials
    return named, statistics.fmean(r.cost for r in found), power(20, 32, QUIET, interaction, 1.3, trials)[0]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200, help="simulated sweeps per cell")
    parser.add_argument("--race-only", action="store_true", help="only the racing table")
    args = parser.parse_args(argv)
    print(f"Racing, stages [12, 32], 20 points, one 8% faster, idle machine, {args.trials} races a cell\n")
    print("| interaction | race names it | race's tokens over a flat sweep's | flat 32-prompt sweep names it |")
    print("|---|---|---|---|")
    for interaction in (0.0, 0.05):
        named, cost, flat = racing(interaction, args.trials)
        print(f"| {interaction} | {named:.2f} | {cost:.3f} | {flat:.2f} |")
    print()
    if args.race_only:
        return
    cells = [
        ("idle (QUIET), no interaction, baseline 1.3x", QUIET, 0.0, 1.3),
        ("idle (QUIET), interaction 0.05, baseline 1.3x", QUIET, 0.05, 1.3),
        ("idle (QUIET), interaction 0.05, baseline 1.0x", QUIET, 0.05, 1.0),
        ("measured here (MEASURED), no interaction, baseline 1.3x", MEASURED, 0.0, 1.3),
        ("measured here (MEASURED), interaction 0.05, baseline 1.3x", MEASURED, 0.05, 1.3),
    ]
    print(f"Power: one point truly 8% faster than every other, share of {args.trials} sweeps naming it\n")
    for label, machine, interaction, base in cells:
        print(f"{label}\n\n| points | " + " | ".join(f"{n} prompts" for n in PROMPTS) + " |")
        print("|---|" + "---|" * len(PROMPTS))
        for size in SIZES:
            row = [power(size, n, machine, interaction, base, args.trials) for n in PROMPTS]
            shown = [f"{share:.2f}" + (f" ({wrong} wrong)" if wrong else "") for share, wrong in row]
            print(f"| {size} | " + " | ".join(shown) + " |")
        print()
    print(f"False verdicts: 20 points all equal to each other and to the baseline, share of {args.trials} sweeps\n")
    print("| machine | interaction | " + " | ".join(f"{n} prompts" for n in PROMPTS[1:]) + " |")
    print("|---|---|" + "---|" * (len(PROMPTS) - 1))
    for name, machine in (("measured", MEASURED), ("loaded", LOADED)):
        for interaction in (0.0, 0.05):
            rates = [false_rate(n, machine, interaction, args.trials) for n in PROMPTS[1:]]
            print(f"| {name} | {interaction} | " + " | ".join(f"{r:.3f}" for r in rates) + " |")
    print(f"\nThe leader of 20 points all truly 1.3x (idle, interaction 0.05), {args.trials} sweeps\n")
    print("| prompts | simultaneous interval holds 1.3 | its own 95% interval holds 1.3 | mean excess of its value |")
    print("|---|---|---|---|")
    for n in (16, 32):
        held, own, excess = leader(n, 0.05, args.trials)
        print(f"| {n} | {held:.3f} | {own:.3f} | {excess:+.1%} |")


if __name__ == "__main__":
    main()
