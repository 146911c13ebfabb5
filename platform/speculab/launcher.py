"""speculab's Hydra launcher: a sweep's points side by side, each on a replica of its model groups.

Hydra hands a sweep's jobs to a launcher (`hydra/launcher`); speculab's (`hydra_plugins.speculab_launcher`)
runs them with Hydra's basic launcher, one after another, when `cluster.replicas` is 1. With N > 1 it
starts N threads in this process, one per replica; each takes the next point in launch order, runs it
as Hydra would (its directory, saved config, log file and callbacks) on its own copy of the model
groups (`Placement.replica`: groups of their own names, placed apart by Ray), and keeps those groups
loaded for its next point. The driver's threads only wait on Ray: each point's decode loop runs on its
replica's rank 0 (`runtime.loop=target`), so the points share no core of the decode.

Hydra's Ray launcher (hydra-ray-launcher) would start a process per point, and each would load its
models again; a thread per replica keeps one loaded copy for all the points it runs.

A replica lost mid-point (its node or an actor, once the group cannot be placed again) gives its point
back to the queue, to run again from its first unit on another replica (same seeds, same tokens); the
lost replica takes no more points. Where no other replica is left, the point fails alone, with what it
finished, and the sweep goes on.
"""

from __future__ import annotations

import copy
import logging
import logging.config
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from hydra.core.utils import JobReturn, JobStatus
from hydra.types import HydraContext
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from speculab import interrupts, jobs
from speculab.config import RunPlan
from speculab.config.sweep import planned
from speculab.experiment import PointOutcome
from speculab.results.point import FailedPoint, PointShape
from speculab.show.board import SweepBoard
from speculab.show.console import say

STOP_WAIT_S = 60.0  # after Ctrl-C, how long the running points have to stop at their unit's end


@dataclass(frozen=True)
class Pending:
    """A point to launch: its job number, overrides and composed config (Hydra's keys included)."""

    index: int
    overrides: tuple[str, ...]
    config: DictConfig

    @property
    def output_dir(self) -> Path:
        return Path(self.config.hydra.runtime.output_dir)

    @property
    def plan(self) -> RunPlan:
        return planned(list(self.overrides))


def replica_count(overrides: Sequence[Sequence[str]]) -> int:
    """The replicas a sweep's points run on side by side: `cluster.replicas` (one value for the sweep,
    checked when it started), for auto as many copies of the first point's groups as the alive nodes
    hold, never more than there are points; 1 with `cluster.spread` (each point spreads its units over
    the replicas, one point after another)."""
    from speculab.experiment import model_specs, replica_copies

    plan = planned(list(overrides[0]))
    return 1 if plan.cfg.cluster.spread else replica_copies(plan, *model_specs(plan), len(overrides))


def composed(context: HydraContext, base: DictConfig, overrides: Sequence[str], index: int) -> Pending:
    """A point's config as Hydra's basic launcher composes it, with its job number and output directory."""
    config = context.config_loader.load_sweep_config(base, list(overrides))
    with open_dict(config):
        config.hydra.job.id = index
        config.hydra.job.num = index
    output_dir = Path(str(config.hydra.sweep.dir)) / str(OmegaConf.select(config, "hydra.sweep.subdir"))
    with read_write(config.hydra.runtime), open_dict(config.hydra.runtime):
        config.hydra.runtime.output_dir = str(output_dir.absolute())
    return Pending(index, tuple(overrides), config)


def job_logging_without_file(config: DictConfig) -> dict[str, Any]:
    """Hydra's job logging without its file handler: each point's thread adds its own (`job_log`)."""
    settings = OmegaConf.to_container(config.hydra.job_logging, resolve=True)
    assert isinstance(settings, dict)
    settings.get("handlers", {}).pop("file", None)
    root = settings.get("root", {})
    root["handlers"] = [h for h in root.get("handlers", []) if h != "file"]
    return cast(dict[str, Any], settings)


