"""The Hydra job a point runs as: its overrides, its output directory, its sweep and its replica.

Every job runs through Hydra's `run_job`, one at a time in its process: a single run and a sweep's
points at `cluster.replicas=1` in the `speculab` process, a sweep's points side by side in one process
per replica (`speculab.launch.launcher`). So the running job is always Hydra's (`HydraConfig`); the replica a
process serves is this module's `Seat`, set once when a replica's process starts. Whatever needs the
job (the entry point, the tracked run's directory and parent) asks `current()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from multiprocessing.sharedctypes import SynchronizedArray
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus


@dataclass(frozen=True)
class Seat:
    """The replica this process serves (`cluster.replicas`): its number from 0, how many run the sweep,
    and which are lost, shared with the launcher and the other replicas' processes (one flag each, under
    the one lock the launcher made them with)."""

    replica: int = 0
    replicas: int = 1
    lost: SynchronizedArray[Any] | None = field(default=None, compare=False)

    def give_up(self) -> bool:
        """Whether this replica, its groups lost, gives its point up to another: the one decision of a lost
        replica, wherever it is asked (a replica's process, or the launcher for a process that died), made
        under the flags' lock so that two replicas lost at once never both leave their points to the other.
        Yes, and this replica is lost from now on, where another still runs points (or this one was lost
        already); no where it is the last, which goes on as a sweep on one copy does (its lost group
        placed again, or the point failed alone)."""
        if self.lost is None:
            return False
        with self.lost.get_lock():
            if not self.lost[self.replica] and all(self.lost[r] for r in range(self.replicas) if r != self.replica):
                return False
            self.lost[self.replica] = 1
            return True

    def retire(self) -> None:
        """This replica takes no more points (its process ended), whether or not another can take them."""
        if self.lost is not None:
            with self.lost.get_lock():
                self.lost[self.replica] = 1


class _Seated:
    """This process's seat: one replica per process, so this is the process's, not a job's."""

    seat = Seat()


def take_seat(seat: Seat) -> None:
    """This process serves `seat` from now on (a replica's process, as it starts)."""
    _Seated.seat = seat


@dataclass(frozen=True)
class Job:
    """One point's job: what Hydra's `overrides.task` holds, where its files go, and which replica runs it."""

    overrides: tuple[str, ...]  # the point's overrides (Hydra's `overrides.task`)
    sweeping: bool  # a point of a sweep (`-m`), not a single run
    output_dir: Path  # the job's own directory (Hydra's `runtime.output_dir`)
    sweep_dir: Path | None  # the sweep's directory (`hydra.sweep.dir`); None for a single run
    seat: Seat = Seat()

    @property
    def replica(self) -> int:
        return self.seat.replica

    @property
    def replicas(self) -> int:
        return self.seat.replicas

    def give_up(self) -> bool:
        """Whether this point goes to another replica, its replica lost (`Seat.give_up`)."""
        return self.seat.give_up()


# this process's sweep points that failed mid-run, by name: the sweep goes on past them, and its exit status
# (which Hydra's entry point does not return) says so; the launcher adds those its replicas' processes report
FAILED_POINTS: list[str] = []


class ReplicaLost(Exception):
    """A point's replica was lost (a node, an actor) while another replica can take the point over: the
    launcher runs it again there, from its first unit, with the same seeds. It names the point, why, the
    replica lost (from 0) and, once its run is known, the lost attempt's MLflow run (None: not tracked)."""

    def __init__(self, point: str, why: str, replica: int) -> None:
        super().__init__(why)
        self.point, self.why, self.replica = point, why, replica
        self.run_id: str | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        # it crosses from a replica's process to the launcher's: every field, not only Exception's args
        return (ReplicaLost, (self.point, self.why, self.replica), {"run_id": self.run_id})


def returned(done: JobReturn) -> Any:
    """What a job returned, or what it raised: the JobReturn's own field (`_return_value`, a dataclass field
    like the others), since its `return_value` property raises a FAILED job's exception again and writes
    "Error executing job" to stderr first (the launcher says what happened to a lost replica's point
    itself, and Hydra's sweeper reports any other failure)."""
    return done._return_value


def replica_lost(done: JobReturn) -> ReplicaLost | None:
    """The lost replica behind a FAILED job, where that is why it failed."""
    if done.status == JobStatus.FAILED and isinstance(lost := returned(done), ReplicaLost):
        return lost
    return None


def current() -> Job:
    """Hydra's running job, on this process's seat; outside Hydra, a run with its files under ./outputs."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return Job((), False, Path("outputs").resolve(), None, _Seated.seat)
    hydra = HydraConfig.get()
    sweeping = hydra.mode == RunMode.MULTIRUN
    return Job(
        tuple(hydra.overrides.task),
        sweeping,
        Path(hydra.runtime.output_dir),
        Path(hydra.sweep.dir) if sweeping else None,
        _Seated.seat,
    )
