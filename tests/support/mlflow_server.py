"""A private `mlflow server` on a loopback port, for tests that need MLflow over HTTP."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import requests

from support.servers import free_port, serving


@contextlib.contextmanager
def mlflow_server(store: Path, cwd: Path) -> Iterator[str]:
    """`mlflow server` over a SQLite store; yields its URI once the store answers, stops it on exit."""
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--backend-store-uri", f"sqlite:///{store}", "--workers", "1"]
    # The store answering, not only the web server's /health: the first query creates the tables. A bare
    # request, not MlflowClient, whose retries back off for tens of seconds past the moment the server is up.
    search = f"{uri}/api/2.0/mlflow/experiments/search?max_results=1"
    with serving(command, lambda: requests.get(search, timeout=10).ok, f"mlflow server at {uri}", cwd):
        yield uri
