"""Opening an MLflow store that other processes may be opening or writing at the same time.

MLflow creates (or upgrades) an SQLite store's tables on a process's first call to it, with Alembic
migrations that are not safe to run twice at once: two sweeps started together on a new
`mlflow.db` race on table creation (`table _alembic_tmp_latest_metrics already exists`,
`duplicate column name`) and can leave the store unopenable. So the first call of each process to
an SQLite store runs under an exclusive lock on a file beside it (`<db>.lock`), which serialises
creation across processes on one machine; later calls need no lock. Once the tables exist, SQLite
itself serialises writers, and a writer that finds the database busy past SQLite's own wait is
retried here within a bound before the run goes to its spool alone (`speculab.tracking.spool`).
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from mlflow.tracking import MlflowClient

SQLITE = "sqlite:///"
BUSY_RETRY_S = 30.0  # how long a write to a busy SQLite store is retried
OPENED: set[str] = set()  # SQLite stores whose tables this process has seen created
T = TypeVar("T")


def sqlite_path(uri: str) -> Path | None:
    """The database file of an `sqlite:///` URI, else None (a server or a file store)."""
    return Path(uri.removeprefix(SQLITE)) if uri.startswith(SQLITE) else None


@contextmanager
def creation_lock(db: Path) -> Iterator[None]:
    """An exclusive lock on `<db>.lock`, held across processes until the block ends."""
    db.parent.mkdir(parents=True, exist_ok=True)
    with open(db.with_name(db.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def store_client(uri: str) -> MlflowClient:
    """A client of the store at `uri`; an SQLite store's tables are created (or found) under the lock
    the first time this process opens it."""
    db = sqlite_path(uri)
    if db is None or uri in OPENED:
        return MlflowClient(uri)
    with creation_lock(db):
        client = MlflowClient(uri)  # MLflow may open the store (and create its tables) right here
        client.search_experiments(max_results=1)  # or at the first call
    OPENED.add(uri)
    return client


def busy(err: Exception) -> bool:
    """SQLite's answer when another process holds the write lock longer than SQLite waits."""
    return "database is locked" in str(err)


def retrying_busy(call: Callable[[], T], budget_s: float = BUSY_RETRY_S) -> T:
    """`call()`, again while the store is busy, for up to `budget_s` seconds; other errors at once."""
    deadline = time.monotonic() + budget_s
    pause = 0.1
    while True:
        try:
            return call()
        except Exception as err:
            if not busy(err) or time.monotonic() + pause > deadline:
                raise
            time.sleep(pause)
            pause = min(2 * pause, 2.0)
