"""benchmarks/gpu_systems.py, the command the GPU runs await, runs end to end at its CPU-sized shapes.

A GPU session is rare and short: a benchmark that breaks when the engine's API moves must break
here, on the CPU, not on the GPU."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_gpu_systems_small(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    sys.modules.pop("gpu_systems", None)
    import gpu_systems

    gpu_systems.main(["--small", "--repeats", "1", "--max-new-tokens", "4"])
    out = capsys.readouterr().out
    for title in ("(b) tree pass", "(d) time split", "(c) verification", "(a) autoregressive decoding"):
        assert title in out
    assert "speculab autoregressive loop" in out


def test_gpu_systems_subset_of_the_first_gpu_call(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tables and shapes `tools/gpu_checks.sh first` asks for, at CPU-sized shapes."""
    monkeypatch.chdir(REPO)
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    sys.modules.pop("gpu_systems", None)
    import gpu_systems

    args = ["--small", "--repeats", "1", "--max-new-tokens", "4", "--tables", "bca", "--sizes", "1,16"]
    gpu_systems.main([*args, "--contexts", "128", "--vocabs", "8192", "--verifiers", "token,block,gbv"])
    out = capsys.readouterr().out
    assert "(b) tree pass" in out and "(c) verification" in out and "(a) autoregressive decoding" in out
    assert "(d) time split" not in out and "spectr" not in out
    assert "ms (range)" in out and "ms / call (range)" in out


def test_a_timing_keeps_the_median_and_the_range_of_its_repeats(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two GPU sessions differed by 5-43%: each time is printed with the range of its repeats, so a
    difference between runs can be told from the noise inside one."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import gpu_systems

    ticks = iter([0.0, 0.003, 0.010, 0.011, 0.020, 0.022])  # calls of 3, 1 and 2 ms
    monkeypatch.setattr(gpu_systems, "time", SimpleNamespace(perf_counter=lambda: next(ticks)))
    calls: list[int] = []
    timing = gpu_systems.elapsed(lambda: calls.append(1), "cpu", 3)
    assert len(calls) == 4  # a warm-up, then the repeats
    assert (timing.median, timing.low, timing.high) == pytest.approx((2.0, 1.0, 3.0))
    assert timing.shown(2) == "2.00 (1.00-3.00)"
