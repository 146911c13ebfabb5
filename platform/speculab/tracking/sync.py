"""`speculab-sync`: replay spooled runs into MLflow, idempotently.

    speculab-sync [PATH ...] [--uri URI]

Each PATH is a spool file or a directory searched for spools (default: ``outputs`` and
``multirun`` under the current directory, where Hydra writes). A spooled run is matched to
its MLflow run by the ``speculab.spool_id`` tag, created if absent (parents before children),
and given only the params, metrics, artifacts and final status MLflow does not hold yet, so a
second sync adds nothing. A spool with no ``end`` record whose writer is gone (same host, dead
pid) ends FAILED. The URI is the one the run was meant for unless ``--uri`` is given.
"""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mlflow.tracking import MlflowClient

from speculab.tracking.spool import (
    PARENT_TAG,
    TERMINAL,
    apply_record,
    create_run,
    fail_fast,
    find_spooled_run,
    now_ms,
    read_spool,
    run_content,
)

DEFAULT_ROOTS = ("outputs", "multirun")


def spool_files(paths: Iterable[Path]) -> list[Path]:
    """Spool files named directly, in a named directory (a `tracking.spool_dir`), or in ``spool/``
    directories below it (Hydra's output dirs)."""
    found: list[Path] = []
    for path in paths:
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            below = {p for p in path.rglob("*.jsonl") if p.parent.name == "spool"}
            found += sorted(below | set(path.glob("*.jsonl")))
    return found


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


def sync_spool(records: list[dict[str, Any]], spool_dir: Path, run_ids: dict[str, str], uri: str | None) -> str:
    """Replay one spool; returns its MLflow run id (``run_ids`` maps spool ids to run ids)."""
    start = records[0]
    client = MlflowClient(uri or start["uri"])
    parent = run_ids.get(start["parent_spool_id"] or "") or start["parent_run_id"]
    run_id = find_spooled_run(client, start["experiment"], start["spool_id"]) or create_run(client, start, parent)[1]
    held = run_content(client, run_id)
    if parent and held.tags.get(PARENT_TAG) != parent:
        client.set_tag(run_id, PARENT_TAG, parent)
    for record in records[1:]:
        apply_record(client, run_id, record, spool_dir, held)
    if held.status not in TERMINAL and not writer_alive(start):
        apply_record(client, run_id, {"op": "end", "status": "FAILED", "time_ms": now_ms()}, spool_dir, held)
    run_ids[start["spool_id"]] = run_id
    return run_id


def sync(paths: Iterable[Path], uri: str | None = None) -> dict[Path, str]:
    """Replay every spool under ``paths``; {spool file: MLflow run id}."""
    fail_fast()
    spools = [(path, records) for path in spool_files(paths) if (records := read_spool(path))]
    spools.sort(key=lambda spool: spool[1][0]["parent_spool_id"] is not None)  # parents' runs first
    run_ids: dict[str, str] = {}
    return {path: sync_spool(records, path.parent, run_ids, uri) for path, records in spools}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, help="spool files or directories (default: outputs multirun)")
    parser.add_argument("--uri", help="MLflow tracking URI (default: the one each run was meant for)")
    args = parser.parse_args(argv)
    done = sync(args.paths or [Path(root) for root in DEFAULT_ROOTS], args.uri)
    for path, run_id in done.items():
        print(f"{path} -> run {run_id}")
    print(f"speculab-sync: {len(done)} spooled run(s) in MLflow")


if __name__ == "__main__":
    main()
