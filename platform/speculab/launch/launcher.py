"""speculab's Hydra launcher: a sweep's points side by side, each on a replica of its model groups.

Hydra hands a sweep's jobs to a launcher (`hydra/launcher`); speculab's (`hydra_plugins.speculab_launcher`)
runs them one after another through Hydra's `run_job` when `cluster.replicas` is 1. With N > 1 it starts
a process per replica (`speculab.launch.replica_process`), each with its own copy of the model groups
(`Placement.replica`: groups of their own names, placed apart by Ray) kept loaded from one point to its
next. A thread here per replica takes the next point in launch order, sends its composed config to its
replica's process, which runs it through `run_job` exactly as at N = 1 (Hydra's running job, working
directory and environment are process-wide: points at the same time need processes of their own), and
gets its `JobReturn` back. The sweep's own state (its parent run, its board) stays in this process.

Hydra's Ray launcher (hydra-ray-launcher) would start a process per point, and each would load its
models again; a process per replica keeps one loaded copy for all the points it runs.

A replica lost mid-point (its node or an actor, once the group cannot be placed again; or its process)
gives its point back to the queue, to run again from its first unit on another replica (same seeds, same
tokens); the lost replica takes no more points. Whether a replica gives its point up is decided once, for
all of them, under the lock of their shared flags, which this process makes (`jobs.Seat.give_up`): two
replicas lost at once never both leave their points to the other. Where no other replica is left, the
point fails alone, with what it finished, and the sweep goes on; where every replica's process ended,
the points not run fail, named. The run of a point whose replica's process died (SIGKILL, a crash) is
ended FAILED here, tagged as its replica's own end would have tagged it.
"""

from __future__ import annotations

import contextlib
import logging.config
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from hydra.core.utils import JobReturn, JobStatus
from hydra.types import HydraContext
from omegaconf import DictConfig, OmegaConf, open_dict

from speculab.config import RunPlan
from speculab.config.sweep import planned
from speculab.launch.replica_process import say_lost, serve
from speculab.point.experiment import PointOutcome
from speculab.process import interrupts, jobs
from speculab.results.point import FailedPoint, PointShape
from speculab.show.board import SweepBoard
from speculab.show.console import say
from speculab.tracking.callbacks import MlflowSweepCallback

STOP_WAIT_S = 60.0  # after Ctrl-C, how long the running points have to stop at their unit's end


@dataclass(frozen=True)
class Pending:
    """A point to launch: its job number, overrides and composed config (Hydra's keys included)."""

    index: int
    overrides: tuple[str, ...]
    config: DictConfig

    @property
    def plan(self) -> RunPlan:
        return planned(list(self.overrides))


def replica_count(overrides: Sequence[Sequence[str]]) -> int:
    """The replicas a sweep's points run on side by side: `cluster.replicas` (one value for the sweep,
    checked when it started), for auto as many copies of the first point's groups as the alive nodes
    hold, never more than there are points; 1 with `cluster.spread` (each point spreads its units over
    the replicas, one point after another)."""
    from speculab.point.experiment import model_specs, replica_copies

    plan = planned(list(overrides[0]))
    return 1 if plan.cfg.cluster.spread else replica_copies(plan, *model_specs(plan), len(overrides))


def composed(context: HydraContext, base: DictConfig, overrides: Sequence[str], index: int) -> Pending:
    """A point's config as Hydra's basic launcher composes it, with its job number; the sweep's directory
    is read here, once (its default holds `${now:...}`, which a replica's process would read later)."""
    config = context.config_loader.load_sweep_config(base, list(overrides))
    with open_dict(config):
        config.hydra.job.id = index
        config.hydra.job.num = index
        config.hydra.sweep.dir = str(config.hydra.sweep.dir)
    return Pending(index, tuple(overrides), config)


def job_logging_without_file(config: DictConfig) -> dict[str, Any]:
    """Hydra's job logging without its file handler: what this process logs is the sweep's, not a job's
    (each job's log file is its replica's process's), and the console shows each line once."""
    settings = OmegaConf.to_container(config.hydra.job_logging)  # its file handler names the job directory
    assert isinstance(settings, dict)
    settings.get("handlers", {}).pop("file", None)
    root = settings.get("root", {})
    root["handlers"] = [h for h in root.get("handlers", []) if h != "file"]
    return cast(dict[str, Any], settings)


