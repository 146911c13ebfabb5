"""Simulated points and sweeps: what `speculab.results.verdicts` and the speed figures are tested on.

A sweep's points decode the same units (one prompt each, as at batch 1). A unit is code (long, drafts
well) or prose (short, drafts badly), as the mixed prompts of the answers issue: its speculative
decode takes `(rounds + 2) * round_cost` seconds (a round and the prefill cost round_cost
autoregressive steps each), its autoregressive decode `tokens + 5` steps, so a unit's speedup depends
on its acceptance and the point's throughput speedup on the mix: `round_cost = truth(1) / s` makes a
point truly s times faster than autoregressive decoding. The machine adds noise to every decode's
seconds (normal, or heavy-tailed t(3), on the log scale) and a load that every decode of a turn
shares and that drifts from turn to turn (an AR(1) on the log scale: consecutive units share it, so
units are not independent in time). `MEASURED` reproduces what two identical points measured here
(2-core CPU, 16 prompts): the per-unit ratio of their speedups spread by 0.044 on the log scale
(docs/measuring.md). Each figure's truth is its value over a population of units: `truth` draws many.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache

import numpy as np

from speculab.core.measure import UnitTotals
from speculab.results.names import Figures
from speculab.results.point import PointResult, PointShape, PointUnits
from speculab.results.ratios import speedup, throughput
from speculab.stats import Estimate, Totals, log_ratio, ratio_of_totals

L = 4
SHAPE = PointShape("block", None, 1, L, None, None, 1.0, "iid", "humaneval", 16, "tiny-pycode", 0, 64, 1, 0)


@dataclass(frozen=True)
class Machine:
    noise: float  # sigma of a decode's own log-seconds noise
    load: float  # sigma of the shared load's log (stationary)
    persist: float  # its correlation from one turn to the next
    heavy: bool = False  # t(3) noise, scaled to the same sigma, instead of normal


QUIET = Machine(0.03, 0.05, 0.5)  # an idle machine
MEASURED = Machine(0.04, 0.08, 0.6)
LOADED = Machine(0.15, 0.3, 0.8, heavy=True)


@dataclass(frozen=True)
class Units:
    """A draw of units: kept tokens and the drafts' acceptance rate of each."""

    tokens: np.ndarray  # [U]
    rate: np.ndarray  # [U]


def draw_units(rng: np.random.Generator, n: int, code: float = 0.4) -> Units:
    """Code (64 tokens, rates Beta(6, 2)) with probability `code`, else prose (8-39 tokens, Beta(1.5, 3))."""
    is_code = rng.random(n) < code
    tokens = np.where(is_code, 64, rng.integers(8, 40, n)).astype(float)
    return Units(tokens, np.where(is_code, rng.beta(6, 2, n), rng.beta(1.5, 3, n)))


def seconds(units: Units, round_cost: float) -> tuple[np.ndarray, np.ndarray]:
    """(speculative, autoregressive) seconds of each unit on an idle machine: a round keeps the accepted
    run of at most L drafts plus one token and costs `round_cost` autoregressive steps."""
    per_round = (1 - units.rate ** (L + 1)) / (1 - units.rate)
    return (units.tokens / per_round + 2.0) * round_cost, units.tokens + 5.0


def _noise(rng: np.random.Generator, machine: Machine, shape: tuple[int, ...]) -> np.ndarray:
    if machine.heavy:
        return np.exp(rng.standard_t(3, shape) * machine.noise / np.sqrt(3))
    return np.exp(rng.normal(0.0, machine.noise, shape))


def _load(rng: np.random.Generator, machine: Machine, turns: int) -> np.ndarray:
    """The shared load of each turn, an AR(1) on the log scale with a stationary sigma of `machine.load`."""
    log = np.empty(turns)
    log[0] = rng.normal(0.0, machine.load)
    step = machine.load * np.sqrt(1 - machine.persist**2)
    for turn in range(1, turns):
        log[turn] = machine.persist * log[turn - 1] + rng.normal(0.0, step)
    return np.exp(log)


