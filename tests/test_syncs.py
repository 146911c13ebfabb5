"""`speculab.device.syncs` and the engine's phase clock, on the CPU: the sync counter counts torch's
sync-debug warnings (simulated here: CI has no CUDA) and restores the mode; the clock fills each
round's phases when the run is over. tests/gpu/test_capture_cuda.py runs both on a GPU."""

from __future__ import annotations

import time
import warnings

import pytest
import torch

from speculab.core.clock import PhaseClock
from speculab.core.records import RoundRecord
from speculab.device.syncs import SYNC_WARNING, counting_host_syncs


def test_nothing_is_counted_without_cuda_work() -> None:
    with counting_host_syncs() as counted:
        torch.arange(4).tolist()
    assert counted == []


def test_sync_warnings_are_counted_and_the_mode_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    modes = [0]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: modes[-1])
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    with counting_host_syncs() as counted:
        assert modes[-1] == "warn"
        for _ in range(3):  # torch warns once per synchronising call, from the same line
            warnings.warn(SYNC_WARNING, UserWarning, stacklevel=1)
        warnings.warn("something else", UserWarning, stacklevel=1)
    assert counted == [3] and modes[-1] == 0
    with counting_host_syncs(enabled=False) as counted:
        warnings.warn(SYNC_WARNING, UserWarning, stacklevel=1)
    assert counted == []


def test_the_clock_fills_round_phases_when_the_run_is_over() -> None:
    clock = PhaseClock()
    with clock.phase("prefill_target"):
        time.sleep(0.002)
    record = RoundRecord(
        rows=1, tree_nodes=[1], accepted=[0], kept=[1], time_tree_build_s=0.0, kv_target_bytes=0, kv_draft_bytes=0
    )
    begun = clock.begin_round()
    for phase in ("draft", "target", "verify", "target"):
        with clock.phase(phase):
            time.sleep(0.002)
    time.sleep(0.002)  # bookkeeping: the round's other time
    clock.close_round(record, begun)
    assert record.time_target_s == 0.0  # nothing is read before the run is over
    rest = clock.settle()
    assert set(rest) == {"prefill_target"} and rest["prefill_target"] >= 0.002
    assert record.time_target_s >= 0.004 and record.time_draft_s >= 0.002 and record.time_verify_s >= 0.002
    assert record.time_other_s >= 0.002


def test_a_catch_up_is_draft_time_but_apart_from_the_rounds_seconds_a_policy_reads() -> None:
    clock = PhaseClock()
    record = RoundRecord(
        rows=1, tree_nodes=[1], accepted=[0], kept=[1], time_tree_build_s=0.0, kv_target_bytes=0, kv_draft_bytes=0
    )
    begun = clock.begin_round()
    for phase, seconds in (("catch_up", 0.02), ("draft", 0.002), ("target", 0.002)):
        with clock.phase(phase):
            time.sleep(seconds)
    clock.close_round(record, begun)
    (closed,), read = clock.finished(0)
    assert read == 1 and closed.record is record
    assert closed.catch_up_s >= 0.02 and 0.004 <= closed.seconds < 0.02
    clock.settle()
    assert record.time_draft_s >= 0.022
