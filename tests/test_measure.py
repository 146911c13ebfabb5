"""`speculab.core.measure`: interleaved order, paired ratios and totals per unit, on made-up clocks."""

from __future__ import annotations

import pytest

from speculab.core.measure import Sample, UnitTotals, interleave, paired_ratios, rotation, throughputs
from speculab.results.figures import speed_figures


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
    figures = speed_figures(timings, "fast", "slow", None)
    speedup = figures["speedup_vs_ar"]  # four units: the value alone, too few for an interval
    assert speedup.value == pytest.approx(2.0) and speedup.n == 4 and not speedup.has_interval
    assert figures["typical_speedup_vs_ar"].value == pytest.approx(2.0)
    assert figures["speedup_vs_ar_cpu"].value == pytest.approx(2.0)


def test_the_headline_is_the_throughput_ratio_and_the_typical_unit_sits_beside_it() -> None:
    """Two units: a long one the speculative method decodes 3x faster, a short one it decodes at half
    speed. The throughput speedup is total over total (mostly the long unit's); the typical unit's is
    the median of the two per-unit ratios."""
    timings = {
        "fast": [[Sample(90, 10.0, 10.0)], [Sample(10, 4.0, 4.0)]],
        "slow": [[Sample(90, 30.0, 30.0)], [Sample(10, 2.0, 2.0)]],
    }
    figures = speed_figures(timings, "fast", "slow", None)
    assert figures["speedup_vs_ar"].value == pytest.approx((100 / 14) / (100 / 32))
    assert figures["typical_speedup_vs_ar"].value == pytest.approx((3.0 + 0.5) / 2)
    assert figures["tokens_per_s"].value == pytest.approx(100 / 14)


def test_unit_totals_sum_each_units_repetitions() -> None:
    found = UnitTotals.of([[Sample(10, 1.0, 2.0), Sample(10, 3.0, 4.0)], [Sample(5, 0.5, 0.5)]])
    assert found == UnitTotals((20.0, 5.0), (4.0, 0.5), (6.0, 0.5)) and found.seconds(cpu=True) == (6.0, 0.5)


def test_cpu_ratios_use_cpu_seconds() -> None:
    fast, slow = [[Sample(10, 1.0, 4.0)]], [[Sample(10, 1.0, 2.0)]]
    assert paired_ratios(fast, slow) == [[1.0]] and paired_ratios(fast, slow, cpu=True) == [[0.5]]


def test_speed_figures_without_baselines_have_no_speedups() -> None:
    timings = {"s": [[Sample(10, 0.5, 0.5), Sample(10, 0.25, 0.25)]]}
    figures = speed_figures(timings, "s", None, None)
    assert list(figures) == ["tokens_per_s", "ms_per_token", "units"]
    assert figures["tokens_per_s"].value == pytest.approx(20 / 0.75)  # total tokens over total seconds
    assert figures["ms_per_token"].value == pytest.approx(1000 * 0.75 / 20)
    assert not figures["tokens_per_s"].has_interval  # one unit: its repetitions are not units
