"""`support.servers`: a wait that gives up says why and what the server printed, and whatever
was started is gone after the `with` block, however it ends."""

from __future__ import annotations

import os
import sys

import pytest

from support.servers import serving

NEVER_ANSWERS = [sys.executable, "-c", "import time; print('listening soon', flush=True); time.sleep(600)"]
EXITS = [sys.executable, "-c", "import sys; print('bad flag', flush=True); sys.exit(3)"]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_wait_that_gives_up_names_what_it_waited_for_and_shows_the_output() -> None:
    gave_up = pytest.raises(RuntimeError, match="waited for the test server; gave up after 2 s")
    with gave_up as raised, serving(NEVER_ANSWERS, lambda: False, "the test server", wait_s=2):
        pass
    assert "listening soon" in str(raised.value)


def test_a_server_that_exits_while_starting_is_reported_at_once() -> None:
    with pytest.raises(RuntimeError, match="it exited with 3") as raised, serving(EXITS, lambda: False, "x", wait_s=60):
        pass
    assert "bad flag" in str(raised.value)


def test_probe_errors_are_retried_until_it_answers() -> None:
    answers = iter([ConnectionError("refused"), TimeoutError("read timed out"), True])

    def probe() -> bool:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    with serving(NEVER_ANSWERS, probe, "the test server", wait_s=60) as server:
        assert server.poll() is None
    assert server.poll() is not None


def test_the_server_and_its_children_are_stopped_when_the_block_fails() -> None:
    parent = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']);"
    command = [sys.executable, "-c", parent + " print('up', flush=True); time.sleep(600)"]
    with pytest.raises(KeyboardInterrupt), serving(command, lambda: True, "the test server") as server:
        group = server.pid
        raise KeyboardInterrupt  # as Ctrl-C would
    assert not alive(group)
    with pytest.raises(ProcessLookupError):
        os.killpg(group, 0)  # no process of its group is left
