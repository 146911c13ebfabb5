"""`tracking.*`: the MLflow store a run logs to, its URI (a SQLite file in the working directory by
default) and the checks of its keys (a known store scheme with its database driver installed, an
experiment name, local paths this user can create and write, a UI port)."""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from speculab.config.checkpoints import regular_file
from speculab.config.errors import within

# MLflow's tracking stores by URI scheme (no scheme: a local file store); SQLAlchemy ones may add
# a driver after "+" (postgresql+psycopg2).
TRACKING_SCHEMES = ("sqlite", "file", "http", "https", "postgresql", "mysql", "mssql", "databricks")
UI_PORT_RANGE = (1, 65535)
DATABASES = ("postgresql", "mysql", "mssql")  # SQLAlchemy stores, each needing a driver package
# the pip package of each database driver module SQLAlchemy imports for a store's URI
DRIVER_PACKAGES = {
    "psycopg": "psycopg[binary]",
    "psycopg2": "psycopg2-binary",
    "MySQLdb": "mysqlclient",
    "pymysql": "PyMySQL",
    "pyodbc": "pyodbc",
    "pymssql": "pymssql",
}


@dataclass
class TrackingConfig:
    enabled: bool = True
    uri: str | None = None  # None: sqlite:///<cwd>/mlflow.db
    experiment: str = "speculab"
    spool_dir: str | None = None  # every run's local record, for speculab-sync; None: <Hydra output dir>/spool
    # a database store's links point at `mlflow ui --port ui_port` (an http uri: its own pages); null: the port of
    # a running `mlflow ui` serving this store, else $SPECULAB_UI_PORT, else 5000 (`tracking.ui.ui_port`)
    ui_port: int | None = None


def tracking_uri(cfg: TrackingConfig) -> str:
    """The MLflow URI: the configured one, or a SQLite file at an absolute path in the cwd."""
    return cfg.uri or f"sqlite:///{Path.cwd().resolve() / 'mlflow.db'}"


def _nearest_existing(path: Path) -> Path | None:
    """The nearest ancestor of ``path`` that exists: where creating ``path`` starts."""
    return next((parent for parent in path.parents if parent.exists()), None)


def _blocking_file(path: Path) -> Path | None:
    """The nearest existing ancestor of ``path`` when it is not a directory (nothing can be created
    under it); None when that ancestor is a directory."""
    parent = _nearest_existing(path)
    return None if parent is None or parent.is_dir() else parent


def not_writable(path: Path) -> Path | None:
    """Where writing ``path`` (a file or a directory, created where missing) would be refused: the path
    when it exists and this user cannot write it, else its nearest existing ancestor when nothing can
    be created in it; None when it can be written."""
    if path.exists():
        return None if os.access(path, os.W_OK) else path
    parent = _nearest_existing(path)
    return None if parent is None or os.access(parent, os.W_OK | os.X_OK) else parent


def driver_error(uri: str) -> str | None:
    """A database store whose driver SQLAlchemy cannot import: which package to install."""
    from sqlalchemy.engine import make_url

    if urlparse(uri).scheme.split("+")[0] not in DATABASES:
        return None
    try:
        make_url(uri).get_dialect().import_dbapi()
    except ImportError as err:
        package = DRIVER_PACKAGES.get(err.name or "", err.name or "its driver")
        missing = f"its database driver is not installed (no module {err.name!r})"
        return f"tracking.uri={uri!r}: {missing}: pip install {package}"
    return None


def store_path(uri: str) -> Path | None:
    """The local path a SQLite or file store URI writes to (None: a remote or in-memory store)."""
    scheme = urlparse(uri).scheme
    if scheme == "sqlite":
        rest = uri.removeprefix("sqlite:///") if uri.startswith("sqlite:///") else ""  # sqlite:// is in memory too
        return None if rest in ("", ":memory:") else Path(rest)
    if scheme == "file":
        return Path(urlparse(uri).path)
    return Path(uri) if not scheme else None


def store_error(uri: str, field: str) -> str | None:
    """Why a local store that exists at ``uri`` (given as ``field``) is no store: an SQLite store that is not
    a regular file holding an SQLite database, or that holds another application's tables, a file store that
    is not a directory (None: it is one, or it is not there yet)."""
    store, scheme = store_path(uri), urlparse(uri).scheme.split("+")[0]
    if store is None or not store.exists():
        return None
    if scheme != "sqlite":
        return None if store.is_dir() else f"{field}{uri!r}: {store} is a file, not a file store's directory"
    if store.is_dir():
        return f"{field}{uri!r}: {store} is a directory, not a SQLite database file"
    if not regular_file(store):
        return f"{field}{uri!r}: {store} is not a regular file (a FIFO or a device); refused without opening it"
    if (why := sqlite_refusal(store)) is not None:
        return f"{field}{uri!r}: {store} {why}"
    return None


