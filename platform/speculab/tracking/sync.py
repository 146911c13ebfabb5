"""`speculab-sync`: replay spooled runs into MLflow, idempotently.

    speculab-sync [PATH ...] [--uri URI] [--experiment NAME]

Each PATH is a spool file or a directory searched for spools (default: ``outputs`` and
``multirun`` under the current directory, where Hydra writes). A spooled run is matched to
its MLflow run by the ``speculab.spool_id`` tag, created if absent (parents before children),
and given only the params, metrics, artifacts and final status MLflow does not hold yet, so a
second sync adds nothing. A spool with no ``end`` record whose writer is gone (same host, dead
pid) ends FAILED. The URI and experiment are the ones the run was meant for unless ``--uri`` or
``--experiment`` is given.

Each spool is replayed on its own: one that cannot be (its store does not answer, its experiment
name is refused, a file it names is gone) is listed at the end with the reason, one line per
reason, the others are replayed all the same, and the exit status is 1. Once the cause is fixed,
running the same command again replays only what MLflow still lacks.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speculab.tracking.spool import (
    DEFAULT_ROOTS,
    MEMBER,
    PARENT_TAG,
    TERMINAL,
    apply_record,
    create_run,
    fail_fast,
    find_spooled_run,
    member_tag,
    now_ms,
    read_spool,
    run_content,
    spool_files,
)
from speculab.tracking.store import store_client


def writer_alive(start: dict[str, Any]) -> bool:
    """Whether the process that wrote a spool may still be running."""
    if start["host"] != socket.gethostname():
        return True  # cannot tell: leave its status alone
    try:
        os.kill(start["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def one_line(err: BaseException) -> str:
    """An exception as the first line of its message, class name first (no traceback)."""
    text = f"{type(err).__name__}: {err}".strip()
    return text.splitlines()[0][:300]


def sync_spool(
    records: list[dict[str, Any]],
    spool_dir: Path,
    run_ids: dict[str, str],
    uri: str | None,
    experiment: str | None = None,
) -> str:
    """Replay one spool; returns its MLflow run id (``run_ids`` maps spool ids to run ids).
    ``uri`` and ``experiment``, where given, replace the ones the run was meant for."""
    start = records[0] | ({"experiment": experiment} if experiment is not None else {})
    client = store_client(uri or start["uri"])
    parent = run_ids.get(start["parent_spool_id"] or "") or start["parent_run_id"]
    run_id = find_spooled_run(client, start["experiment"], start["spool_id"]) or create_run(client, start, parent)[1]
    held = run_content(client, run_id)
    if parent and held.tags.get(PARENT_TAG) != parent:
        client.set_tag(run_id, PARENT_TAG, parent)
        client.set_tag(run_id, member_tag(parent), MEMBER)
    for record in records[1:]:
        apply_record(client, run_id, record, spool_dir, held)
    if held.status not in TERMINAL and not writer_alive(start):
        apply_record(client, run_id, {"op": "end", "status": "FAILED", "time_ms": now_ms()}, spool_dir, held)
    run_ids[start["spool_id"]] = run_id
    return run_id


START_KEYS = ("spool_id", "uri", "experiment", "name", "tags", "parent_spool_id", "parent_run_id", "time_ms")


@dataclass
class Replayed:
    """What a sync did: {spool: MLflow run id} for those replayed, {spool: why not} for the others."""

    done: dict[Path, str] = field(default_factory=dict)
    failed: dict[Path, str] = field(default_factory=dict)


class SyncError(RuntimeError):
    """Some spools could not be replayed (`Replayed.failed`, listed in the message)."""


def store_down(uri: str) -> str | None:
    """Why the store at ``uri`` cannot be used (one line), or None when it answers."""
    try:
        store_client(uri).search_experiments(max_results=1)
    except Exception as err:  # unreachable server, unknown scheme, unopenable database
        return f"the tracking store {uri} does not answer ({one_line(err)})"
    return None


def readable_spools(paths: Iterable[Path], replayed: Replayed) -> list[tuple[Path, list[dict[str, Any]]]]:
    """The spools under ``paths`` with their records, parents first; an unreadable one, or a file
    that is not a spool, goes to ``replayed.failed`` (an empty file, a run that crashed before its
    first record, is passed over)."""
    spools = []
    for path in spool_files(paths):
        try:
            records = read_spool(path)
        except (OSError, UnicodeDecodeError) as err:
            replayed.failed[path] = f"cannot read it ({one_line(err)})"
            continue
        if records and (records[0].get("op") != "start" or any(key not in records[0] for key in START_KEYS)):
            replayed.failed[path] = "not a speculab spool (its first record is not a run's start)"
        elif records:
            spools.append((path, records))
    spools.sort(key=lambda spool: spool[1][0]["parent_spool_id"] is not None)  # parents' runs first
    return spools


def replay(paths: Iterable[Path], uri: str | None = None, experiment: str | None = None) -> Replayed:
    """Replay every spool under ``paths``, each on its own: one that fails (its store down, a bad
    experiment name, a missing figure) is noted with its reason and the others go on; a sweep
    point whose parent's spool failed waits for it. Rerunning replays only what MLflow lacks."""
    fail_fast()
    replayed = Replayed()
    stores: dict[str, str | None] = {}  # URI -> why it does not answer, probed once per sync
    failed_ids: set[str] = set()
    run_ids: dict[str, str] = {}
    for path, records in readable_spools(paths, replayed):
        start = records[0]
        target = uri or start["uri"]
        if target not in stores:
            stores[target] = store_down(target)
        reason = stores[target]
        if reason is None and start["parent_spool_id"] in failed_ids:
            reason = f"its sweep's parent (spool {start['parent_spool_id']}) was not replayed"
        if reason is None:
            try:
                replayed.done[path] = sync_spool(records, path.parent, run_ids, uri, experiment)
            except Exception as err:  # this spool only: the next one may well replay
                reason = one_line(err)
        if reason is not None:
            replayed.failed[path] = reason
            failed_ids.add(start["spool_id"])
    return replayed