class Replica:
    """One replica's process (`speculab.launch.replica_process.serve`) and the pipe its points go by."""

    def __init__(self, seat: jobs.Seat, payload: bytes) -> None:
        spawn = multiprocessing.get_context("spawn")  # a fork of a process that holds Ray's threads is unsafe
        self.conn, theirs = spawn.Pipe()
        self.ready = spawn.Event()  # set once its signal handlers stand: before, a signal would be a traceback
        self.process = spawn.Process(
            target=serve,
            args=(theirs, payload, seat, self.ready),
            name=f"speculab-replica-{seat.replica + 1}",
        )
        self.process.start()
        theirs.close()

    def join(self, address: str, namespace: str) -> None:
        """Where the replica joins the launcher's cluster, once it runs (the process imports meanwhile)."""
        with contextlib.suppress(OSError):  # it ended already: its thread finds out at its first point
            self.conn.send((address, namespace))

    def run(self, config: DictConfig) -> JobReturn | None:
        """The point's `JobReturn` from the replica's process; None where the process ended first."""
        try:
            self.conn.send(config)
            return self.conn.recv()
        except (EOFError, OSError):
            return None

    def interrupt(self) -> None:
        """Ctrl-C for the replica: its point stops at its unit's end (it is in a session of its own). A process
        still starting, its handlers not yet set, is told by the end of its pipe instead (`end`)."""
        if self.ready.is_set() and self.process.is_alive() and self.process.pid is not None:
            os.kill(self.process.pid, signal.SIGINT)

    def stop(self) -> None:
        """No more points: the process closes its groups and ends (every replica's at once: `end` waits)."""
        with contextlib.suppress(OSError):  # it ended already
            self.conn.send(None)

    def end(self, deadline: float) -> None:
        """Once the process has ended (`stop`; ended by force past `deadline`)."""
        self.process.join(timeout=max(0.0, deadline - time.monotonic()))
        if self.process.is_alive():  # past its deadline it is deaf to SIGTERM (`replica_process.serve`)
            self.process.kill()
            self.process.join(timeout=5.0)
        self.conn.close()


def completed(pending: Pending, value: Any) -> JobReturn:
    """A point's job that the launcher ends itself (its replica's process could not), as Hydra's `run_job`
    ends one: COMPLETED with its value, a `FailedPoint` for a point that failed (the sweep goes on, its exit
    status counts it) and a FAILED job for one its lost replica gave back."""
    lost = isinstance(value, jobs.ReplicaLost)
    done = JobReturn(overrides=list(pending.overrides), status=JobStatus.FAILED if lost else JobStatus.COMPLETED)
    done.return_value = value
    return done


def failed_point(pending: Pending, why: str) -> FailedPoint:
    """A point failed by the launcher (its replica's process ended, or none is left to run it), said in one
    line as the CLI's own `point_failed` says one in a point's process (`SideBySide.finish` counts it)."""
    shape = PointShape.of(pending.plan.cfg)
    say(f"speculab: point failed: {shape.name}: {why}; the sweep goes on", file=sys.stderr)
    return FailedPoint(shape, f"RuntimeError: {why}")


def end_attempt(pending: Pending, pid: int | None, status: str, err: BaseException) -> str | None:
    """End `status` the point's run that the replica's process `pid` left RUNNING when it died, tagged as
    its replica's own end would have tagged it (`run_page.ended_tags`); its run id (None: untracked, not
    begun, or the store did not answer: then the next command on the store ends it KILLED)."""
    cfg = pending.plan.cfg
    if not cfg.tracking.enabled or pid is None:
        return None
    from speculab.config import tracking_uri
    from speculab.tracking.orphans import end_runs_of
    from speculab.tracking.run_page import ended_tags

    tags = ended_tags(PointShape.of(cfg), cfg.runtime.kind, status, err)
    try:
        ended = end_runs_of(tracking_uri(cfg.tracking), cfg.tracking.experiment, pid, status, tags)
    except Exception as failure:  # MLflow down: the run stays RUNNING until a later command ends it
        say(f"speculab: the lost attempt's run could not be ended ({type(failure).__name__}); the next command ends it")
        return None
    return ended[0] if ended else None


