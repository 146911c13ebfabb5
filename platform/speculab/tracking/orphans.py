"""Runs left RUNNING by a process that died without cleaning up (`kill -9`, the OOM killer, a lost
driver), found and ended KILLED by the next speculab command on the same store; and the runs of a sweep's
replica process that died mid-point, which the launcher ends itself as it hears of the death
(`end_runs_of`).

Every run carries its owner, `OWNER_TAG`: the host, the process id and the process's start time (so a
later process given the same id is not taken for the owner). When this process first writes to a store,
it ends KILLED each RUNNING run of the experiment owned on this host by a process that no longer runs,
and says so. A run owned on another host is left alone: its process cannot be checked from here
(`speculab-sync` or the MLflow UI end it).
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_RUN_NOTE

from speculab.tracking.store import store_client

OWNER_TAG = "speculab.owner"  # "<host> <pid> <start>": the process that writes the run
CHECKED: set[tuple[str, str]] = set()  # (store URI, experiment id) this process has looked at


def process_start(pid: int) -> str | None:
    """A process's start, in clock ticks after boot (Linux's /proc/<pid>/stat, field 22); None where no
    process has this id."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # after the command name: field 3 onwards


def owner(host: str, pid: int, start: str | None) -> str:
    """A run's owner tag: the process `pid`, started at `start` (None: unknown), on `host`."""
    return f"{host} {pid} {start or '?'}"


def dead_owner(tag: str, host: str) -> bool:
    """Whether the owner `tag` was a process on `host` that no longer runs (its id gone, or taken by a
    process started later)."""
    parts = tag.split(" ")
    if len(parts) != 3 or parts[0] != host or not parts[1].isdigit():
        return False
    start = process_start(int(parts[1]))
    return start is None or (parts[2] != "?" and start != parts[2])


def close_orphans(client: MlflowClient, uri: str, experiment_id: str) -> list[str]:
    """End KILLED the experiment's RUNNING runs whose owner on this host died, once per store and
    experiment a process; their names, each said on stderr."""
    if (uri, experiment_id) in CHECKED:
        return []
    host = socket.gethostname()
    running = client.search_runs(
        [experiment_id], f"attributes.status = 'RUNNING' and tags.`{OWNER_TAG}` LIKE '{host} %'"
    )
    CHECKED.add((uri, experiment_id))  # after the search: a store busy now is looked at again on the retry
    closed = []
    for run in running:
        if not dead_owner(run.data.tags.get(OWNER_TAG, ""), host):
            continue
        pid = run.data.tags[OWNER_TAG].split(" ")[1]
        note = run.data.tags.get(MLFLOW_RUN_NOTE, "")
        ended = f"Ended KILLED by a later speculab command: process {pid} on {host} died without ending it."
        client.set_tag(run.info.run_id, MLFLOW_RUN_NOTE, f"{ended}\n\n{note}" if note else ended)
        client.set_terminated(run.info.run_id, "KILLED")
        closed.append(run.info.run_name)
    if closed:
        print(
            f"speculab: ended KILLED {len(closed)} run(s) left RUNNING by a process on this host that died "
            f"without ending them: {'; '.join(closed)}",
            file=sys.stderr,
        )
    return closed


def end_runs_of(uri: str, experiment: str, pid: int, status: str, tags: dict[str, str]) -> list[str]:
    """End `status`, with `tags`, the RUNNING runs of `experiment` (in the store at `uri`) that process `pid` on
    this host wrote and left RUNNING when it died: a sweep's replica process killed mid-point, whose attempt
    the launcher ends as the lost replica's (`speculab.launch.launcher`); their run ids."""
    client = store_client(uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return []
    host = socket.gethostname()
    running = client.search_runs(
        [found.experiment_id], f"attributes.status = 'RUNNING' and tags.`{OWNER_TAG}` LIKE '{host} {pid} %'"
    )
    for run in running:
        for key, value in tags.items():
            client.set_tag(run.info.run_id, key, value)
        client.set_terminated(run.info.run_id, status)
    return [run.info.run_id for run in running]
