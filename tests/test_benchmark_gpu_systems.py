"""benchmarks/gpu_systems.py, the command the GPU runs await, runs end to end at its CPU-sized shapes.

A GPU session is rare and short: a benchmark that breaks when the engine's API moves must break
here, on the CPU, not on the GPU."""

from __future__ import annotations

import sys
from pathlib import Path

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
