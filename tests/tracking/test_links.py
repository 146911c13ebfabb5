"""The links the CLI prints open on exactly the points of that run or sweep (MLflow's experiment page
reads its search box from `searchFilter` and columns and order from the saved view), checked on the
URLs themselves: CI has no browser (`make ui-check` opens them)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

from speculab.tracking.runs import VIEW_KEY, points_search, run_page, runs_table, view_state


def query(url: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(urlsplit(url).fragment).query)  # the UI routes after '#'


def test_a_sweeps_link_searches_its_points_in_the_view_in_model_training_mode() -> None:
    parent = SimpleNamespace(run_id="p1", parent_run_id=None)
    point = SimpleNamespace(run_id="r7", parent_run_id="p1")
    assert points_search(parent, sweep=True) == points_search(point, sweep=False) == "tags.`mlflow.parentRunId` = 'p1'"
    assert points_search(SimpleNamespace(run_id="r9", parent_run_id=None), sweep=False) == "attributes.run_id = 'r9'"
    url = runs_table("sqlite:////tmp/m.db", "3", points_search(point, sweep=False), 5000)
    assert url.startswith("http://127.0.0.1:5000/#/experiments/3/runs?")
    assert query(url) == {
        "workflowType": ["machine_learning"],
        "viewStateShareKey": [VIEW_KEY],
        "searchFilter": ["tags.`mlflow.parentRunId` = 'p1'"],
    }
    assert query(run_page("http://mlflow:8080/", "3", "r7", 5000))["workflowType"] == ["machine_learning"]


def test_the_view_shows_the_headline_with_its_interval_first_sorted_by_it() -> None:
    state = json.loads(json.loads(view_state())["state"])
    metrics = [c for c in state["selectedColumns"] if c.startswith("metrics.")]
    assert metrics[:3] == [
        "metrics.`speedup_vs_ar`",
        "metrics.`speedup_vs_ar_ci_low`",
        "metrics.`speedup_vs_ar_ci_high`",
    ]
    assert "metrics.`tokens_per_s_ci_high`" in metrics and "metrics.`accepted_mean`" in metrics
    assert state["orderByKey"] == "metrics.`speedup_vs_ar`" and state["orderByAsc"] is False
