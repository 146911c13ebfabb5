"""`speculab.measure`: interleaved order, paired ratios and their intervals, on made-up clocks."""

from __future__ import annotations

import math

import pytest

from speculab.measure import Sample, interleave, median_interval, paired_ratios, rotation, speed_metrics, throughputs


def test_every_method_leads_equally_often() -> None:
    methods = ["speculative", "autoregressive", "generate"]
    leads = [rotation(methods, turn)[0] for turn in range(9)]
    assert sorted(leads) == sorted(methods * 3)
    assert all(sorted(rotation(methods, turn)) == sorted(methods) for turn in range(9))


def test_interleave_runs_every_unit_by_every_method_back_to_back() -> None:
    calls: list[tuple[str, int, int]] = []

    def method(name: str):
        def run(unit: int, repeat: int) -> Sample:
            calls.append((name, unit, repeat))
            return Sample(10, 1.0, 1.0)

        return run

    timings = interleave({m: method(m) for m in ("a", "b")}, units=3, repeats=2)
    assert [c[1:] for c in calls] == [(u, r) for r in range(2) for u in range(3) for _ in range(2)]
    assert [c[0] for c in calls[:6]] == ["a", "b", "b", "a", "a", "b"]  # the order rotates per unit
    assert {m: [len(unit) for unit in units] for m, units in timings.items()} == {"a": [2, 2, 2], "b": [2, 2, 2]}


def test_pairing_cancels_load_that_changes_between_turns() -> None:
    """The machine slows by a different factor each turn, for both methods alike: the paired
    ratio is the true speedup (2x) every time, the unpaired throughputs are not."""
    load = iter([1.0, 3.0, 1.5, 5.0, 1.1, 2.0, 4.0, 1.0])
    slowdowns: dict[tuple[int, int], float] = {}

    def run(method: str, seconds_per_token: float):
        def timed(unit: int, repeat: int) -> Sample:
            if (unit, repeat) not in slowdowns:  # the first method of the turn meets a new load
                slowdowns[unit, repeat] = next(load)
            factor = slowdowns[unit, repeat]
            return Sample(20, 20 * seconds_per_token * factor, 20 * seconds_per_token)

        return timed

    timings = interleave({"fast": run("fast", 0.01), "slow": run("slow", 0.02)}, units=4, repeats=2)
    assert all(r == pytest.approx(2.0) for unit in paired_ratios(timings["fast"], timings["slow"]) for r in unit)
    spread = [t for unit in throughputs(timings["fast"]) for t in unit]
    assert max(spread) / min(spread) == pytest.approx(5.0)
    metrics = speed_metrics(timings, "fast", "slow", None)
    assert metrics["speedup_vs_ar"] == metrics["speedup_vs_ar_ci_low"] == metrics["speedup_vs_ar_ci_high"]
    assert metrics["speedup_vs_ar"] == pytest.approx(2.0) and metrics["speedup_vs_ar_cpu"] == pytest.approx(2.0)


def test_cpu_ratios_use_cpu_seconds() -> None:
    fast, slow = [[Sample(10, 1.0, 4.0)]], [[Sample(10, 1.0, 2.0)]]
    assert paired_ratios(fast, slow) == [[1.0]] and paired_ratios(fast, slow, cpu=True) == [[0.5]]


def test_the_median_of_unit_medians_with_a_bootstrap_interval_over_units() -> None:
    values = [[1.0, 1.2, 5.0], [2.0, 2.1, 1.9], [3.0, 3.0, 3.3], [4.0, 0.1, 4.1], [5.0, 5.0, 5.0]]
    found = median_interval(values)
    assert found.value == 3.0  # unit medians 1.2, 2.0, 3.0, 4.0, 5.0
    assert 1.2 <= found.low < found.value < found.high <= 5.0
    assert median_interval(values) == found  # seeded: the same interval every time


def test_one_unit_resamples_its_repetitions_and_one_sample_has_no_interval() -> None:
    found = median_interval([[1.0, 2.0, 3.0, 4.0, 9.0]])
    assert found.value == 3.0 and 1.0 <= found.low < 3.0 < found.high <= 9.0
    single = median_interval([[1.5]])
    assert single.value == 1.5 and math.isnan(single.low) and math.isnan(single.high)
    assert median_interval([[2.0], [2.0]]) == median_interval([[2.0, 2.0]])


def test_speed_metrics_without_baselines_have_no_speedups() -> None:
    timings = {"s": [[Sample(10, 0.5, 0.5), Sample(10, 0.25, 0.25)]]}
    metrics = speed_metrics(timings, "s", None, None)
    assert set(metrics) == {"tokens_per_s", "tokens_per_s_ci_low", "tokens_per_s_ci_high", "ms_per_token"}
    assert metrics["tokens_per_s"] == 30.0 and metrics["ms_per_token"] == pytest.approx(1000 / 30)
