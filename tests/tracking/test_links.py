"""The links the CLI prints open on exactly the points of that run or sweep: a shared view per sweep
(or single run) holds the search, the columns and the order, since MLflow 3.17's experiment page
ignores a shared view when the URL carries a search. Checked on the URLs and the stored view: CI has
no browser (`make ui-check` opens them)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

from mlflow.tracking import MlflowClient

from speculab.results.names import HEADLINE, interval_names, mlflow_name
from speculab.tracking.spool import VERDICT_TAG
from speculab.tracking.ui import (
    TABLE_METRICS,
    UI_PORT_ENV,
    VIEW_TAG,
    points_owner,
    run_page,
    runs_table,
    serving_port,
    share_points_view,
    ui_port,
    view_state,
)


def query(url: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(urlsplit(url).fragment).query)  # the UI routes after '#'


def test_a_sweeps_link_opens_a_view_of_its_points_in_model_training_mode(tmp_path: Path) -> None:
    parent = SimpleNamespace(run_id="p1", parent_run_id=None)
    point = SimpleNamespace(run_id="r7", parent_run_id="p1")
    assert (
        points_owner(parent, sweep=True)
        == points_owner(point, sweep=False)
        == ("tags.`speculab.sweep.p1` = 'point'", "p1")  # the launch's own points and those a resume found
    )
    assert points_owner(SimpleNamespace(run_id="r9", parent_run_id=None), sweep=False)[0] == "attributes.run_id = 'r9'"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("speculab")
    key = share_points_view(SimpleNamespace(uri=uri, experiment_id=experiment, **vars(point)), sweep=False)
    state = json.loads(client.get_experiment(experiment).tags[f"{VIEW_TAG}{key}"])
    assert state["searchFilter"] == "tags.`speculab.sweep.p1` = 'point'" and state["orderByAsc"] is False
    url = runs_table(uri, experiment, key, 5000)
    assert url.startswith(f"http://127.0.0.1:5000/#/experiments/{experiment}/runs?")
    assert query(url) == {"workflowType": ["machine_learning"], "viewStateShareKey": [key]}  # no search in the URL
    assert query(run_page("http://mlflow:8080/", "3", "r7", 5000))["workflowType"] == ["machine_learning"]


def test_the_view_shows_the_verdicts_and_the_ranking_figure_with_its_interval_first() -> None:
    """The run's name, its verdicts, `speedup_vs_ar`, its interval's ends (low, then high, wide enough to read
    whole), then the other headline figures, Created and the shape's params; sorted by the speedup."""
    state = json.loads(json.loads(view_state())["state"])
    metrics = [c for c in state["selectedColumns"] if c.startswith("metrics.")]
    assert set(TABLE_METRICS) <= set(HEADLINE) and TABLE_METRICS[0] == "speedup_vs_ar"
    low, high = (f"metrics.`{name}`" for name in interval_names("speedup_vs_ar"))
    assert metrics == [f"metrics.`{mlflow_name('speedup_vs_ar')}`", low, high, *metrics[3:]]
    verdict = f"tags.`{VERDICT_TAG}`"
    assert (
        state["columnOrder"][:6] == ["attributes.`Run Name`", verdict, *metrics[:4]]
        and verdict in state["selectedColumns"]
    )
    assert state["columnWidths"] == {"attributes.`Run Name`": 160, verdict: 100, low: 150, high: 150}
    assert state["orderByKey"] == "metrics.`speedup_vs_ar`" and state["orderByAsc"] is False


def test_links_follow_the_port_of_the_mlflow_ui_serving_the_store(tmp_path: Path, monkeypatch) -> None:
    """A running `mlflow ui` of this user serving the store (a stand-in process with its command line),
    its relative store path read from its own directory: its port. None running: $SPECULAB_UI_PORT, else
    5000; `tracking.ui_port` wins."""
    store = tmp_path / "mlflow.db"
    uri = f"sqlite:///{store}"
    monkeypatch.delenv(UI_PORT_ENV, raising=False)
    assert ui_port(uri, None) == 5000 and ui_port(uri, 6001) == 6001
    monkeypatch.setenv(UI_PORT_ENV, "5050")
    assert ui_port(uri, None) == 5050
    fake = tmp_path / "mlflow"
    fake.write_text("import time\ntime.sleep(60)\n")
    command = [sys.executable, str(fake), "ui", "--backend-store-uri", "sqlite:///mlflow.db", "--port", "5123"]
    serving = subprocess.Popen(command, cwd=tmp_path)
    try:
        for _ in range(50):  # its command line shows once the interpreter has started
            if serving_port(uri) is not None:
                break
            time.sleep(0.1)
        assert serving_port(uri) == 5123 and ui_port(uri, None) == 5123
        assert serving_port(f"sqlite:///{tmp_path / 'other.db'}") is None
    finally:
        serving.kill()
        serving.wait()
