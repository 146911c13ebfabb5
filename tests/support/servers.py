"""Child servers for tests and tools (`mlflow server`, `mlflow ui`, a Ray head): started in a
process group of their own with their output in a log file, waited for against one deadline,
and stopped, group and all, on every way out of the `with` block (failure and Ctrl-C included).

A busy 2-core machine can take tens of seconds to answer a first request, so a wait retries
*any* error of its probe until the deadline (`SPECULAB_SERVER_WAIT_S`, default 180 s) and,
when it gives up, says what it waited for and what the server printed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

WAIT_S = float(os.environ.get("SPECULAB_SERVER_WAIT_S", "180"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.is_file() else "(no output)"


def wait_until(probe: Callable[[], object], what: str, server: subprocess.Popen, log: Path, wait_s: float) -> None:
    """Call ``probe`` until it returns something truthy, the server exits, or ``wait_s`` pass."""
    deadline = time.monotonic() + wait_s
    error: BaseException | None = None
    while server.poll() is None and time.monotonic() < deadline:
        try:
            if probe():
                return
        except Exception as e:  # refused, timed out, 5xx while starting: all mean "not yet"
            error = e
        time.sleep(0.5)
    state = f"it exited with {server.returncode}" if server.poll() is not None else f"gave up after {wait_s:.0f} s"
    raise RuntimeError(f"waited for {what}; {state} (last probe error: {error!r}). Its last output:\n{tail(log)}")


def stop(server: subprocess.Popen, grace_s: float = 10) -> None:
    """SIGTERM the server's process group, SIGKILL what is left after ``grace_s``."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=grace_s)
        os.killpg(server.pid, signal.SIGKILL)  # workers that outlived their parent are still in the group
    server.wait()


@contextlib.contextmanager
def serving(
    command: Sequence[str],
    probe: Callable[[], object],
    what: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    wait_s: float = WAIT_S,
) -> Iterator[subprocess.Popen]:
    """Start ``command`` in a new session, wait until ``probe`` answers, yield it; always stop it."""
    with tempfile.NamedTemporaryFile("wb", prefix="speculab_server_", suffix=".log", delete=False) as out:
        log = Path(out.name)
        server = subprocess.Popen(command, cwd=cwd, env=env, start_new_session=True, stdout=out, stderr=out)
    try:
        wait_until(probe, what, server, log, wait_s)
        yield server
    finally:
        stop(server)
        log.unlink(missing_ok=True)
