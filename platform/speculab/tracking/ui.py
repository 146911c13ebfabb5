"""Where a person sees the runs in MLflow's UI: the experiment's saved runs-table view (the point's
shape and headline figures), a view per sweep that finds just its points, and the links the console
prints.

MLflow 3's UI reads a shared runs-table view from an experiment tag (`mlflow.sharedViewState.<key>`)
and opens it from `?viewStateShareKey=<key>` (docs/mlflow-ui.md).
"""

from __future__ import annotations

import getpass
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import psutil

from speculab.results.names import HEADLINE, interval_names, mlflow_name
from speculab.tracking.provenance import JOB_TAG
from speculab.tracking.resume import store_key
from speculab.tracking.spool import KIND_TAG, MEMBER, NOTE_TAG, POINT_TAG, VERDICT_TAG, SpooledRun, member_tag
from speculab.tracking.store import retrying_busy, store_client

VIEW_KEY = "speculab"  # the experiment's saved view: ?viewStateShareKey=speculab
VIEW_NAME = "speculab: shape and headline metrics"
VIEW_TAG = "mlflow.sharedViewState."  # an experiment tag MLflow's UI reads a shared runs-table view from
VIEW_CREATED_MS = 1_767_225_600_000  # 2026-01-01: fixed, so that rewriting the tag at every run changes nothing
# The runs table's columns in the saved view: the point's shape, then the headline metrics.
# dataset.num_prompts: a run name the table cuts short still shows its prompt count here.
VIEW_PARAMS = (
    "algorithm.name",
    "algorithm.K",
    "algorithm.L",
    "sampling.temperature",
    "drafter.name",
    "dataset.num_prompts",
)
# ... and the headline figures, sorted by `speedup_vs_ar`. The view sets the columns' order and widths
# (`columnOrder`, `columnWidths` of MLflow's view state): the run's name, its verdicts (VERDICT_TAG), then
# `speedup_vs_ar` with its interval's ends (`results.names.interval_names`, wide enough that their names read
# whole and each sorts), then block efficiency, throughput and the speedup over generate, then Created and
# the shape's params. At 1440 px with MLflow's Assistant panel open (its default) the name, the verdicts,
# the speedup and its interval show without scrolling; `accepted_mean` is left to each run's description.
TABLE_METRICS = ("speedup_vs_ar", "block_efficiency", "tokens_per_s", "speedup_vs_hf")
INTERVAL_WIDTH = 150  # px: the name of the interval's upper end, whole
VERDICT_WIDTH = 100  # px: `in the running`, `AR: faster`, whole
NAME_WIDTH = 160  # px: a point's verifier and shape (`gbv K=2 L=4 T=1.0`), whole; the rest of its name is its row's
NAME_COLUMN = "attributes.`Run Name`"  # MLflow's own columns' ids
FIXED_COLUMNS = ("runDateAndNestInfo", "duration")


def table_metrics() -> list[str]:
    """The view's metric columns, in order: `speedup_vs_ar`, its interval's ends, the other headline figures."""
    first, *rest = TABLE_METRICS
    return [mlflow_name(first), *interval_names(first), *map(mlflow_name, rest)]


def table_state(search: str | None = None) -> dict[str, Any]:
    """The runs table's state in speculab's view: shape and headline columns, the fastest over
    autoregressive decoding first; with `search`, only the runs it finds."""
    metrics = [f"metrics.`{name}`" for name in table_metrics()]
    params = [f"params.`{key}`" for key in VIEW_PARAMS]
    verdict = f"tags.`{VERDICT_TAG}`"
    state = {
        "selectedColumns": [verdict, *params, *metrics],
        "columnOrder": [NAME_COLUMN, verdict, *metrics, *FIXED_COLUMNS, *params],
        "columnWidths": {NAME_COLUMN: NAME_WIDTH, verdict: VERDICT_WIDTH}
        | {column: INTERVAL_WIDTH for column in metrics[1:3]},
        "orderByKey": metrics[0],
        "orderByAsc": False,
    }
    return state | ({"searchFilter": search} if search else {})


def view_state() -> str:
    """The experiment's saved view (`table_state`, every run), in the envelope MLflow's "Views" menu
    lists: a name, times, and the table state as a JSON string."""
    state = json.dumps(table_state())
    return json.dumps({"name": VIEW_NAME, "createdAt": VIEW_CREATED_MS, "updatedAt": VIEW_CREATED_MS, "state": state})


