"""Ctrl-C and SIGTERM as one interrupt, raised where it cannot tear a tracking-store write in half.

`speculab` installs `handler` for both signals. It raises KeyboardInterrupt at once, except inside
`held()`: a write to the tracking store (an SQLite transaction, an HTTP request, a spool line) that an
exception would leave half done, for example with a connection still holding SQLite's write lock, so
that ending the runs afterwards fails and leaves them RUNNING. There the signal waits until the block
ends; a second one inside it raises at once (a user who presses Ctrl-C again means it now). A signal
that lands where Python swallows exceptions (a finaliser, a weakref callback) is remembered
(`RECEIVED`) and raised again by `raise_if_received`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

RECEIVED: list[int] = []  # signals this process received, in order


class _Hold:
    """How deep this process is in `held()` blocks, and the signal that waits for the outermost to end."""

    depth = 0
    waiting: int | None = None


def handler(signum: int, frame: FrameType | None) -> None:
    RECEIVED.append(signum)
    if _Hold.depth and _Hold.waiting is None:
        _Hold.waiting = signum
        return
    raise KeyboardInterrupt(f"signal {signum}")


@contextmanager
def held(raise_after: bool = True) -> Iterator[None]:
    """The block runs to its end before a signal that lands in it is raised (as KeyboardInterrupt); with
    ``raise_after`` False it is left to the next `raise_if_received` (a finished point's result reaches
    the sweep's callbacks first, and the sweep stops before its next point)."""
    _Hold.depth += 1
    try:
        yield
    finally:
        _Hold.depth -= 1
        waiting = _Hold.waiting if _Hold.depth == 0 else None
        if waiting is not None:
            _Hold.waiting = None
    if waiting is not None and raise_after:
        raise KeyboardInterrupt(f"signal {waiting}")


def raise_if_received() -> None:
    """Raise an interrupt that was swallowed where it landed (a finaliser, a weakref callback)."""
    if RECEIVED:
        raise KeyboardInterrupt(f"signal {RECEIVED[0]}")
