"""The bootstrap's memory is bounded by its chunk, not by its resamples, its points or its calls.

Measured with `tracemalloc`, which counts every allocation Python makes and every array's data that
numpy allocates (numpy reports its buffers to it), from the moment it starts: what the measured calls
allocate, without the interpreter, torch and the modules imported before. A process-wide figure (the
resident set's peak, `resource.getrusage`) would hold the whole test session's peak, which this file
cannot lower, and one that a library's arena or an import of SciPy inside the call moves by tens of MB.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable

import numpy as np

from speculab.results.verdicts import sweep_answer
from speculab.stats import CHUNK, Totals, log_ratio
from support.sweeps import MEASURED, draw_units, point, truth

MB = 1e6


def traced(call: Callable[[], object]) -> tuple[float, float]:
    """(peak, left) MB of what `call` allocates: the most it held at once, and what it still holds once its
    result is dropped (a cache's share)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        result = call()
        peak = tracemalloc.get_traced_memory()[1] - before
        del result
        left = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return peak / MB, left / MB


def test_a_50_point_sweeps_verdicts_stay_under_200_mb() -> None:
    """A sweep of 50 points on 32 prompts, built as the verdicts' tests build one: its answer (every
    verdict) and the ranking's intervals simultaneous over the 50 points, each a bootstrap of 20,000
    resamples (`results.selection`), the costliest part of an answer."""
    rng = np.random.default_rng(0)
    units, cost = draw_units(rng, 32), truth() / 1.3
    points = [point(rng, units, cost / (1 + 0.002 * i), MEASURED, f"p{i}", intervals=False) for i in range(50)]
    _ = sweep_answer(points[:2]).figures  # imports (SciPy's special functions) outside the measure

    def answer() -> object:
        found = sweep_answer(points)
        return found, found.figures

    peak, _ = traced(answer)
    assert peak < 200, f"{peak:.0f} MB"


def test_a_bootstraps_memory_does_not_grow_with_its_resamples_nor_stay_after_it() -> None:
    """200 units, 2,000 resamples against 40,000: the counts are drawn CHUNK resamples at a time, so the
    larger bootstrap holds only its longer list of t* (8 bytes a resample) more, where one that drew its
    [resamples, units] counts whole would hold 64 MB of them; and nothing is left once it returns (no
    cache keeps counts between calls)."""
    rng = np.random.default_rng(1)
    totals = Totals.of((1, rng.integers(8, 64, 200)), (-1, rng.uniform(1.0, 5.0, 200)))
    log_ratio(totals, resamples=100)  # imports outside the measure
    small, _ = traced(lambda: log_ratio(totals, resamples=2 * CHUNK))
    large, left = traced(lambda: log_ratio(totals, resamples=40 * CHUNK))
    assert large < small + 3 * 40 * CHUNK * 8 / MB, (small, large)
    assert left < 0.1, left
