"""The answers a sweep prints, before and after the verdict rule (`speculab.results.verdicts`), by
simulation through the platform's own functions on `tests/support/sweeps.py`'s points.

    PYTHONPATH=platform:tests .venv/bin/python benchmarks/verdicts.py [--trials 400]

- Headline on mixed prompts: a point truly 1.05x autoregressive decoding in throughput, over prompts
  of long code that drafts well and short prose that does not. Before, the headline was the median
  of per-unit ratios with its order-statistic interval (the typical prompt, now
  `typical_speedup_vs_ar`); now it is the throughput ratio with its bootstrap-t interval. The table
  gives each one's mean value and how often its verdict says "slower" or "faster".
- The leader's power: two points on the same 16 prompts, one truly 8% faster. Before, a leader was
  named where its headline's interval (the median's) lay above every other point's (interval
  overlap); now, where the paired, Holm-corrected test against every other point decides.
- Null sweeps: 20 points all truly equal and as fast as autoregressive decoding. The share of sweeps
  printing any false verdict (a leader, a point faster or slower than the baseline): before, the
  overlap rule and each point's headline interval against 1 with no correction; now, one Holm family.
Each on the machine noise measured here (`MEASURED`) and on a loaded machine (`LOADED`).
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from speculab.measure import Sample, paired_ratios
from speculab.results.point import PointResult
from speculab.results.verdicts import sweep_answer
from speculab.stats import Estimate, median_estimate
from support.sweeps import LOADED, MEASURED, Machine, draw_units, point, truth

MACHINES = {"measured": MEASURED, "loaded": LOADED}


def typical(result: PointResult) -> Estimate:
    """The former headline: the median of per-unit paired ratios, with the order-statistic interval."""
    assert result.units is not None and result.units.autoregressive is not None
    spec, ar = result.units.speculative, result.units.autoregressive
    fast = [[Sample(int(t), w, w)] for t, w in zip(spec.tokens, spec.wall_s)]
    slow = [[Sample(int(t), w, w)] for t, w in zip(ar.tokens, ar.wall_s)]
    return median_estimate(paired_ratios(fast, slow))


def says(estimate: Estimate) -> str:
    if estimate.has_interval and estimate.low > 1:
        return "faster"
    return "slower" if estimate.has_interval and estimate.high < 1 else "neither"


def headline(machine: Machine, prompts: int, trials: int) -> list[str]:
    rng = np.random.default_rng(1)
    cost, old, new = truth() / 1.05, [], []
    for _ in range(trials):
        result = point(rng, draw_units(rng, prompts), cost, machine)
        old.append(typical(result))
        new.append(result.figures["speedup_vs_ar"])
    rows = []
    for name, found in (("median of per-unit ratios (before)", old), ("throughput ratio (now)", new)):
        verdicts = [says(e) for e in found]
        shares = " | ".join(f"{verdicts.count(word) / trials:.3f}" for word in ("slower", "faster"))
        rows.append(f"| {prompts} | {name} | {statistics.fmean(e.value for e in found):.3f} | {shares} |")
    return rows


def overlap_leader(points: list[PointResult]) -> PointResult | None:
    """The former rule: the leader by its headline (the median), named where that interval lies above
    every other point's."""
    headlines = {id(p): typical(p) for p in points}
    ordered = sorted(points, key=lambda p: -headlines[id(p)].value)
    low = headlines[id(ordered[0])].low
    return ordered[0] if all(headlines[id(p)].high < low for p in ordered[1:]) else None


def power(machine: Machine, trials: int) -> tuple[float, float]:
    rng = np.random.default_rng(2)
    cost, before, now = truth() / 1.3, 0, 0
    for _ in range(trials):
        units = draw_units(rng, 16)
        fast, slow = point(rng, units, cost, machine, "fast"), point(rng, units, cost * 1.08, machine, "slow")
        before += overlap_leader([fast, slow]) is fast
        now += sweep_answer([fast, slow]).best is fast
    return before / trials, now / trials


def null(machine: Machine, trials: int) -> tuple[float, float]:
    rng = np.random.default_rng(3)
    before = now = 0
    for _ in range(trials):
        units = draw_units(rng, 16)
        points = [point(rng, units, truth(), machine, f"p{i}") for i in range(20)]
        before += overlap_leader(points) is not None or any(
            says(p.figures["speedup_vs_ar"]) != "neither" for p in points
        )
        answer = sweep_answer(points)
        decided = [v.decided for v in answer.versus] + [v.decided for vs in answer.against.values() for v in vs]
        now += any(decided)
    return before / trials, now / trials


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=400, help="simulated runs per cell")
    args = parser.parse_args(argv)
    print("Headline on mixed prompts, a point truly 1.05x in throughput (machine: measured)\n")
    print("| prompts | headline | mean value | says slower | says faster |\n|---|---|---|---|---|")
    for prompts in (16, 128):
        print("\n".join(headline(MEASURED, prompts, args.trials)))
    print("\nA point truly 8% faster than the other, 16 shared prompts: share of sweeps naming it\n")
    print("| machine | interval overlap (before) | paired, Holm (now) |\n|---|---|---|")
    for name, machine in MACHINES.items():
        before, now = power(machine, args.trials)
        print(f"| {name} | {before:.3f} | {now:.3f} |")
    print("\n20 equal points, 16 shared prompts: share of sweeps printing any false verdict\n")
    print("| machine | each interval, uncorrected (before) | one Holm family (now) |\n|---|---|---|")
    for name, machine in MACHINES.items():
        before, now = null(machine, args.trials // 4)
        print(f"| {name} | {before:.3f} | {now:.3f} |")


if __name__ == "__main__":
    main()
