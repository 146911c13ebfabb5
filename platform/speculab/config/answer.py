"""What a sweep's answer compares and how a race stages it, and their checks.

`sweep.contrast` names one swept key (or config group) whose values the sweep compares pair by pair at
every setting of the other swept keys (`results.verdicts.sweep_answer`): `speculab -m algorithm=gbv,block
algorithm.L=4,8 sweep.contrast=algorithm` answers "gbv against block at each L" in one table. It changes
no token a point decodes. A racing sweep (`hydra/sweeper=race`, `hydra.sweeper.stages`: the prompts
decoded by the end of each stage) decodes its points on slices of one sample (`results.race`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class SweepConfig:
    contrast: str | None = None  # a swept key or group: compare each pair of its values at every setting of the rest


def contrast_errors(contrast: str | None, varied: list[str], sweeping: bool) -> list[str]:
    """`sweep.contrast` names a key or group this sweep varies (`varied`: those with two values or more),
    in a sweep (`sweeping`: `-m`); one line each where it does not."""
    if contrast is None:
        return []
    if not sweeping:
        return [f"sweep.contrast={contrast}: compares the points of a sweep; run with -m and sweep {contrast}"]
    if contrast not in varied:
        swept = ", ".join(varied) or "nothing"
        return [f"sweep.contrast={contrast}: not a key this sweep varies over two values or more (it varies {swept})"]
    return []


RACE_SETS = ("dataset.num_prompts", "dataset.slice")  # what a race sets for each stage's points


def race_errors(
    stages: Sequence[int], overrides: Sequence[str], contrast: str | None, least: int, held: int | None
) -> list[str]:
    """A race's stages: increasing whole numbers of prompts, each stage `least` prompts or more (a test's
    fewest units), the last no more than the `held` prompts of the dataset (None: not known before it
    loads), its points' prompt count and slices left to it, and no contrast (a race drops points a
    contrast would pair)."""
    errors = []
    bounds = [0, *stages]
    whole = all(isinstance(v, int) and not isinstance(v, bool) for v in stages)
    if len(stages) < 2 or not whole or any(b - a < least for a, b in itertools.pairwise(bounds)):
        errors.append(
            f"hydra.sweeper.stages={list(stages)}: must be two or more increasing prompt counts, each stage "
            f"{least} prompts or more (the fewest a verdict is tested on), e.g. [12,32]"
        )
    elif held is not None and stages[-1] > held:
        errors.append(
            f"hydra.sweeper.stages={list(stages)}: the last stage decodes {stages[-1]} prompts of a sample; the "
            f"dataset holds {held}, so it must be <= {held}"
        )
    for key in RACE_SETS:
        if any(o.lstrip("+~").split("=", 1)[0] == key for o in overrides):
            errors.append(f"{key}: a race sets it for each stage (the last stage's count, a slice each); leave it out")
    if contrast is not None:
        errors.append(
            f"sweep.contrast={contrast}: a race drops points a contrast pairs; run the contrast as a flat sweep"
        )
    return errors


def stage_bounds(stages: Sequence[int]) -> list[tuple[int, int]]:
    """Each stage's positions [start, stop) in the race's sample: [0, 12), [12, 32) for stages [12, 32]."""
    return list(itertools.pairwise([0, *stages]))


def stage_jobs(points: Sequence[Sequence[str]], start: int, stop: int, sample: int) -> list[list[str]]:
    """The points' overrides at a stage: positions [start, stop) of a sample of `sample` prompts."""
    return [[*p, f"dataset.num_prompts={sample}", f"dataset.slice=[{start},{stop}]"] for p in points]
