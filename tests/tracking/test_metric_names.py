"""The one table of metric names: what is logged, and what the docs say is logged."""

from __future__ import annotations

from speculab.config import PROJECT_ROOT
from speculab.tracking.metrics import METRIC_KEYS, METRICS, RUNTIME_METRICS, metrics_markdown, mlflow_name, read_metric


def test_every_key_has_one_mlflow_name_and_old_runs_still_read() -> None:
    names = [m.mlflow for m in (*METRICS, *RUNTIME_METRICS)]
    assert len(names) == len(set(names))
    assert (
        mlflow_name("time_draft_s") == "time/draft_s"
        and mlflow_name("mem_peak_mb_target_score") == "memory/peak_mb_target_score"
    )
    assert (
        read_metric({"time/draft_s": 1.0}, "time_draft_s") == read_metric({"time_draft_s": 1.0}, "time_draft_s") == 1.0
    )
    assert set(METRIC_KEYS) == {m.key for m in METRICS}


def test_docs_table_is_the_metrics_table() -> None:
    text = (PROJECT_ROOT / "docs" / "architecture.md").read_text()
    start, end = "<!-- metrics-table:start -->\n", "\n<!-- metrics-table:end -->"
    assert text[text.index(start) + len(start) : text.index(end)] == metrics_markdown()
