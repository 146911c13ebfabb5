"""One replica of a sweep's model groups, in a process of its own: it runs the points the launcher sends,
one at a time, each through Hydra's `run_job` as a sweep at `cluster.replicas=1` would (`hydra.job.env_set`
and `chdir`, its `HydraConfig`, output directory, saved config, log file and callbacks), and sends each
point's `JobReturn` back.

Hydra keeps the running job in process-wide state (`HydraConfig`, the working directory, the
environment), so points that run at the same time need processes of their own; a process per replica
(not per point) keeps its model groups loaded from one point to the next. The process joins the
launcher's Ray cluster in its namespace and ends its groups and its open runs when it ends.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
from multiprocessing.connection import Connection
from typing import Any

from hydra.core.utils import JobReturn, JobStatus, run_job, setup_globals

from speculab.process import interrupts, jobs
from speculab.show.board import no_bars
from speculab.show.console import say


def say_lost(lost: jobs.ReplicaLost) -> None:
    """The console's (and the point's log's) line for a replica lost in a point, which runs again elsewhere."""
    say(f"speculab: replica {lost.replica + 1} lost ({lost.why}); {lost.point} runs again on another replica")


def serve(conn: Connection, payload: bytes, seat: jobs.Seat, ready: Any) -> None:
    """Run the points `conn` sends (first where to join the cluster, then composed configs; None: the sweep
    is over) until the sweep ends or this replica is lost. `payload`: the sweep's Hydra context, task
    function and point plans (cloudpickle); `ready`: an Event set once its signal handlers stand (the
    launcher signals it only then).
    Ctrl-C or SIGTERM (the launcher passes either on, once) ends it at any moment, its start included,
    with its open runs KILLED and no traceback; its cleanup then runs to its end, deaf to more signals (the
    launcher ends the process by force past its own deadline)."""
    os.setsid()  # Ctrl-C on the terminal reaches the launcher, which passes it on once (`Replica.interrupt`)
    signal.signal(signal.SIGTERM, interrupts.handler)
    signal.signal(signal.SIGINT, interrupts.handler)
    ready.set()
    status = "KILLED"
    try:
        run_points(conn, payload, seat)
        status = "FINISHED"
    except (KeyboardInterrupt, EOFError):  # Ctrl-C or SIGTERM, or the launcher gone
        pass
    except BaseException:
        status = "FAILED"
        raise
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)
        if status != "FINISHED" and (spool := sys.modules.get("speculab.tracking.spool")):
            spool.close_open_runs(status)
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():  # joined, so imported whole (an import cut short is not)
            from speculab.runtime.teardown import teardown

            teardown()


def run_points(conn: Connection, payload: bytes, seat: jobs.Seat) -> None:
    """Import what a point runs while the launcher starts the cluster, join it (its address and namespace,
    the first thing `conn` sends), then run each point `conn` sends through Hydra's `run_job` and send its
    `JobReturn` back, until None comes or this replica gives a point up (`jobs.Seat.give_up`)."""
    jobs.take_seat(seat)
    no_bars()
    from ray import cloudpickle

    from speculab.config.sweep import PLANS
    from speculab.runtime.ray_actors import join

    context, task, plans = cloudpickle.loads(payload)
    PLANS.update(plans)  # resolved once, as the sweep started
    if (where := conn.recv()) is None:  # the sweep ended before its cluster was up
        return
    join(*where)
    setup_globals()
    while (config := conn.recv()) is not None:
        done = run_job(
            hydra_context=context,
            task_function=task,
            config=config,
            job_dir_key="hydra.sweep.dir",
            job_subdir_key="hydra.sweep.subdir",
        )
        lost = jobs.replica_lost(done)
        if lost is not None:  # said here, where the point's log is still open
            say_lost(lost)
        conn.send(sendable(done))
        if lost is not None:
            return


def sendable(done: JobReturn) -> JobReturn:
    """`done` as it can cross to the launcher: a return value that cannot be pickled becomes a failure that
    says so (an exception some library built with arguments it cannot be rebuilt from)."""
    try:
        pickle.dumps(done)
        return done
    except Exception as err:
        value = jobs.returned(done)
        done.status = JobStatus.FAILED
        done.return_value = RuntimeError(f"{value!r} (not sent from the replica's process: {err})")
        return done