def experiment_tags() -> dict[str, str]:
    """Model-training kind (the UI opens on the runs table), a description and the saved view."""
    headline = ", ".join(f"`{mlflow_name(key)}`" for key in HEADLINE)
    note = (
        f"speculab runs: one per experiment point, nested under a parent run per sweep. Headline metrics: "
        f"{headline}; phase times under `time/`, memory under `memory/`, the autoregressive baseline under "
        f"`baseline_ar/`. The view `?viewStateShareKey={VIEW_KEY}` shows the point's shape and headline columns."
    )
    return {
        "mlflow.experimentKind": "custom_model_development",
        NOTE_TAG: note,
        f"{VIEW_TAG}{VIEW_KEY}": view_state(),
    }


UI_MODE = "workflowType=machine_learning"  # MLflow 3's UI opens experiments in its GenAI mode otherwise
UI_PORT_ENV = "SPECULAB_UI_PORT"  # set once in a shell: the port printed links use when no `mlflow ui` is found
DEFAULT_UI_PORT = 5000  # `mlflow ui`'s own default


def option(command: list[str], *names: str) -> str | None:
    """The value of a command line's option (`--port 5001` or `--port=5001`), None where absent."""
    for at, part in enumerate(command):
        for name in names:
            if part == name and at + 1 < len(command):
                return command[at + 1]
            if part.startswith(f"{name}="):
                return part.split("=", 1)[1]
    return None


def serving_port(uri: str) -> int | None:
    """The port of a running `mlflow ui` or `mlflow server` of this user whose backend store is `uri`
    (its relative paths read from that process's directory), None where none is found."""
    for process in psutil.process_iter(["cmdline", "cwd", "username"]):
        command = process.info["cmdline"] or []
        if process.info["username"] != getpass.getuser() or not any(Path(p).name == "mlflow" for p in command[:3]):
            continue
        if not {"ui", "server"} & set(command):
            continue
        store = option(command, "--backend-store-uri") or "sqlite:///mlflow.db"  # MLflow 3's default store
        if store_key(served_store(store, process.info["cwd"] or ".")) == store_key(uri):
            return int(option(command, "--port", "-p") or DEFAULT_UI_PORT)
    return None


def served_store(store: str, cwd: str) -> str:
    """A store URI as a process working in `cwd` reads it: a relative file path made absolute there."""
    for scheme in ("sqlite:///", "file://", ""):
        if store.startswith(scheme) and (scheme or "://" not in store):
            path = Path(store.removeprefix(scheme))
            return scheme + str(path if path.is_absolute() else Path(cwd) / path)
    return store


def ui_port(uri: str, configured: int | None) -> int:
    """The port printed links use for a database store: `tracking.ui_port` where set, else a running
    `mlflow ui`'s serving it, else $SPECULAB_UI_PORT, else 5000."""
    if configured is not None:
        return configured
    return serving_port(uri) or int(os.environ.get(UI_PORT_ENV, "") or DEFAULT_UI_PORT)


def ui_base(uri: str, ui_port: int) -> str:
    """The MLflow UI serving `uri`: the tracking server itself, or for a database store `mlflow ui --port ui_port`."""
    return uri.rstrip("/") if uri.startswith("http") else f"http://127.0.0.1:{ui_port}"


def run_page(uri: str, experiment_id: str | None, run_id: str | None, ui_port: int) -> str:
    """The run's page in the MLflow UI (in its model-training mode: the sidebar stays on runs)."""
    return f"{ui_base(uri, ui_port)}/#/experiments/{experiment_id}/runs/{run_id}?{UI_MODE}"


def runs_table(uri: str, experiment_id: str | None, share_key: str, ui_port: int) -> str:
    """The experiment's runs table in the shared view `share_key` (`share_points_view`)."""
    query = urlencode({"viewStateShareKey": share_key}, quote_via=quote)
    return f"{ui_base(uri, ui_port)}/#/experiments/{experiment_id}/runs?{UI_MODE}&{query}"


def points_owner(run: SpooledRun, sweep: bool) -> tuple[str, str]:
    """(search, run id) of the points `run` belongs with: its sweep's (the run's own when it is the
    sweep's parent, `sweep`), found by the tag every point of the launch carries (`member_tag`: the
    points a resumed launch found finished too), else the run alone; never the rest of the experiment."""
    parent = run.run_id if sweep else run.parent_run_id
    if parent:
        return f"tags.`{member_tag(parent)}` = '{MEMBER}'", parent
    return f"attributes.run_id = '{run.run_id}'", str(run.run_id)


