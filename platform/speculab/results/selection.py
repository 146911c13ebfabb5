"""A figure chosen for being the highest of a sweep's: it reads high (the winner's curse), so the figure
a sweep prints for its leader carries an interval simultaneous over every point it was chosen from, and
says by how much the highest of that many equal figures reads above their truth on average."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from speculab.results.point import PointResult
from speculab.results.ratios import figure_groups
from speculab.stats import CONFIDENCE, RESAMPLES, Estimate, log_ratio

ALPHA = 1 - CONFIDENCE


def max_normal(count: int) -> float:
    """E[max of `count` independent standard normals]: how far, in standard errors, the highest of
    `count` equal figures reads above their common value (the winner's curse)."""
    if count < 2:
        return 0.0
    from scipy.special import ndtr

    x = np.linspace(-8.0, 8.0, 4001)
    density = np.exp(-(x**2) / 2) / math.sqrt(2 * math.pi)
    return float(np.trapezoid(x * count * density * ndtr(x) ** (count - 1), x))


@dataclass(frozen=True)
class Selected:
    """The leader's figure as its selection allows: its interval simultaneous over the P points (each
    at 1 - ALPHA / P, so that all P hold their true values at once with 95%: the highest of them too),
    and how much higher than its truth the highest of P equal figures reads on average."""

    figure: Estimate
    overstates: float  # relative: 0.04 reads 4% high (0: one point)
    of: int  # points it was selected from


def selected(leader: PointResult, key: str, count: int) -> Selected:
    """The leader's figure `key` with its interval simultaneous over `count` points."""
    units = leader.units
    groups = None if units is None else figure_groups(units, key)
    figure = leader.figures.get(key, Estimate(math.nan))
    if groups is None or count < 2:
        return Selected(figure, 0.0, count)
    confidence = 1 - ALPHA / count
    found = log_ratio(*groups, resamples=max(RESAMPLES, math.ceil(20 * count / ALPHA)))
    bounds = found.interval(confidence) if found.testable else None
    shown = Estimate(figure.value, *bounds, found.n, f"simultaneous over {count} points") if bounds else figure
    overstates = math.expm1(max_normal(count) * found.se) if math.isfinite(found.se) else math.nan
    return Selected(shown, overstates, count)
