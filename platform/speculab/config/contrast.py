"""`sweep.*`: what a sweep's answer compares besides its ranking. `sweep.contrast` names one swept key (or
config group) whose values the sweep compares pair by pair at every setting of the other swept keys
(`results.verdicts.sweep_answer`): `speculab -m algorithm=gbv,block algorithm.L=4,8 sweep.contrast=algorithm`
answers "gbv against block at each L" in one table. It changes no token a point decodes."""

from __future__ import annotations

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