def share_points_view(run: SpooledRun, sweep: bool) -> str:
    """Write the view of `run`'s points (`points_owner`) as an experiment tag, and return its share key.

    MLflow 3.17's experiment page ignores a shared view whenever the URL carries a search (`searchFilter`,
    `orderByKey`, ...), so the search travels inside the view's state. The state is stored bare, not in
    the envelope of the Views menu (`view_state`): a share link applies it, the menu does not list one
    per sweep."""
    search, owner = points_owner(run, sweep)
    key = f"{VIEW_KEY}-{owner[:12]}"
    experiment = run.experiment_id
    assert experiment is not None, "an online run knows its experiment"
    tag, state = f"{VIEW_TAG}{key}", json.dumps(table_state(search))
    # a store busy with another writer is waited for, as every run write is (`retrying_busy`)
    retrying_busy(lambda: store_client(run.uri).set_experiment_tag(experiment, tag, state))
    return key


def point_link(parent: SpooledRun, point: str, port: int | None) -> str | None:
    """The MLflow page of the sweep point `point`: its run among `parent`'s points (a point a resumed
    sweep skipped included), else its newest FINISHED run in the experiment; None: the store is unreachable."""
    if not parent.online or parent.experiment_id is None:
        return None
    try:
        client = store_client(parent.uri)
        query = f"tags.`{POINT_TAG}` = '{point}'"
        child = f"{query} and tags.`{member_tag(str(parent.run_id))}` = '{MEMBER}'"
        finished = f"{query} and attributes.status = 'FINISHED'"
        newest = ["attributes.start_time DESC"]
        runs = client.search_runs([parent.experiment_id], child, max_results=1) or client.search_runs(
            [parent.experiment_id], finished, max_results=1, order_by=newest
        )
    except Exception:  # the store went away since: the ranking above stands without the link
        return None
    found = runs[0].info.run_id if runs else None
    return run_page(parent.uri, parent.experiment_id, found, ui_port(parent.uri, port)) if found else None


def point_runs(parent: SpooledRun) -> dict[str, str]:
    """Point id -> run id of every finished point run of `parent`'s sweep (those an earlier launch finished
    included, by the tag every point of the launch carries): the runs the sweep's answer rests on, not an
    attempt a lost replica left FAILED; empty where the store is unreachable."""
    if not parent.online or parent.experiment_id is None:
        return {}
    try:
        client = store_client(parent.uri)
        runs = client.search_runs([parent.experiment_id], f"tags.`{member_tag(str(parent.run_id))}` = '{MEMBER}'")
    except Exception:  # the store went away since: the parent's own answer stands
        return {}
    finished = [run for run in runs if POINT_TAG in run.data.tags and run.info.status == "FINISHED"]
    return {run.data.tags[POINT_TAG]: run.info.run_id for run in finished}


def job_links(uri: str, job_id: str, port: int | None) -> list[str]:
    """ "<run name>: <its MLflow page>" for each run the Ray job ``job_id`` recorded, sweep parents
    first (raises what MLflow raises when the store is unreachable)."""
    client = store_client(uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(experiments, f"tags.`{JOB_TAG}` = '{job_id}'", order_by=["attributes.start_time ASC"])
    runs.sort(key=lambda run: run.data.tags.get(KIND_TAG) != "sweep")
    shown = ui_port(uri, port)
    return [f"{run.info.run_name}: {run_page(uri, run.info.experiment_id, run.info.run_id, shown)}" for run in runs]


def where(run: SpooledRun, configured: int | None, sweep: bool = False) -> str:
    """Which run was written and how to see it, a short line each: its page; and, for a run or a sweep's
    parent (`sweep`), the runs table on it or its sweep's points, in a view written for them
    (`share_points_view`; a point of a sweep leaves that to its parent); at the port of the `mlflow ui`
    serving the store where one runs (`ui_port`), else how to serve it."""
    if not run.online:
        return (
            f"MLflow was unreachable: the run is spooled in {run.path}; replay it with `speculab-sync {run.spool_dir}`"
        )
    port = ui_port(run.uri, configured)
    lines = [f"MLflow run: {run_page(run.uri, run.experiment_id, run.run_id, port)}"]
    if sweep or not run.parent_run_id:
        what = "the sweep's points" if sweep else "this run"
        try:
            table = runs_table(run.uri, run.experiment_id, share_points_view(run, sweep), port)
        except Exception:  # the store went away since the run's last write: its page stands alone
            table = "not linked (the store did not take the view)"
        lines.append(f"{what} in the runs table: {table}")
    if not run.uri.startswith("http") and configured is None and serving_port(run.uri) is None:
        lines.append(
            f"serve the store: mlflow ui --backend-store-uri {run.uri} --port {port} (another port: {UI_PORT_ENV}=N)"
        )
    return "\n  ".join(lines)
