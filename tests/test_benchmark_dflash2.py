"""benchmarks/dflash2.py's table: a row per point in the order a reader compares them (T, block size, shape,
then the two drafters side by side), each figure with its interval where the run logged one, and the
selector's share on DFlash2's rows alone, measured at each row's own L."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_the_table_sets_the_drafters_side_by_side_with_their_intervals(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    sys.modules.pop("dflash2", None)
    import dflash2

    logged = {"acceptance_length": 3.14159, "acceptance_length_ci_low": 2.5, "acceptance_length_ci_high": 3.9}
    assert dflash2.shown(logged | {"block_efficiency": 2.0}) == {
        "acceptance_length": "3.14 [2.5, 3.9]",
        "block_efficiency": "2",
        "speedup_vs_ar": "-",
    }
    figures = dict.fromkeys(dflash2.FIGURES, "1")
    rows = [
        dflash2.Row("dflash2", 16, 3, 1.0, figures),
        dflash2.Row("dflash", 0, 7, 0.0, figures),
        dflash2.Row("dflash2", 0, 3, 1.0, figures),
        dflash2.Row("dflash", 0, 3, 1.0, figures),
    ]
    header, rule, *body = dflash2.table(rows, {3: "9%", 7: "12%"})
    assert header.count("|") == rule.count("|") == 9
    assert body == [
        "| 0 | 8 | chain | dflash | 1 | 1 | 1 |  |",
        "| 1 | 4 | chain | dflash | 1 | 1 | 1 |  |",
        "| 1 | 4 | chain | dflash2 | 1 | 1 | 1 | 9% |",
        "| 1 | 4 | DDTree B = 16 | dflash2 | 1 | 1 | 1 | 9% |",
    ]


def test_the_selectors_time_is_measured_at_the_length_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    sys.modules.pop("selector", None)
    import selector

    from speculab.models.dflash import load_dflash_lm

    lm = load_dflash_lm("assets/tiny-pycode/dflash2", "assets/tiny-pycode/target")
    calls: list[int] = []
    monkeypatch.setattr(type(lm), "block_law", lambda self, pending, L, T: calls.append(L))
    marginals, law = selector.measure(lm, 1, 16, 1, 3)
    assert calls == [3] * 3 and marginals > 0 and law >= 0  # two warm-up calls and one timed
