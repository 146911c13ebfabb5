"""The sums behind each speed figure and comparison, as `stats.Totals`: a throughput is a method's
tokens over its seconds, a speedup one throughput over another's on the same units, and the effect of
one point over another the ratio of their speedups (or throughputs). Each is a ratio of totals over
units (`stats.ratio_of_totals`, `stats.log_ratio`), so a figure and the test of it are one computation.
"""

from __future__ import annotations

from speculab.core.measure import UnitTotals
from speculab.results.point import PointUnits
from speculab.stats import Totals

Term = tuple[int, tuple[float, ...]]  # (sign, per-unit sums): +1 multiplies, -1 divides


def rate_terms(method: UnitTotals, sign: int = 1, cpu: bool = False) -> list[Term]:
    """tokens / seconds (its inverse with sign -1), unit by unit."""
    return [(sign, method.tokens), (-sign, method.seconds(cpu))]


def throughput(method: UnitTotals, cpu: bool = False) -> Totals:
    """Total tokens over total seconds (wall, or CPU)."""
    return Totals.of(*rate_terms(method, cpu=cpu))


def speedup(fast: UnitTotals, slow: UnitTotals, cpu: bool = False) -> Totals:
    """`fast`'s throughput over `slow`'s, measured on the same units (paired: resampled together)."""
    return Totals.of(*rate_terms(fast, cpu=cpu), *rate_terms(slow, -1, cpu))


SPEEDUPS = ("speedup_vs_ar", "speedup_vs_hf")  # over the engine's autoregressive loop, over transformers' generate


def figure_terms(units: PointUnits, key: str, sign: int) -> list[Term] | None:
    """A point's figure `key` as terms of sums (None: a baseline it did not run): a speedup is its
    throughput over the baseline's, ms_per_token the inverse of its throughput, block efficiency its kept
    tokens over its rounds, per prompt."""
    if key == "block_efficiency":
        return [(sign, units.kept), (-sign, units.rounds)]
    own = rate_terms(units.speculative, -sign if key == "ms_per_token" else sign)
    if key in SPEEDUPS:
        baseline = units.autoregressive if key == "speedup_vs_ar" else units.generate
        return None if baseline is None else own + rate_terms(baseline, -sign)
    return own


def figure_groups(units: PointUnits | None, key: str) -> tuple[Totals, ...] | None:
    """A point's figure `key` as one group of sums (None: not kept, or its baseline did not run)."""
    terms = None if units is None else figure_terms(units, key, 1)
    return None if terms is None else (Totals.of(*terms),)
