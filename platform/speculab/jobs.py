"""The Hydra job a point runs as: its overrides, its output directory, its sweep and its replica.

Hydra keeps the running job in one process-wide object (`HydraConfig`), which is right for its own
launcher, one job at a time. speculab's replica launcher (`speculab.launcher`) runs a sweep's points
side by side in threads of one process, so each thread carries its own `Job` here (`within`); outside
those threads the job is read from Hydra, as before. Whatever needs the job (the entry point, the
tracked run's directory and parent) asks `current()` and never Hydra directly.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr
from dataclasses import dataclass
from pathlib import Path

from hydra.core.utils import JobReturn, JobStatus


def _no_spare() -> bool:
    return False


@dataclass(frozen=True)
class Job:
    """One point's job: what Hydra's `overrides.task` holds, where its files go, and which replica runs it."""

    overrides: tuple[str, ...]  # the point's overrides (Hydra's `overrides.task`)
    sweeping: bool  # a point of a sweep (`-m`), not a single run
    output_dir: Path  # the job's own directory (Hydra's `runtime.output_dir`)
    sweep_dir: Path | None  # the sweep's directory (`hydra.sweep.dir`); None for a single run
    replica: int = 0  # which copy of the model groups runs the point (`cluster.replicas`)
    replicas: int = 1  # how many copies run the sweep's points side by side
    # whether another replica could take this point over if this one is lost (the launcher's answer)
    spare: Callable[[], bool] = _no_spare


class ReplicaLost(Exception):
    """A point's replica was lost (a node, an actor) while another replica can take the point over: the
    launcher runs it again there, from its first unit, with the same seeds. It names the point, why, the
    replica lost (from 0) and, once its run is known, the lost attempt's MLflow run (None: not tracked)."""

    def __init__(self, point: str, why: str, replica: int) -> None:
        super().__init__(why)
        self.point, self.why, self.replica = point, why, replica
        self.run_id: str | None = None


def replica_lost(done: JobReturn) -> ReplicaLost | None:
    """The lost replica behind a FAILED job, where that is why it failed. Hydra keeps what a job raised
    as its return value and raises it again when the value is read: that is how it is read here. Its
    reader also writes "Error executing job" to stderr, kept from the console: the launcher says what
    happened to a lost replica's point itself, and Hydra's sweeper reports any other failure."""
    if done.status != JobStatus.FAILED:
        return None
    try:
        with redirect_stderr(io.StringIO()):
            _ = done.return_value
    except ReplicaLost as lost:
        return lost
    except Exception:  # any other failure is not a lost replica
        return None
    return None


_LOCAL = threading.local()


@contextmanager
def within(job: Job) -> Iterator[Job]:
    """`job` is this thread's job inside the block."""
    _LOCAL.job = job
    try:
        yield job
    finally:
        del _LOCAL.job


def current() -> Job:
    """This thread's job: set by the replica launcher, else Hydra's running job, else a run outside Hydra
    (its files under ./outputs)."""
    if (job := getattr(_LOCAL, "job", None)) is not None:
        return job
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return Job((), False, Path("outputs").resolve(), None)
    hydra = HydraConfig.get()
    sweeping = hydra.mode == RunMode.MULTIRUN
    return Job(
        tuple(hydra.overrides.task),
        sweeping,
        Path(hydra.runtime.output_dir),
        Path(hydra.sweep.dir) if sweeping else None,
    )
