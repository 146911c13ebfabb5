"""`PhaseClock`: the time a decode spends per phase (draft, target, verify), without stalling the
device: on CUDA, events on the stream read once the run is over; elsewhere, the host clock."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from speculab.core.records import RoundRecord

Mark = float | torch.cuda.Event  # a point in time: the host clock's seconds, or an event on the stream
Span = tuple[str, Mark, Mark]  # (phase, start, end)


@dataclass(frozen=True)
class Closed:
    """A closed round as an adaptive policy reads it: its record, its seconds (the paired check and the
    draft's catch-up left out) and the catch-up's seconds (0 where the round ran none)."""

    record: RoundRecord
    seconds: float
    catch_up_s: float


@dataclass
class RoundMarks:
    """A round's marks, turned into its record's phase times once the run is over (`PhaseClock.settle`)."""

    record: RoundRecord
    start: Mark
    end: Mark
    phases: list[Span]


class PhaseClock:
    """Time per phase without stalling the device. Where this process runs CUDA work, each phase
    boundary is an event recorded on the current stream and read when the run is over: the phases
    are intervals of the device's own timeline, and no phase waits for the GPU to drain (a
    synchronise per phase would stall the launch queue 5 times a round). Elsewhere, the host clock.
    The events are on the current device's stream: with the draft on another GPU in-process
    (`model.draft_device`), its phase shows the launch time on the host, not its kernels."""

    def __init__(self) -> None:
        self.cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        self.spans: list[Span] = []  # phases not yet claimed by a round (or the prefill)
        self.rounds: list[RoundMarks] = []
        self.last: Mark | None = None

    def mark(self) -> Mark:
        if not self.cuda:
            self.last = time.perf_counter()
            return self.last
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self.last = event
        return event

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = self.mark()
        yield
        self.spans.append((name, start, self.mark()))

    def begin_round(self) -> tuple[Mark, int]:
        """The round's start: its mark, and where its phases begin among the unclaimed ones."""
        return self.mark(), len(self.spans)

    def close_round(self, record: RoundRecord, begun: tuple[Mark, int]) -> None:
        """The phases since `begun` (`begin_round`) belong to `record`, whose times `settle` fills in."""
        start, first = begun
        self.rounds.append(RoundMarks(record, start, self.mark(), self.spans[first:]))
        del self.spans[first:]

    def finished(self, since: int) -> tuple[list[Closed], int]:
        """The rounds closed from index `since` on whose marks the device has passed, never waiting for it
        (on CUDA a round's events complete by the next round's host read), and the index to ask from next
        time. What an adaptive policy learns its costs from (`core.adaptive`), before `settle` fills the
        records' times."""
        done = []
        for marks in self.rounds[since:]:
            if isinstance(marks.end, torch.cuda.Event) and not marks.end.query():
                break
            spent = _sums(marks.phases)
            paired, catch_up = spent.get("paired", 0.0), spent.get("catch_up", 0.0)
            done.append(Closed(marks.record, _seconds(marks.start, marks.end) - paired - catch_up, catch_up))
        return done, since + len(done)

    def settle(self) -> dict[str, float]:
        """Wait for the last mark (once per run), fill every closed round's phase times (the rest of
        the round is `time_other_s`), and return the seconds of the phases no round claimed (prefill)."""
        if isinstance(self.last, torch.cuda.Event):
            self.last.synchronize()
        for marks in self.rounds:
            spent = _sums(marks.phases)
            r = marks.record
            # the draft's catch-up on a unit (an adaptive policy's deferred prefill) is draft time
            r.time_draft_s = spent.get("draft", 0.0) + spent.get("catch_up", 0.0)
            r.time_target_s = spent.get("target", 0.0)
            r.time_verify_s, r.time_paired_s = spent.get("verify", 0.0), spent.get("paired", 0.0)
            r.time_other_s = max(0.0, _seconds(marks.start, marks.end) - sum(spent.values()))
        self.rounds = []
        rest, self.spans = _sums(self.spans), []
        return rest


def _seconds(start: Mark, end: Mark) -> float:
    if isinstance(start, torch.cuda.Event) and isinstance(end, torch.cuda.Event):
        return start.elapsed_time(end) / 1e3
    assert isinstance(start, float) and isinstance(end, float)
    return end - start


def _sums(spans: list[Span]) -> dict[str, float]:
    """Seconds per phase name."""
    spent: dict[str, float] = {}
    for name, start, end in spans:
        spent[name] = spent.get(name, 0.0) + _seconds(start, end)
    return spent
