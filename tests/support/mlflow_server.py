"""A private `mlflow server` on a loopback port, for tests that need MLflow over HTTP."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests
from mlflow.tracking import MlflowClient


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(store: Path, cwd: Path) -> tuple[subprocess.Popen, str]:
    """`mlflow server` on a loopback port over a SQLite store; waits until it answers."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--backend-store-uri",
        f"sqlite:///{store}",
        "--workers",
        "1",
    ]
    server = subprocess.Popen(
        command, cwd=cwd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{uri}/health", timeout=2).ok:
                MlflowClient(uri).search_experiments()  # the store answers too, not only the web server
                return server, uri
        except requests.ConnectionError:
            time.sleep(0.5)
    stop(server)
    raise RuntimeError("mlflow server did not start")


def stop(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
