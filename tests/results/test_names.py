"""The one table of figure names (`speculab.results.names`): each figure one MLflow name, written
and read back the same, the docs' table generated from it, and nothing else spelling an interval."""

from __future__ import annotations

import math
import re

import pytest

from speculab.config import PROJECT_ROOT
from speculab.results.names import AR_PREFIX, EVERY, HF_PREFIX, Figures, flatten, key_of, mlflow_name, parse
from speculab.results.names_table import names_markdown
from speculab.stats import BOOTSTRAP_T, RATIO, Estimate


def test_every_figure_has_one_mlflow_name_and_back() -> None:
    names = [m.mlflow for m in EVERY]
    assert len(names) == len(set(names)) and len({m.key for m in EVERY}) == len(EVERY)
    assert mlflow_name("time_draft_s") == "time/draft_s"
    assert mlflow_name("mem_peak_mb_target_score") == "memory/peak_mb_target_score"
    assert mlflow_name("compare/gbv/accepted_mean") == "compare/gbv/accepted_mean"
    for key in (
        "time_draft_s",
        "alpha_12",
        "mem_peak_mb_loop_decode_unit",
        "compare/token/relative",
        "typical_speedup_vs_ar",
    ):
        assert key_of(mlflow_name(key)) == key
    assert key_of("accept/alpha_3_ci_low") is None and key_of("best/tokens_per_s") is None
    assert mlflow_name("typical_speedup_vs_ar") == "typical/speedup_vs_ar"


def test_a_misspelt_figure_fails_where_it_is_built() -> None:
    with pytest.raises(KeyError, match="tokens_per_sec"):
        Figures({"tokens_per_sec": 1.0})


def test_figures_written_to_mlflow_read_back_as_they_were() -> None:
    figures = Figures(
        {
            "speedup_vs_ar": Estimate(1.21, 1.1, 1.3, 8, "x"),
            "block_efficiency": Estimate(2.5, 2.25, 2.75, 8, BOOTSTRAP_T),
            "alpha_2": Estimate(0.5, 0.4, 0.6),
            "alpha_10": 0.1,
            "compare/gbv/accepted_mean": Estimate(1.5, se=0.25),
            "restarts": 0.0,
        }
    )
    logged = flatten(figures)
    assert logged["speedup_vs_ar_ci_low"] == 1.1 and logged["accept/alpha_2_ci_high"] == 0.6
    assert logged["compare/gbv/accepted_mean_se"] == 0.25 and logged["runtime/restarts"] == 0.0
    back = parse(logged)
    assert list(back) == [
        "block_efficiency",
        "speedup_vs_ar",
        "alpha_2",
        "alpha_10",
        "restarts",
        "compare/gbv/accepted_mean",
    ]
    assert (back["block_efficiency"].low, back["block_efficiency"].method) == (2.25, BOOTSTRAP_T)
    assert back["compare/gbv/accepted_mean"].se == 0.25 and back["compare/gbv/accepted_mean"].method == RATIO
    assert not back["alpha_10"].has_interval


def test_a_baseline_is_logged_under_its_prefix_by_key_without_its_nan_figures() -> None:
    baseline = Figures({"tokens_per_s": 50.0, "time_target_s": 2.0, "speedup_vs_ar": math.nan})
    logged = flatten(baseline, AR_PREFIX)
    assert logged == {"baseline_ar/tokens_per_s": 50.0, "baseline_ar/time_target_s": 2.0}
    assert parse(logged | {"tokens_per_s": 9.0}, AR_PREFIX) == Figures({"tokens_per_s": 50.0, "time_target_s": 2.0})
    assert not parse(logged, HF_PREFIX)


def test_logged_values_keep_five_significant_digits() -> None:
    assert flatten(Figures({"tokens_per_s": Estimate(123.456789, 120.0004, 126.98765)})) == {
        "tokens_per_s": 123.46,
        "tokens_per_s_ci_low": 120.0,
        "tokens_per_s_ci_high": 126.99,
    }


def test_docs_table_is_the_names_table() -> None:
    text = (PROJECT_ROOT / "docs" / "architecture.md").read_text()
    start, end = "<!-- metrics-table:start -->\n", "\n<!-- metrics-table:end -->"
    assert text[text.index(start) + len(start) : text.index(end)] == names_markdown()


def test_only_the_names_table_spells_an_interval_in_mlflow() -> None:
    spelling = re.compile(r"_ci_(low|high)")
    package = PROJECT_ROOT / "platform" / "speculab"
    modules = sorted(str(p.relative_to(package)) for p in package.rglob("*.py") if spelling.search(p.read_text()))
    assert modules == ["results/names.py"]
