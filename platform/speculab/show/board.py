"""What the console shows while a point decodes: one progress bar, or a sweep's board.

A point alone draws its own bar (`point_progress`). When a sweep's points run side by side on replicas
(`speculab.launch.launcher`), each in a replica's process, the launcher's `SweepBoard` owns the terminal: one
line for the sweep (points done, running, queued and failed, elapsed time and an estimate of what is
left), and the replicas draw no bars of their own. Without a terminal nothing animates: each finished
point prints one line, and the board prints its last state when the sweep ends.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from speculab.show.console import console, say


class _Bars:
    drawn = (
        True  # False in a replica's process (`speculab.launch.replica_process`): the launcher's board owns the terminal
    )


def no_bars() -> None:
    """This process draws no point bars from now on: it is one of a sweep's replicas."""
    _Bars.drawn = False


@contextmanager
def point_progress(label: str, total: int) -> Iterator[Callable[[], None]]:
    """A bar for one point's `total` steps, labelled `label` (none in a replica's process); yields the
    function that advances it by one step."""
    if not _Bars.drawn:
        yield lambda: None
        return
    with Progress(console=console(), transient=False) as progress:
        task = progress.add_task(label, total=total)
        yield lambda: progress.advance(task)


@dataclass
class Tally:
    """A sweep's points by state."""

    total: int
    done: int = 0
    failed: int = 0
    running: int = 0

    @property
    def queued(self) -> int:
        return self.total - self.done - self.failed - self.running

    def line(self, replicas: int) -> str:
        failed = f" · {self.failed} failed" if self.failed else ""
        return f"sweep on {replicas} replicas: {self.done} done{failed} · {self.running} running · {self.queued} queued"


class SweepBoard:
    """The sweep's line, updated from the launcher's threads (one a replica)."""

    def __init__(self, total: int, replicas: int) -> None:
        self.tally, self.replicas = Tally(total), replicas
        self.lock = threading.Lock()
        shown = console()
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
            console=shown,
            transient=False,
            auto_refresh=shown.is_terminal,  # without a terminal nothing is drawn until the end
        )
        self.sweep: TaskID = self.progress.add_task(self.tally.line(replicas), total=total)

    @contextmanager
    def shown(self) -> Iterator[SweepBoard]:
        """The board on the terminal inside the block."""
        with self.progress:
            yield self

    def started(self) -> None:
        with self.lock:
            self.tally.running += 1
            self._refresh(0)

    def ended(self, name: str, ok: bool, seconds: float, replica: int, resumed: bool = False) -> None:
        """A point ended (`ok`: finished, else failed; `resumed`: found finished by an earlier launch, so
        skipped): the sweep's line, and one line for the point."""
        with self.lock:
            self.tally.running -= 1
            if ok:
                self.tally.done += 1
            else:
                self.tally.failed += 1
            self._refresh(1)
            what = f"{'done' if ok else 'failed'} in {seconds:.1f} s on replica {replica + 1}"
            what = "already finished in an earlier launch (resume=true)" if resumed else what
            say(f"speculab: {name}: {what}; {self.tally.line(self.replicas)}")

    def not_run(self, count: int) -> None:
        """`count` queued points failed without running (no replica was left to run them)."""
        with self.lock:
            self.tally.failed += count
            self._refresh(count)

    def requeued(self) -> None:
        """A running point went back to the queue (its replica was lost)."""
        with self.lock:
            self.tally.running -= 1
            self._refresh(0)

    def _refresh(self, advance: int) -> None:
        self.progress.update(self.sweep, description=self.tally.line(self.replicas), advance=advance)
