"""A point's methods as the driver calls them, on one loop or on several alike loops (`cluster.spread`).

`Decoders` runs one method on one unit on its loop, wherever the loop runs (`speculab.runtime.loop`), and keeps
what the first repetition decoded and what the runtime counted for it. With `cluster.spread` a point's
units are dealt round-robin to the loops of several replicas (`lanes`: unit u to loop u mod N, each lane
in a thread of its own); `merged` then gives one `Decoders` over all of them, its results in unit order,
so the figures are pooled over units as on one loop. Each unit is seeded by its first prompt, so where
it runs changes no token.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from speculab.core.measure import Sample
from speculab.core.paired import PromptSums
from speculab.core.records import PromptRecord, RunResult
from speculab.process import interrupts
from speculab.runtime.loop import METHODS, UnitResult

if TYPE_CHECKING:
    from speculab.runtime.transport.proxy import GroupProxy

MODEL_ROLES = ("target", "draft")  # the groups a loop in this process calls every round (`runtime.loop=driver`)


@dataclass
class Decoders:
    """The point's methods as the driver sees them: each runs one unit on the loop, wherever the loop
    runs (`speculab.runtime.loop`), and what their first repetition (`repeat` 0) decoded is kept here for the
    metrics and records; a warm-up call (`repeat` -1) keeps nothing."""

    loop: Any  # a PointLoop in this process, or the target actor's, through its group proxy
    groups: dict[str, GroupProxy]  # the Ray groups the point uses (none inline), for their Ray time
    on_prompt: Callable[[PromptRecord], None] = lambda record: None
    runs: dict[str, list[Any]] = field(default_factory=lambda: {method: [] for method in METHODS})
    paired: list[PromptSums] = field(default_factory=list)  # per unit: the paired comparison's sums per prompt
    ray_s: float = 0.0  # Ray time of the first repetition's speculative decodes
    model_calls: int = 0  # the Ray calls their loop made to model groups (none for a loop beside the target)
    rounds: int = 0  # their rounds
    host_syncs_per_round: float | None = None  # counted on the speculative warm-up, where the loop runs CUDA work

    def ray_clock(self) -> float:
        return sum(proxy.stats.ray_s for proxy in self.groups.values())

    def model_call_count(self) -> int:
        """Ray calls made so far to model groups by a loop in this process (the loop group's calls
        come from the driver, once per unit, not from the loop)."""
        return sum(proxy.stats.calls for role, proxy in self.groups.items() if role in MODEL_ROLES)

    def method(self, name: str) -> Callable[[int, int], Sample]:
        def run(unit: int, repeat: int) -> Sample:
            interrupts.raise_if_received()  # a point in a replica's thread stops at a unit's end (`launch.launcher`)
            ray_s, calls = self.ray_clock(), self.model_call_count()
            done: UnitResult = self.loop.decode_unit(name, unit, repeat)
            if done.host_syncs_per_round is not None:
                self.host_syncs_per_round = done.host_syncs_per_round
            if repeat == 0:
                self.runs[name].append(done.result)
            if repeat == 0 and isinstance(done.result, RunResult) and name == "speculative":
                self.ray_s += self.ray_clock() - ray_s
                self.model_calls += self.model_call_count() - calls
                self.rounds += len(done.result.rounds)
                if done.paired is not None:
                    self.paired.append(done.paired)
                for record in done.result.prompts:
                    self.on_prompt(record)
            return done.sample

        return run

    def paired_sums(self) -> PromptSums:
        """The paired comparison's sums of every prompt of the point, in prompt order."""
        return PromptSums.concat(self.paired)


def round_robin(parts: list[list[Any]]) -> list[Any]:
    """The lanes' lists (lane r holds units r, r + N, ...) in unit order, up to the first unit missing."""
    merged = []
    for unit in range(sum(map(len, parts))):
        lane, at = unit % len(parts), unit // len(parts)
        if at >= len(parts[lane]):
            break
        merged.append(parts[lane][at])
    return merged


def merged(lanes: list[Decoders]) -> Decoders:
    """One `Decoders` over every lane: results in unit order (the prefix every lane finished), Ray's time,
    calls and rounds summed; the first lane's loop and groups (one lane: that lane itself)."""
    if len(lanes) == 1:
        return lanes[0]
    first = lanes[0]
    syncs = [lane.host_syncs_per_round for lane in lanes if lane.host_syncs_per_round is not None]
    return Decoders(
        first.loop,
        first.groups,
        runs={method: round_robin([lane.runs[method] for lane in lanes]) for method in METHODS},
        paired=round_robin([lane.paired for lane in lanes]),
        ray_s=sum(lane.ray_s for lane in lanes),
        model_calls=sum(lane.model_calls for lane in lanes),
        rounds=sum(lane.rounds for lane in lanes),
        host_syncs_per_round=syncs[0] if syncs else None,
    )