def measure(
    rng: np.random.Generator,
    units: Units,
    round_cost: float,
    machine: Machine,
    repeats: int = 3,
    interaction: float = 0.0,
) -> tuple[UnitTotals, UnitTotals]:
    """(speculative, autoregressive) sums per unit over `repeats` interleaved turns; ``interaction``: the
    sigma of a factor on the log scale that this point's speculative decode of each unit draws afresh
    (a point-by-prompt interaction: verifiers gain differently on different prompts; its mean is 1, so it
    leaves every point's true throughput ratio as it was)."""
    spec, ar = seconds(units, round_cost)
    n = len(units.tokens)
    spec = spec * np.exp(rng.normal(-(interaction**2) / 2, interaction, n)) if interaction else spec
    return timed(rng, units.tokens, spec, ar, machine, repeats)


def timed(
    rng: np.random.Generator, tokens: np.ndarray, spec: np.ndarray, ar: np.ndarray, machine: Machine, repeats: int = 3
) -> tuple[UnitTotals, UnitTotals]:
    """(speculative, autoregressive) sums per unit of units that take `spec` and `ar` seconds on an idle
    machine, over `repeats` interleaved turns of `machine`."""
    n = len(tokens)
    load = _load(rng, machine, n * repeats).reshape(repeats, n).T  # [unit, repetition]: turns in launch order
    spec_s = (spec[:, None] * load * _noise(rng, machine, (n, repeats))).sum(1)
    ar_s = (ar[:, None] * load * _noise(rng, machine, (n, repeats))).sum(1)
    kept = tuple(tokens * repeats)
    return UnitTotals(kept, tuple(spec_s), tuple(spec_s)), UnitTotals(kept, tuple(ar_s), tuple(ar_s))