@contextmanager
def job_log(path: Path, config: DictConfig) -> Iterator[None]:
    """What this thread logs, also written to `path` (the point's `<job name>.log`, as Hydra would)."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter(OmegaConf.select(config, "hydra.job_logging.formatters.simple.format")))
    thread = threading.get_ident()
    handler.addFilter(lambda record: record.thread == thread)
    logging.getLogger().addHandler(handler)
    try:
        yield
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()


def saved(pending: Pending, task_cfg: DictConfig) -> None:
    """The point's config, Hydra's and its overrides in `<output dir>/.hydra`, as Hydra saves them."""
    if (subdir := pending.config.hydra.output_subdir) is None:
        return
    folder = pending.output_dir / str(subdir)
    folder.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(task_cfg, folder / "config.yaml")
    OmegaConf.save(OmegaConf.masked_copy(pending.config, "hydra"), folder / "hydra.yaml")
    OmegaConf.save(pending.config.hydra.overrides.task, folder / "overrides.yaml")


class SideBySide:
    """A sweep's points shared out to replica threads: a queue in launch order, the results by job
    number, the replicas lost, and the callbacks called one at a time."""

    def __init__(self, context: HydraContext, task: Callable[[DictConfig], Any], points: list[Pending], replicas: int):
        self.context, self.task, self.replicas = context, task, replicas
        self.queue = deque(points)
        self.unfinished = len(points)
        self.results: dict[int, JobReturn] = {}
        self.lost: set[int] = set()
        self.stopped: BaseException | None = None  # what ended a replica's thread other than the queue's end
        self.cond = threading.Condition()
        self.board = SweepBoard(len(points), replicas)

    def run(self) -> list[JobReturn]:
        """Every point, on the replicas' threads; their JobReturns in launch order."""
        threads = [
            threading.Thread(target=self.work, args=(r,), name=f"speculab-replica-{r + 1}", daemon=True)
            for r in range(self.replicas)
        ]
        with self.board.shown():
            for thread in threads:
                thread.start()
            try:
                self.wait(threads)
            except KeyboardInterrupt:
                say("speculab: interrupted; the running points stop at the end of their unit")
                self.wait(threads, time.monotonic() + STOP_WAIT_S)
                raise
        return [self.results[i] for i in sorted(self.results)]

    def wait(self, threads: list[threading.Thread], deadline: float | None = None) -> None:
        """Until every thread ends (or `deadline`): an interrupt is raised here, in the main thread, and
        what stopped a replica's thread is raised once all have ended."""
        while any(t.is_alive() for t in threads) and (deadline is None or time.monotonic() < deadline):
            for thread in threads:
                thread.join(timeout=0.2)
            if deadline is None:
                interrupts.raise_if_received()
        if self.stopped is not None and deadline is None:
            raise self.stopped

    def take(self, replica: int) -> Pending | None:
        """The next point for `replica`, waiting while a running point could still come back; None at the end."""
        with self.cond:
            while not self.queue and self.unfinished and replica not in self.lost and self.stopped is None:
                self.cond.wait(timeout=1.0)
            if not self.queue or replica in self.lost or self.stopped is not None:
                return None
            self.board.started()
            return self.queue.popleft()

    def spare(self, replica: int) -> bool:
        """Whether a replica other than `replica` is still running points."""
        with self.cond:
            return bool(set(range(self.replicas)) - self.lost - {replica})

    def work(self, replica: int) -> None:
        try:
            while (pending := self.take(replica)) is not None:
                start = time.monotonic()
                pending.output_dir.mkdir(parents=True, exist_ok=True)
                with job_log(pending.output_dir / f"{pending.config.hydra.job.name}.log", pending.config):
                    done = self.run_point(pending, replica)
                    if (lost := jobs.replica_lost(done)) is not None:
                        self.give_back(pending, replica, done, lost)  # said in the point's log too
                        return
                self.finish(pending, done, replica, time.monotonic() - start)
        except BaseException as err:  # an interrupt in this thread, or a failure outside any point
            with self.cond:
                self.stopped = self.stopped or err
                self.cond.notify_all()

    def run_point(self, pending: Pending, replica: int) -> JobReturn:
        """One point's job as Hydra's `run_job` runs it, with this thread's `jobs.Job`."""
        task_cfg = copy.deepcopy(pending.config)
        with read_write(task_cfg), open_dict(task_cfg):
            del task_cfg["hydra"]
        done = JobReturn(
            overrides=list(pending.overrides),
            cfg=task_cfg,
            hydra_cfg=OmegaConf.masked_copy(pending.config, "hydra"),
            working_dir=os.getcwd(),
            task_name=str(pending.config.hydra.job.name),
        )
        saved(pending, task_cfg)
        sweep_dir = Path(str(pending.config.hydra.sweep.dir))
        job = jobs.Job(pending.overrides, True, pending.output_dir, sweep_dir, replica, self.replicas)
        job = replace(job, spare=lambda: self.spare(replica))
        with jobs.within(job):
            with self.cond:
                self.context.callbacks.on_job_start(config=pending.config, task_function=self.task)
            try:
                done.return_value = self.task(task_cfg)
                done.status = JobStatus.COMPLETED
            except Exception as err:
                done.return_value = err
                done.status = JobStatus.FAILED
        return done

    def finish(self, pending: Pending, done: JobReturn, replica: int, seconds: float) -> None:
        with self.cond:
            self.results[pending.index] = done
            self.unfinished -= 1
            self.context.callbacks.on_job_end(config=pending.config, job_return=done)
            ok = done.status == JobStatus.COMPLETED and not isinstance(done.return_value, FailedPoint)
            resumed = isinstance(done.return_value, PointOutcome) and done.return_value.result.resumed
            self.board.ended(PointShape.of(pending.plan.cfg).name, ok, seconds, replica, resumed)
            self.cond.notify_all()

    def give_back(self, pending: Pending, replica: int, done: JobReturn, lost: jobs.ReplicaLost) -> None:
        """`replica` was lost in `pending`: the point goes back to the queue's front, the replica's groups
        close, and the callbacks see the lost attempt end (Hydra pairs each job's start with an end)."""
        from speculab.runtime.groups import POOL

        with self.cond:
            self.lost.add(replica)
            self.queue.appendleft(pending)
            self.board.requeued()
            self.context.callbacks.on_job_end(config=pending.config, job_return=done)
            say(f"speculab: replica {replica + 1} lost ({lost.why}); {lost.point} runs again on another replica")
            self.cond.notify_all()
        POOL.close_replica(replica)


def launch_side_by_side(
    context: HydraContext,
    task: Callable[[DictConfig], Any],
    base: DictConfig,
    overrides: Sequence[Sequence[str]],
    first_index: int,
    replicas: int,
) -> list[JobReturn]:
    """The sweep's points on `replicas` threads, each its own replica of the model groups."""
    from speculab.runtime.ray_actors import connect

    points = [composed(context, base, o, first_index + i) for i, o in enumerate(overrides)]
    logging.config.dictConfig(job_logging_without_file(points[0].config))
    Path(str(base.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
    placement = points[0].plan.placement
    connect(placement.address, placement.num_cpus)  # once, here: the threads share this driver's Ray
    say(f"speculab: sweep of {len(points)} points on {replicas} replicas of their model groups (cluster.replicas)")
    return SideBySide(context, task, points, replicas).run()