class SideBySide:
    """A sweep's points shared out to replica processes: a queue in launch order, the results by job
    number, the replicas lost, and the sweep's own job ends heard one at a time, outside the queue's lock."""

    def __init__(self, context: HydraContext, points: list[Pending], replicas: int, lost: Any) -> None:
        self.context, self.replicas, self.lost = context, replicas, lost
        self.queue = deque(points)
        self.unfinished = len(points)
        self.results: dict[int, JobReturn] = {}
        self.stopped: BaseException | None = None  # what ended a replica's thread other than the queue's end
        self.interrupted = False  # Ctrl-C or SIGTERM: no point starts, and the running ones stop
        self.cond = threading.Condition()  # the queue, the results and the board
        self.hearing = threading.Lock()  # the sweep's callbacks (its parent run's writes), one job end at a time
        self.board = SweepBoard(len(points), replicas)

    def run(self, processes: list[Replica]) -> list[JobReturn]:
        """Every point, on the replicas' processes; their JobReturns in launch order. Points no replica is
        left to run (every one lost) fail, each named."""
        threads = [
            threading.Thread(target=self.work, args=(r, p), name=f"speculab-replica-{r + 1}", daemon=True)
            for r, p in enumerate(processes)
        ]
        with self.board.shown():
            for thread in threads:
                thread.start()
            try:
                self.wait(threads)
            except KeyboardInterrupt:
                say("speculab: interrupted; the running points stop at the end of their unit")
                with self.cond:
                    self.interrupted = True
                    self.cond.notify_all()
                for process in processes:
                    process.interrupt()
                self.wait(threads, time.monotonic() + STOP_WAIT_S)
                raise
            self.unrun()
        return [self.results[i] for i in sorted(self.results)]

    def unrun(self) -> None:
        """The points left in the queue once every replica's thread ended: every replica was lost."""
        with self.cond:
            left, self.queue = list(self.queue), deque()
        if not left:
            return
        names = ", ".join(PointShape.of(p.plan.cfg).name for p in left)
        say(f"speculab: every replica of the sweep was lost; {len(left)} point(s) not run: {names}", file=sys.stderr)
        self.board.not_run(len(left))
        for pending in left:
            self.finish(pending, completed(pending, failed_point(pending, "not run: every replica was lost")))

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

    def seat(self, replica: int) -> jobs.Seat:
        return jobs.Seat(replica, self.replicas, self.lost)

    def take(self, replica: int) -> Pending | None:
        """The next point for `replica`, waiting while a running point could still come back; None at the end."""
        with self.cond:
            while not (self.queue or self.over(replica)) and self.unfinished:
                self.cond.wait(timeout=1.0)
            if not self.queue or self.over(replica):
                return None
            self.board.started()
            return self.queue.popleft()

    def over(self, replica: int) -> bool:
        """Whether `replica` takes no more points: it was lost, or the sweep stops."""
        return bool(self.lost[replica]) or self.stopped is not None or self.interrupted

    def work(self, replica: int, process: Replica) -> None:
        try:
            while (pending := self.take(replica)) is not None:
                start = time.monotonic()
                done = process.run(pending.config)
                if done is None and self.interrupted:  # it stopped at its unit's end, its run KILLED
                    return
                if done is None:  # its process ended (killed, crashed): this replica takes no more points
                    self.process_ended(pending, replica, process)
                    return
                if jobs.replica_lost(done) is not None:  # it gave the point up (`jobs.Seat.give_up`) and ends
                    self.give_back(pending, done)
                    return
                self.finish(pending, done, replica, time.monotonic() - start)
        except BaseException as err:  # a failure outside any point
            with self.cond:
                self.stopped = self.stopped or err
                self.cond.notify_all()

    def process_ended(self, pending: Pending, replica: int, process: Replica) -> None:
        """`pending`'s replica process ended without its job's end (killed, crashed): the replica is lost,
        decided as a replica's process decides it (`jobs.Seat.give_up`); its point runs again on another
        where one is left, else fails. Its run, left RUNNING by the dead process, ends FAILED here."""
        process.process.join(timeout=5.0)  # its exit code, once it is reaped
        why = f"its process ended (exit code {process.process.exitcode})"
        seat = self.seat(replica)
        if seat.give_up():
            lost = jobs.ReplicaLost(PointShape.of(pending.plan.cfg).name, why, replica)
            lost.run_id = end_attempt(pending, process.process.pid, "FAILED", lost)
            say_lost(lost)
            self.give_back(pending, completed(pending, lost))
            return
        seat.retire()
        end_attempt(pending, process.process.pid, "FAILED", RuntimeError(f"replica {replica + 1}: {why}"))
        self.finish(pending, completed(pending, failed_point(pending, f"replica {replica + 1}: {why}")), replica, 0.0)

    def job_ended(self, config: DictConfig, done: JobReturn) -> None:
        """The sweep's parent run hears of a job's end here, where it is open: the job's own callbacks ran
        in the replica's process, where the sweep's callback has no parent run (`MlflowSweepCallback`).
        Outside the queue's lock (an MLflow write must not hold up a replica taking its next point)."""
        with self.hearing:
            for callback in self.context.callbacks.callbacks:
                if isinstance(callback, MlflowSweepCallback):
                    callback.on_job_end(config=config, job_return=done)

    def finish(self, pending: Pending, done: JobReturn, replica: int | None = None, seconds: float = 0.0) -> None:
        """`pending` ended (on `replica`, in `seconds`; None: not run): its result kept and counted, the board
        told, the sweep's parent run told."""
        value = jobs.returned(done)
        ok = done.status == JobStatus.COMPLETED and not isinstance(value, FailedPoint)
        if isinstance(value, FailedPoint):  # said where it failed (a replica's process, `failed_point`); counted here
            jobs.FAILED_POINTS.append(value.shape.name)
        with self.cond:
            self.results[pending.index] = done
            self.unfinished -= 1
            resumed = isinstance(value, PointOutcome) and value.result.resumed
            if replica is not None:
                self.board.ended(PointShape.of(pending.plan.cfg).name, ok, seconds, replica, resumed)
            self.cond.notify_all()
        self.job_ended(pending.config, done)

    def give_back(self, pending: Pending, done: JobReturn) -> None:
        """Its replica, lost in `pending` (it gave the point up: `jobs.Seat.give_up`), ends: the point goes
        back to the queue's front, and the sweep hears of the lost attempt."""
        with self.cond:
            self.queue.appendleft(pending)
            self.board.requeued()
            self.cond.notify_all()
        self.job_ended(pending.config, done)