def sync(paths: Iterable[Path], uri: str | None = None, experiment: str | None = None) -> dict[Path, str]:
    """Replay every spool under ``paths``; {spool file: MLflow run id}. SyncError, after all the
    others were replayed, when some could not be."""
    replayed = replay(paths, uri, experiment)
    if replayed.failed:
        raise SyncError(failure_lines(replayed.failed))
    return replayed.done


def failure_lines(failed: dict[Path, str]) -> str:
    """One line per reason: the spools it stopped (all of them when the store is down)."""
    by_reason: dict[str, list[Path]] = {}
    for path, reason in failed.items():
        by_reason.setdefault(reason, []).append(path)
    lines = []
    for reason, paths in by_reason.items():
        named = str(paths[0]) if len(paths) == 1 else f"{len(paths)} spools ({paths[0]}, ...)"
        lines.append(f"speculab-sync: not replayed: {named}: {reason}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, help="spool files or directories (default: outputs multirun)")
    parser.add_argument("--uri", help="MLflow tracking URI (default: the one each run was meant for)")
    parser.add_argument("--experiment", help="MLflow experiment (default: the one each run was meant for)")
    args = parser.parse_args(argv)
    replayed = replay(args.paths or [Path(root) for root in DEFAULT_ROOTS], args.uri, args.experiment)
    for path, run_id in replayed.done.items():
        print(f"{path} -> run {run_id}")
    print(f"speculab-sync: {len(replayed.done)} spooled run(s) in MLflow")
    if replayed.failed:
        print(failure_lines(replayed.failed), file=sys.stderr)
        print(
            f"speculab-sync: {len(replayed.failed)} spool(s) not replayed; fix the cause (start the store, "
            "or give --uri URI / --experiment NAME) and run speculab-sync again: it adds only what MLflow lacks",
            file=sys.stderr,
        )
        raise SystemExit(1)


if __name__ == "__main__":
    main()
