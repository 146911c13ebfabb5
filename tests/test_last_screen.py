"""What a person sees when a run ends: the last 24 lines of an 80-column terminal hold its answer (the
headline figures with their intervals and what their names mean, the verdicts, where every figure is),
checked on the default run in a pseudo-terminal of that size."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import textwrap
import time
from pathlib import Path

import pytest

COLUMNS, ROWS = 80, 24


def in_terminal(args: list[str], cwd: Path, timeout_s: float = 240) -> tuple[int, str]:
    """Run `speculab` in a pseudo-terminal of COLUMNS x ROWS; its exit status and what it wrote. `timeout_s` is
    a hang guard: a run still going then fails the test at the wait for its exit."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    process = subprocess.Popen(
        [sys.executable, "-m", "speculab.launch.cli", *args],
        cwd=cwd,
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
    )
    os.close(follower)
    written, deadline = b"", time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the follower closed: the process ended
                break
            if not chunk:
                break
            written += chunk
        elif process.poll() is not None:
            break
    os.close(leader)
    return process.wait(timeout=30), written.decode(errors="replace")


def last_screen(written: str) -> list[str]:
    """The last ROWS rows the terminal shows: escape codes dropped, a line redrawn after a carriage return
    kept as its last drawing, each line wrapped at COLUMNS."""
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", written).replace("\r\n", "\n")
    rows: list[str] = []
    for line in text.split("\n"):
        drawn = line.split("\r")[-1].rstrip()
        rows += textwrap.wrap(drawn, COLUMNS, drop_whitespace=False, replace_whitespace=False) or [""]
    return rows[-ROWS:]


@pytest.mark.slow
def test_the_default_runs_last_screen_holds_its_answer(tmp_path: Path) -> None:
    """`make demo`'s run (inline, 16 new tokens to be quick): its headline figures with intervals and
    what their names mean, both verdicts with their levels and family, and where every figure and the run's
    page are, all in the last 24 rows at 80 columns."""
    status, written = in_terminal(
        ["runtime=inline", "sampling.max_new_tokens=16", f"tracking.uri=sqlite:///{tmp_path}/m.db"], tmp_path
    )
    assert status == 0, written[-3000:]
    rows = last_screen(written)
    screen = re.sub(r"\s+", " ", " ".join(rows))  # a sentence wrapped over rows reads whole
    for words in (
        "speedup_vs_ar",
        "tokens kept per target call",  # what block_efficiency means, beside it
        "the autoregressive baseline",
        "transformers' generate",
        "this run, 2 tests, 5% family-wise",
        "every figure, each explained:",
        "MLflow run:",
    ):
        assert words in screen, (words, screen)
    assert re.search(r"speedup_vs_ar \d\.\d+ \[\d\.\d+, \d\.\d+\]", screen), screen  # with its interval
    assert len(rows) == ROWS and max(map(len, rows)) <= COLUMNS
