"""Where what a person is shown goes: the terminal and the run's log.

Without a terminal (stdout piped or redirected to a file) rich would lay everything out for 80
columns, wrapping table cells and cutting the progress line; there the output is plain and as wide
as its widest line instead. Every table and line shown is also logged to the `speculab` logger, which
Hydra's job logging writes to `<run dir>/cli.log` (conf/config.yaml keeps its console handler for
warnings, so nothing shows twice). A sweep's own lines (its ranking) are printed only: Hydra's
logging between jobs has no file, and its console handler would print them twice.
"""

from __future__ import annotations

import io
import logging
import sys
from typing import Any

from rich.console import Console

LOG = logging.getLogger("speculab")
UNWRAPPED = 400  # columns without a terminal: a table is only as wide as its content needs


def console(file: Any = None) -> Console:
    """A console on `file` (stdout): the terminal's width there, else plain and unwrapped."""
    out = file or sys.stdout
    if out.isatty():
        return Console(file=out)
    return Console(file=out, width=UNWRAPPED, soft_wrap=True, no_color=True, highlight=False)


def plain(*renderables: Any) -> str:
    """What `show` prints, as text without a terminal."""
    buffer = io.StringIO()
    Console(file=buffer, width=UNWRAPPED, soft_wrap=True, no_color=True, highlight=False).print(*renderables, sep="\n")
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())


def show(*renderables: Any) -> None:
    """Print tables or lines (one a line) to stdout and log them to the run's log."""
    console().print(*renderables, sep="\n")
    LOG.info("%s", plain(*renderables))


def say(line: str, file: Any = None) -> None:
    """One line (`speculab: ...`) to stdout (or `file`) and to the run's log, unchanged."""
    print(line, file=file or sys.stdout)
    LOG.info("%s", line)
