"""Speed figures a researcher can trust: interleaved, repeated, paired per prompt, with intervals.

A point compares methods (the speculative decode, the engine's autoregressive loop,
transformers' `generate`) on the same prompts. On a shared machine the load drifts within
seconds, so timing every prompt of one method, then every prompt of the next, compares
different machines. `interleave` instead runs each unit (the prompts one batch decodes
together: one prompt at batch 1) with every method back to back, in an order that rotates
from turn to turn, `repeats` times over. A speedup is then a ratio of two measurements taken
seconds apart on the same unit (`paired_ratios`); a figure is the median over units of each
unit's median over repetitions, with a 95% percentile bootstrap interval over units
(`median_interval`, SciPy's `bootstrap`). Decoding is seeded per unit, so each repetition
decodes the same tokens and only the clock differs between them.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
RESAMPLES = 2000
T = TypeVar("T")


@dataclass(frozen=True)
class Sample:
    """One method on one unit, once."""

    tokens: int  # kept tokens of the unit's prompts
    wall_s: float
    cpu_s: float  # CPU seconds of every process doing the work (this one and the model actors)


# method -> [unit][repetition]
Timings = dict[str, list[list[Sample]]]


@dataclass(frozen=True)
class Interval:
    value: float  # the median over units of each unit's median over repetitions
    low: float  # the 95% bootstrap interval over units (NaN: a single measurement)
    high: float


def timed(cpu_clock: Callable[[], float], work: Callable[[], T]) -> tuple[T, float, float]:
    """(work(), its wall seconds, the CPU seconds `cpu_clock` counted meanwhile)."""
    wall, cpu = time.perf_counter(), cpu_clock()
    result = work()
    return result, time.perf_counter() - wall, cpu_clock() - cpu


def rotation(methods: list[str], turn: int) -> list[str]:
    """The order of turn `turn`: each method leads once every len(methods) turns."""
    k = turn % len(methods)
    return methods[k:] + methods[:k]


def interleave(run: dict[str, Callable[[int, int], Sample]], units: int, repeats: int) -> Timings:
    """run[method](unit, repetition) for every unit and repetition, methods back to back per unit."""
    timings: Timings = {method: [[] for _ in range(units)] for method in run}
    methods = list(run)
    for repeat in range(repeats):
        for unit in range(units):
            for method in rotation(methods, repeat * units + unit):
                timings[method][unit].append(run[method](unit, repeat))
    return timings


def throughputs(samples: list[list[Sample]]) -> list[list[float]]:
    """Tokens per wall second, [unit][repetition]."""
    return [[s.tokens / s.wall_s for s in unit] for unit in samples]


def paired_ratios(fast: list[list[Sample]], slow: list[list[Sample]], cpu: bool = False) -> list[list[float]]:
    """[unit][repetition] throughput of `fast` over that of `slow` in the same turn (tokens per second,
    or per CPU second): a speedup of fast over slow, measured seconds apart on the same unit."""

    def rate(s: Sample) -> float:
        return s.tokens / (s.cpu_s if cpu else s.wall_s)

    return [[rate(f) / rate(s) for f, s in zip(fu, su)] for fu, su in zip(fast, slow)]


def median_interval(values: list[list[float]], seed: int = 0) -> Interval:
    """The median over units of each unit's median over repetitions, with a percentile bootstrap
    interval over units; with one unit its repetitions are the resampled sample (NaN bounds
    when that is one value too)."""
    per_unit = [statistics.median(unit) for unit in values]
    sample = per_unit if len(per_unit) > 1 else values[0]
    value = statistics.median(per_unit)
    if len(sample) < 2:
        return Interval(value, float("nan"), float("nan"))
    if min(sample) == max(sample):
        return Interval(value, sample[0], sample[0])
    result = stats.bootstrap(
        (np.asarray(sample),),
        np.median,
        confidence_level=CONFIDENCE,
        n_resamples=RESAMPLES,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    low, high = result.confidence_interval
    return Interval(value, float(low), float(high))


def ratio_interval(numerators: list[float], denominators: list[float]) -> float | None:
    """Half-width of the CONFIDENCE interval of sum(y) / sum(x) over prompts (the ratio estimator's
    linearised standard error, Student t with n - 1 degrees of freedom); None below two prompts.
    For figures that are ratios of counts summed over prompts (block efficiency, acceptance by depth)."""
    n = len(numerators)
    if n < 2 or sum(denominators) <= 0:
        return None
    ratio = sum(numerators) / sum(denominators)
    mean_x = sum(denominators) / n
    residuals = sum((y - ratio * x) ** 2 for y, x in zip(numerators, denominators))
    se = math.sqrt(residuals / ((n - 1) * n)) / mean_x
    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1) * se)


def interval_metrics(key: str, interval: Interval) -> dict[str, float]:
    """`key`, `key_ci_low`, `key_ci_high`."""
    return {key: interval.value, f"{key}_ci_low": interval.low, f"{key}_ci_high": interval.high}


def speed_metrics(timings: Timings, spec: str, ar: str | None, hf: str | None) -> dict[str, float]:
    """The point's speed figures from interleaved timings of the speculative method `spec` and its
    baselines (None: not run): tokens_per_s and the speedups with their intervals, and the
    CPU-time speedup over autoregressive."""
    rate = median_interval(throughputs(timings[spec]))
    metrics = interval_metrics("tokens_per_s", rate) | {"ms_per_token": 1000.0 / rate.value}
    if ar is not None:
        metrics |= interval_metrics("speedup_vs_ar", median_interval(paired_ratios(timings[spec], timings[ar])))
        metrics["speedup_vs_ar_cpu"] = median_interval(paired_ratios(timings[spec], timings[ar], cpu=True)).value
    if hf is not None:
        metrics |= interval_metrics("speedup_vs_hf", median_interval(paired_ratios(timings[spec], timings[hf])))
    return metrics


def baseline_speed(samples: list[list[Sample]]) -> dict[str, float]:
    """A baseline's tokens_per_s (median over units, as the point's own) and ms_per_token."""
    rate = median_interval(throughputs(samples)).value
    return {"tokens_per_s": rate, "ms_per_token": 1000.0 / rate}
