"""Timing a point's methods so that their speeds compare: interleaved, repeated, paired per unit.

A point compares methods (the speculative decode, the engine's autoregressive loop,
transformers' `generate`) on the same prompts. On a shared machine the load drifts within
seconds, so timing every prompt of one method, then every prompt of the next, compares
different machines. `interleave` instead runs each unit (the prompts one batch decodes
together: one prompt at batch 1) with every method back to back, in an order that rotates
from turn to turn, `repeats` times over. A speedup is then a ratio of two measurements taken
seconds apart on the same unit. A point's speed figures are ratios of totals over units and
repetitions (`UnitTotals`: total tokens over total seconds, the throughput the field reports), and a
typical unit's speedup is the median of the per-unit paired ratios (`paired_ratios`); both are in
`speculab.results.figures.speed_figures`. Decoding is seeded per unit, so each
repetition decodes the same tokens and only the clock differs between them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from speculab.core.records import PhaseSeconds

T = TypeVar("T")


@dataclass(frozen=True)
class Sample:
    """One method on one unit, once."""

    tokens: int  # kept tokens of the unit's prompts
    wall_s: float
    cpu_s: float  # CPU seconds of every process doing the work (this one and the model actors)
    # the engine's decode's seconds by phase in this repetition (None: a baseline, which has no phases)
    phases: PhaseSeconds | None = None


# method -> [unit][repetition]
Timings = dict[str, list[list[Sample]]]


@dataclass(frozen=True)
class UnitTotals:
    """One method's samples summed per unit over its repetitions: what its ratios of totals are over
    (tokens per second, a speedup), unit by unit, so that a comparison can pair two methods or two
    points on the units they share."""

    tokens: tuple[float, ...]  # [unit]
    wall_s: tuple[float, ...]  # [unit]
    cpu_s: tuple[float, ...]  # [unit]

    @classmethod
    def of(cls, samples: list[list[Sample]]) -> UnitTotals:
        """The sums of [unit][repetition] samples."""
        sums = [(sum(s.tokens for s in u), sum(s.wall_s for s in u), sum(s.cpu_s for s in u)) for u in samples]
        tokens, wall, cpu = zip(*sums) if sums else ((), (), ())
        return cls(tuple(map(float, tokens)), tuple(wall), tuple(cpu))

    def seconds(self, cpu: bool = False) -> tuple[float, ...]:
        return self.cpu_s if cpu else self.wall_s


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


def interleave_lanes(runs: list[dict[str, Callable[[int, int], Sample]]], units: int, repeats: int) -> Timings:
    """`interleave` with the units dealt round-robin to lanes (unit u to runs[u mod N]), each lane in a
    thread of its own (`cluster.spread`: a replica's loop each); the timings by unit, as one lane gives."""
    if len(runs) == 1:
        return interleave(runs[0], units, repeats)
    timings: Timings = {method: [[] for _ in range(units)] for method in runs[0]}

    def lane(k: int) -> None:
        mine = list(range(k, units, len(runs)))
        own = {m: (lambda f: lambda at, repeat: f(mine[at], repeat))(f) for m, f in runs[k].items()}
        for method, samples in interleave(own, len(mine), repeats).items():
            for at, unit in enumerate(mine):
                timings[method][unit] = samples[at]

    with ThreadPoolExecutor(len(runs), thread_name_prefix="speculab-lane") as pool:
        list(pool.map(lane, range(len(runs))))  # a lane's error is raised here, once the others end
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
