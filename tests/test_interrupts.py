"""Ctrl-C and SIGTERM (`speculab.process.interrupts`): raised at once, but never inside a tracking-store write,
which would leave a connection holding SQLite's write lock and the sweep's runs RUNNING; remembered
where Python swallows them."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from speculab.process import interrupts


@pytest.fixture
def handled(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """SIGINT handled as `speculab` handles it, with no signal received yet; the test's own handler after."""
    monkeypatch.setattr(interrupts, "RECEIVED", [])
    previous = signal.signal(signal.SIGINT, interrupts.handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_signal_inside_a_held_block_waits_for_its_end(handled: None) -> None:
    done = []
    with pytest.raises(KeyboardInterrupt, match="signal 2"), interrupts.held():
        os.kill(os.getpid(), signal.SIGINT)  # the handler runs here, between bytecodes
        done.append("the write finished")
    assert done == ["the write finished"] and interrupts.RECEIVED == [signal.SIGINT]


def test_a_second_signal_in_a_held_block_raises_at_once(handled: None) -> None:
    done = []
    with pytest.raises(KeyboardInterrupt), interrupts.held():
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        done.append("never")
    assert done == [] and interrupts._Hold.waiting is None and interrupts._Hold.depth == 0


def test_outside_a_held_block_a_signal_raises_at_once(handled: None) -> None:
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        pytest.fail("the interrupt did not stop the code")  # pragma: no cover


def test_a_store_write_runs_whole_under_an_interrupt(handled: None, tmp_path, monkeypatch) -> None:
    """A run's record reaches the store although the signal lands while it is written."""
    from mlflow.tracking import MlflowClient

    from speculab.tracking import spool

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run = spool.SpooledRun(tmp_path / "spool", uri, "x", "a run", {})
    real = spool.apply_record

    def interrupted(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)  # mid-write
        return real(*args, **kwargs)

    monkeypatch.setattr(spool, "apply_record", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run.log_metrics({"m": 1.0})
    assert MlflowClient(uri).get_run(run.run_id).data.metrics == {"m": 1.0}
    monkeypatch.setattr(spool, "apply_record", real)
    spool.close_open_runs("KILLED")  # as `speculab` ends its runs after the interrupt: the store answers
    assert MlflowClient(uri).get_run(run.run_id).info.status == "KILLED"


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_interrupt_swallowed_by_a_finaliser_is_raised_at_the_next_check(monkeypatch) -> None:
    class InterruptedWhileCollected:
        def __del__(self) -> None:
            interrupts.handler(signal.SIGINT, None)

    monkeypatch.setattr(interrupts, "RECEIVED", [])
    interrupts.raise_if_received()
    InterruptedWhileCollected()  # Python prints "Exception ignored in ..." and goes on
    with pytest.raises(KeyboardInterrupt, match="signal 2"):
        interrupts.raise_if_received()