def launch_side_by_side(
    context: HydraContext,
    task: Callable[[DictConfig], Any],
    base: DictConfig,
    overrides: Sequence[Sequence[str]],
    first_index: int,
    replicas: int,
) -> list[JobReturn]:
    """The sweep's points on `replicas` processes, each its own replica of the model groups."""
    from ray import cloudpickle

    from speculab.runtime.ray_actors import connect, joining, prepare_auth
    from speculab.tracking.runs import SWEEP_ID, SWEEP_ID_ENV

    points = [composed(context, base, o, first_index + i) for i, o in enumerate(overrides)]
    logging.config.dictConfig(job_logging_without_file(points[0].config))
    Path(str(base.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
    placement = points[0].plan.placement
    # What the replicas' processes inherit: set before they start, as they start before the cluster does
    prepare_auth(placement.address)
    os.environ[SWEEP_ID_ENV] = SWEEP_ID  # the replicas' points find this sweep's parent run
    payload = cloudpickle.dumps((context, task, {p.overrides: p.plan for p in points}))
    lost = multiprocessing.get_context("spawn").Array("b", replicas)  # a flag a replica, shared with their processes
    say(f"speculab: sweep of {len(points)} points on {replicas} replicas of their model groups (cluster.replicas)")
    sweep = SideBySide(context, points, replicas, lost)
    processes: list[Replica] = []
    try:
        # A signal waits for every replica's start: a process begun and left half spawned would read the rest
        # of its start from a pipe closed under it (a traceback)
        with interrupts.held():
            processes += [Replica(sweep.seat(r), payload) for r in range(replicas)]
        # The replicas import (torch, transformers, Ray: seconds each) while this process starts the cluster
        connect(placement.address, placement.num_cpus)  # they join this driver's cluster and namespace
        address, namespace = joining(placement.address)
        for process in processes:
            process.join(address, namespace)
        return sweep.run(processes)
    except KeyboardInterrupt:
        for process in processes:
            process.interrupt()
        raise
    finally:
        deadline = time.monotonic() + STOP_WAIT_S
        for process in processes:
            process.stop()
        for process in processes:
            process.end(deadline)
