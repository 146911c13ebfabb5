"""Waiting for an event that a process under test brings about (a point finishing, both replicas decoding),
with a hang guard: the test fails, naming the event, where the process ends first or the event never comes.
The guard's seconds are no claim about how long the event takes, only a bound far past it, so that a hung
process fails the test here, saying what it waited for, rather than at the suite's timeout."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def awaited(event: Callable[[], T], what: str, process: subprocess.Popen, hang_s: float) -> T:
    """`event()`'s first truthy value, polled while `process` runs; the test fails where `process` ends
    first, or where `hang_s` pass without it (a hang guard)."""
    guard = time.monotonic() + hang_s
    while not (found := event()):
        assert process.poll() is None, f"the process ended (exit {process.returncode}) before {what}"
        assert time.monotonic() < guard, f"hung: no sign that {what} within {hang_s:g} s (a hang guard)"
        time.sleep(0.1)
    return found