# Tables an MLflow store has from its first migration on: a store being created holds one of them already.
MLFLOW_TABLES = frozenset({"alembic_version", "experiments", "runs", "metrics", "params", "tags"})


def sqlite_refusal(path: Path) -> str | None:
    """Why the file at `path`, opened read-only once, is no MLflow store: SQLite reads no database there, or
    one of another application's (tables, none of them MLflow's); None for an MLflow store, an empty file or
    database (a new one), or one busy with another writer."""
    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5.0)) as db:
            tables = sorted(row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
    except sqlite3.OperationalError:  # locked, busy: a database all the same, a writer's
        return None
    except sqlite3.DatabaseError as err:
        return f"is not an SQLite database ({err}); name the database a run wrote"
    if tables and not MLFLOW_TABLES & set(tables):
        return (
            f"is another application's SQLite database (tables {', '.join(tables[:3])}; none of MLflow's), which "
            "MLflow would add its own tables to; name the database a run wrote, or a new file"
        )
    return None


def resume_errors(resume: bool, t: TrackingConfig) -> list[str]:
    """`resume=true` looks finished points up in the tracking store: with tracking off there is none (and
    looking would create one)."""
    if resume and not t.enabled:
        return [
            "resume=true: finds finished points in the tracking store, and tracking=none keeps none; track the "
            "runs (tracking=local) or drop resume=true"
        ]
    return []


def scheme_error(uri: str, field: str) -> str | None:
    """Why ``uri`` (given as ``field``) names no store MLflow can open: an unknown scheme, or a server
    without a host (None: it names one)."""
    parsed = urlparse(uri)
    scheme = parsed.scheme.split("+")[0]
    if scheme and scheme not in TRACKING_SCHEMES:
        return (
            f"{field}{uri!r}: unknown store scheme {scheme!r}; must be one of "
            f"{', '.join(f'{s}:' for s in TRACKING_SCHEMES)} or a local directory"
        )
    if scheme in ("http", "https") and not parsed.hostname:
        return f"{field}{uri!r}: names no server; give {scheme}://HOST:PORT (an MLflow tracking server)"
    return None


def tracking_errors(t: TrackingConfig) -> list[str]:
    """The UI port, and with tracking enabled the store's scheme, the experiment's name, and the local
    paths the run will create (a store's file or directory, the spool): refused when an ancestor is a
    regular file."""
    errors: list[str] = []
    if t.ui_port is not None:
        within(errors, "tracking.ui_port", t.ui_port, UI_PORT_RANGE)
    if not t.enabled:
        return errors
    if not t.experiment.strip():
        errors.append(f"tracking.experiment={t.experiment!r}: must name an MLflow experiment")
    uri = tracking_uri(t)
    scheme = urlparse(uri).scheme.split("+")[0]
    store = store_path(uri)
    if scheme == "sqlite" and store is None:
        errors.append(
            f"tracking.uri={uri!r}: an in-memory SQLite store is gone when the run ends (its link would point at "
            "nothing); name a file, sqlite:///path/to/mlflow.db, or tracking=none to record nothing"
        )
    elif (unknown := scheme_error(uri, "tracking.uri=")) is not None:
        errors.append(unknown)
    elif store is not None and (blocker := _blocking_file(store)) is not None:
        errors.append(f"tracking.uri={uri!r}: {blocker} is a file, so the store {store} cannot be created")
    elif (wrong := store_error(uri, "tracking.uri=")) is not None:
        errors.append(wrong)
    elif store is not None and (locked := not_writable(store)) is not None:
        errors.append(f"tracking.uri={uri!r}: {locked} is not writable by this user, so the store cannot be written")
    elif store is not None and scheme == "sqlite" and store.exists() and not_writable(store.parent) is not None:
        errors.append(f"tracking.uri={uri!r}: {store.parent} is not writable (SQLite writes a journal beside it)")
    elif (driver := driver_error(uri)) is not None:
        errors.append(driver)
    if t.spool_dir is not None:
        spool = Path(t.spool_dir)
        if spool.exists() and not spool.is_dir():
            errors.append(f"tracking.spool_dir={t.spool_dir!r}: a file, not a directory")
        elif (blocker := _blocking_file(spool)) is not None:
            errors.append(f"tracking.spool_dir={t.spool_dir!r}: {blocker} is a file, so the spool cannot be created")
        elif (locked := not_writable(spool)) is not None:
            errors.append(f"tracking.spool_dir={t.spool_dir!r}: {locked} is not writable by this user")
    return errors