# The prompt mixes that a throughput interval finds hardest, each (tokens, speculative seconds,
# autoregressive seconds) of n units on an idle machine, at round_cost 1.
def mixed_prompts(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A quarter long code prompts (256 tokens) decoding 2.0x autoregressive decoding, the rest short chat
    (12-47 tokens) at 0.8x."""
    code = rng.random(n) < 0.25
    tokens = np.where(code, 256, rng.integers(12, 48, n)).astype(float)
    ar = tokens + 5.0
    return tokens, ar / np.where(code, 2.0, 0.8), ar


def one_dominant_unit(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`draw_units`' code and prose, the first unit 10 times as long as it would be."""
    units = draw_units(rng, n)
    units.tokens[0] *= 10
    return (units.tokens, *seconds(units, 1.0))


def heavy_tailed_lengths(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`draw_units`' acceptance rates with log-normal lengths (sigma 1, median 32 tokens)."""
    tokens = np.maximum(4.0, np.round(32 * rng.lognormal(0.0, 1.0, n)))
    units = Units(tokens, draw_units(rng, n).rate)
    return (tokens, *seconds(units, 1.0))


def design_truth(cell, n: int, samples: int = 20_000) -> float:
    """The throughput speedup a sample of n units from ``cell`` estimates: total autoregressive over total
    speculative seconds over many such samples."""
    rng = np.random.default_rng(54321)
    drawn = [cell(rng, n) for _ in range(samples)]
    return float(sum(ar.sum() for _, _, ar in drawn) / sum(spec.sum() for _, spec, _ in drawn))


def values_only(totals: Totals) -> Estimate:
    """A figure's value alone, no bootstrap: a simulated sweep decides from its units."""
    return log_ratio(totals, resamples=0).estimate()


def point(
    rng: np.random.Generator,
    units: Units,
    round_cost: float,
    machine: Machine,
    name: str = "",
    generate: float | None = None,
    interaction: float = 0.0,
    intervals: bool = True,
) -> PointResult:
    """A point measured on `units` as the platform measures one: its units, throughput and speedups
    (over transformers' generate too where `generate` gives generate's seconds over the loop's), with a
    point-by-prompt ``interaction`` (`measure`). Without ``intervals`` its figures are their values
    alone: a simulated sweep's verdicts are computed from the units, and the bootstrap of every figure's
    own interval would cost most of its time."""
    figure = ratio_of_totals if intervals else values_only
    spec, ar = measure(rng, units, round_cost, machine, interaction=interaction)
    figures = {"tokens_per_s": figure(throughput(spec)), "speedup_vs_ar": figure(speedup(spec, ar))}
    hf = None
    if generate is not None:
        hf = measure(rng, units, round_cost, machine)[1]
        hf = replace(hf, wall_s=tuple(s * generate for s in hf.wall_s))
        figures["speedup_vs_hf"] = figure(speedup(spec, hf))
    ids = tuple((f"p{i}",) for i in range(len(units.tokens)))
    shape = replace(SHAPE, algorithm=name or SHAPE.algorithm, prompts=len(ids))
    return PointResult(shape, Figures(figures), units=PointUnits(ids, spec, ar, hf))


@cache  # 400,000 units drawn: a simulated sweep asks for the same truth at every point
def truth(round_cost: float = 1.0, code: float = 0.4, n: int = 400_000) -> float:
    """A point's population throughput speedup: total autoregressive over total speculative seconds of
    many units (the machine's noise has the same mean for both, so it cancels)."""
    spec, ar = seconds(draw_units(np.random.default_rng(12345), n, code), round_cost)
    return float(ar.sum() / spec.sum())


def decode_prompts(rng: np.random.Generator, n: int, beta: tuple[float, float], T: int = 64) -> tuple[np.ndarray, ...]:
    """(kept tokens, sequence-rounds, rounds that accepted the first draft) of n prompts decoded by a
    simulated speculative loop: each prompt has its own acceptance rate (Beta(*beta): (8, 2) alike,
    (0.5, 2) code mixed with prose), each round accepts a geometric run of drafts (at most L) plus the
    bonus token, until eos (with probability 0.3, at a uniform length) or T tokens. Every prompt's
    rounds are drawn together, round by round."""
    rates = rng.beta(*beta, size=n)
    limits = np.where(rng.random(n) > 0.3, T, rng.integers(1, T + 1, n))
    kept, rounds, first = np.zeros(n), np.zeros(n), np.zeros(n)
    while (active := kept < limits).any():
        taus = np.minimum(rng.geometric(1 - np.minimum(rates, 1 - 1e-12)) - 1, L)
        kept = np.where(active, np.minimum(limits, kept + taus + 1), kept)
        rounds += active
        first += active & (taus >= 1)
    return kept, rounds, first


@dataclass(frozen=True)
class Race:
    """A simulated race's outcome: the index of the point it named (None: none), and the tokens it decoded
    over those a flat sweep of its points over every prompt of the sample decodes."""

    named: int | None
    cost: float


def race(
    rng: np.random.Generator, speeds: list[float], stages: list[int], machine: Machine, interaction: float = 0.0
) -> Race:
    """A race as `speculab.launch.racing.race` runs one (the same functions decide), on simulated points: point i
    truly speeds[i] times as fast as a point at 1.3x autoregressive decoding; each stage's prompts fresh."""
    from speculab.results.race import pooled, ruled_out, stage_share
    from speculab.results.verdicts import sweep_answer

    share = stage_share(len(stages), len(speeds), baselines=True)
    alive, decoded, start = list(range(len(speeds))), 0.0, 0
    units = draw_units(rng, stages[-1])
    cost = truth() / 1.3
    answer, history = None, {i: [] for i in alive}
    for number, stop in enumerate(stages, start=1):
        part = Units(units.tokens[start:stop], units.rate[start:stop])
        found = {
            i: point(rng, part, cost / speeds[i], machine, f"p{i}", interaction=interaction, intervals=False)
            for i in alive
        }
        for i, found_i in found.items():
            history[i].append(found_i)
        decoded += len(alive) * float(part.tokens.sum())
        if number == len(stages):
            out = len(speeds) - len(alive)
            left = [pooled(history[i], values_only) for i in alive]
            answer = sweep_answer(left, spent=share * (len(stages) - 1), ruled_out_before=out)
        else:
            _, out = ruled_out(list(found.values()), len(speeds), share)
            dropped = {id(p) for p, _ in out}
            alive = [i for i in alive if id(found[i]) not in dropped]
        start = stop
    best = answer.best if answer is not None else None
    return Race(
        int(best.shape.algorithm[1:]) if best is not None else None, decoded / (len(speeds) * float(units.tokens.sum()))
    )
