"""The tracked runs of an experiment point and of a sweep: where they spool, how they are named
and identified, and how a resumed sweep finds the points that already finished.

A point's identity (``speculab.point_id``) is a hash of its resolved config without the
tracking settings and `resume`, so the same point gets the same id in every sweep. With
`resume=true` a point is skipped when a FINISHED run with its id exists in the configured store
and experiment (MLflow), or in a spool under the Hydra output roots that was written for that same
store and experiment (a run finished while MLflow was down); a run of the same point in another
store or experiment does not count.

Each `speculab` process that runs a sweep has its own id (`SWEEP_ID`): it ends the default sweep
directory's name (conf/config.yaml, `${sweep_id:}`) and names the file in which the sweep's parent
run is left for its points, so two sweeps started in the same second, or given the same
`hydra.sweep.dir`, never share a parent.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote, urlencode

from hydra.core.hydra_config import HydraConfig
from matplotlib.figure import Figure

from speculab.algorithms import get_algorithm
from speculab.config import Config, RunPlan, TrackingConfig, describe_device, tracking_uri
from speculab.tracking.metrics import ENDS, HEADLINE, INTERVALS, mlflow_name
from speculab.tracking.provenance import JOB_TAG, provenance_tags
from speculab.tracking.spool import PARENT_TAG, RunRef, SpooledRun, fail_fast, read_spool
from speculab.tracking.store import retrying_busy, store_client
from speculab.tracking.sync import DEFAULT_ROOTS, spool_files

POINT_TAG = "speculab.point_id"
KIND_TAG = "speculab.kind"
LOSSLESS_TAG = "lossless"  # "false" where the algorithm at this K is not certified lossless (spectr_gbv, K >= 2)
NOTE_TAG = "mlflow.note.content"  # the description MLflow shows on a run's and an experiment's page
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
# ... and the headline metrics, the one the table is sorted by first; a measured one is followed by its interval.
VIEW_METRICS = ("speedup_vs_ar", "speedup_vs_hf", "tokens_per_s", "block_efficiency", "accepted_mean")
SWEEP_ID = uuid.uuid4().hex[:8]  # this process's sweep: the end of its directory's name, its parent file's key
PARENT_FILE = f"mlflow_parent.{SWEEP_ID}.json"  # in a sweep's directory: the parent run's spool id and run id


class Tracker(Protocol):
    def log_params(self, params: dict[str, Any]) -> None: ...
    def log_metrics(self, metrics: dict[str, float], step: int = 0) -> None: ...
    def set_tags(self, tags: dict[str, str]) -> None: ...
    def log_text(self, text: str, artifact: str) -> None: ...
    def log_table(self, rows: list[dict[str, Any]], artifact: str) -> None: ...
    def log_figure(self, figure: Figure, artifact: str) -> None: ...


class NoopTracker:
    """`tracking.enabled=false`: every call does nothing."""

    def log_params(self, params: dict[str, Any]) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int = 0) -> None:
        pass

    def set_tags(self, tags: dict[str, str]) -> None:
        pass

    def log_text(self, text: str, artifact: str) -> None:
        pass

    def log_table(self, rows: list[dict[str, Any]], artifact: str) -> None:
        pass

    def log_figure(self, figure: Figure, artifact: str) -> None:
        pass


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config -> {"a.b.c": value}, the form MLflow params take."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def point_id(cfg: Config) -> str:
    """Stable identity of an experiment point: its resolved config minus tracking and resume."""
    fields = {key: value for key, value in asdict(cfg).items() if key not in ("tracking", "resume")}
    return hashlib.sha1(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:16]


def output_dir() -> Path:
    """This job's Hydra output directory (outside Hydra: ./outputs)."""
    return Path(HydraConfig.get().runtime.output_dir) if HydraConfig.initialized() else Path("outputs").resolve()


def spool_dir(tracking: TrackingConfig, default: Path) -> Path:
    """`tracking.spool_dir` if set, else ``default`` (a spool/ folder in Hydra's output dir)."""
    return Path(tracking.spool_dir).resolve() if tracking.spool_dir else default


def sweep_id() -> str:
    """The `${sweep_id:}` resolver (registered by `speculab.cli`): this process's `SWEEP_ID`."""
    return SWEEP_ID


def write_parent_file(sweep_dir: Path, parent: RunRef) -> Path:
    """Leave this sweep's parent run for its points; created exclusively, so that a file of the same
    name (another sweep with this id, which cannot happen by chance) is never overwritten."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    path = sweep_dir / PARENT_FILE
    with path.open("x") as out:
        out.write(json.dumps(asdict(parent)))
    return path


def sweep_parent() -> RunRef | None:
    """This sweep's parent run inside a multirun job (written by `MlflowSweepCallback` of this
    process, `PARENT_FILE`), else None."""
    if not HydraConfig.initialized():
        return None
    hydra = HydraConfig.get()
    parent = Path(hydra.sweep.dir) / PARENT_FILE
    if hydra.mode is None or hydra.mode.name != "MULTIRUN" or not parent.is_file():
        return None
    return RunRef(**json.loads(parent.read_text()))


def run_name(cfg: Config) -> str:
    """Names the point: algorithm and shape, temperature, drafter, dataset and prompt count, model
    (`cfg` resolved: `RunPlan.cfg`)."""
    a, spec = cfg.algorithm, get_algorithm(cfg.algorithm.name)
    rule = f"/{a.node_rule}" if spec.node_rules and a.node_rule != spec.node_rules[0] else ""
    shape = (f"{a.tree} B={a.budget}" if a.tree == "best_first" else a.tree) if spec.tree_builder else f"K={a.K}"
    prompts = cfg.dataset.num_prompts if cfg.dataset.num_prompts is not None else "all"
    return (
        f"{a.name}{rule} {shape} L={a.L} T={cfg.sampling.temperature} · {cfg.drafter.name} · "
        f"{cfg.dataset.name}×{prompts} · {cfg.model.name}"
    )


def point_description(cfg: Config, metrics: dict[str, float] | None = None) -> str:
    """A run's markdown description: its configuration in words, then (when done) its headline numbers
    (`cfg` resolved: `RunPlan.cfg`)."""
    a, s, spec = cfg.algorithm, cfg.sampling, get_algorithm(cfg.algorithm.name)
    drafted = (
        f"a {a.tree} tree of {a.budget} nodes, depth {a.L}"
        if spec.tree_builder
        else f"K={a.K} i.i.d. path{'s' if a.K > 1 else ''} of L={a.L} tokens"
    )
    rule = f", node rule `{a.node_rule}`" if spec.node_rules else ""
    prompts = cfg.dataset.num_prompts if cfg.dataset.num_prompts is not None else "all"
    lossy = "" if spec.lossless(a.K) else f" **Not lossless** at K={a.K} (`algorithm.allow_lossy=true`)."
    text = (
        f"**{a.name}** verification ({spec.paper}{rule}) of {drafted} from drafter `{cfg.drafter.name}`, "
        f"temperature {s.temperature}, on {prompts} `{cfg.dataset.name}` prompts × {s.max_new_tokens} new tokens "
        f"(batch {s.batch_size}), model pair `{cfg.model.name}`, runtime `{cfg.runtime.kind}`.{lossy}"
    )
    if metrics is None:
        return text + "\n\nDecoding…"
    header = " | ".join(key.replace("_", " ") for key in HEADLINE)
    values = " | ".join(f"{metrics.get(key, float('nan')):.4g}" for key in HEADLINE)
    return f"{text}\n\n| {header} |\n|{'---|' * len(HEADLINE)}\n| {values} |"


def table_state(search: str | None = None) -> dict[str, Any]:
    """The runs table's state in speculab's view: shape and headline columns, each measured one beside
    its 95% interval, the fastest over autoregressive decoding first; with `search`, only the runs it finds."""
    metrics = [part for key in VIEW_METRICS for part in (key, *(f"{key}_{end}" for end in ENDS if key in INTERVALS))]
    columns = [f"params.`{key}`" for key in VIEW_PARAMS] + [f"metrics.`{mlflow_name(key)}`" for key in metrics]
    state = {"selectedColumns": columns, "orderByKey": f"metrics.`{mlflow_name('speedup_vs_ar')}`", "orderByAsc": False}
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


def start_point_run(plan: RunPlan, point: str) -> SpooledRun:
    """Create the point's run now (RUNNING, params, tags, description), nested under the sweep's parent."""
    cfg = plan.cfg
    tags = {
        POINT_TAG: point,
        KIND_TAG: "point",
        "algorithm": cfg.algorithm.name,
        "model": cfg.model.name,
        LOSSLESS_TAG: str(get_algorithm(cfg.algorithm.name).lossless(cfg.algorithm.K)).lower(),
        NOTE_TAG: point_description(cfg),
        "device": describe_device(cfg, plan.target_device),
        "draft_device": describe_device(cfg, plan.draft_device),
        **provenance_tags(output_dir()),
    }
    run = SpooledRun(
        spool_dir(cfg.tracking, output_dir() / "spool"),
        tracking_uri(cfg.tracking),
        cfg.tracking.experiment,
        run_name(cfg),
        tags,
        sweep_parent(),
        experiment_tags(),
    )
    run.log_params(flatten(asdict(cfg)))
    return run


@dataclass(frozen=True)
class Finished:
    """Where a point already finished, and that run's final metrics (MLflow names)."""

    where: str  # an MLflow run id, or the path of a spool
    metrics: dict[str, float]


def store_key(uri: str) -> str:
    """A tracking URI in a form two spellings of one store share: database and file paths made
    absolute (relative ones against the current directory), no trailing slash."""
    for scheme in ("sqlite:///", "file://"):
        if uri.startswith(scheme):
            return scheme + str(Path(uri.removeprefix(scheme)).resolve())
    if "://" not in uri:  # a bare path: MLflow's file store
        return "file://" + str(Path(uri).resolve())
    return uri.rstrip("/")


def finished_in_store(cfg: Config, point: str) -> Finished | None:
    """A FINISHED run of this point in the configured store and experiment (None if none or unreachable)."""
    fail_fast()
    try:
        client = store_client(tracking_uri(cfg.tracking))
        experiment = client.get_experiment_by_name(cfg.tracking.experiment)
        if experiment is None:
            return None
        query = f"tags.`{POINT_TAG}` = '{point}' and attributes.status = 'FINISHED'"
        runs = client.search_runs([experiment.experiment_id], query, max_results=1)
    except Exception:  # store down: the spools still answer
        return None
    return Finished(runs[0].info.run_id, dict(runs[0].data.metrics)) if runs else None


def finished_in_spools(point: str, roots: list[Path], uri: str, experiment: str) -> Finished | None:
    """A spool under ``roots``, written for the store ``uri`` and ``experiment``, whose run of this
    point ended FINISHED; its metrics are the last value of each."""
    store = store_key(uri)
    for path in spool_files(roots):
        records = read_spool(path)
        if not records or records[-1].get("status") != "FINISHED":
            continue
        start = records[0]
        if start.get("tags", {}).get(POINT_TAG) != point or start.get("experiment") != experiment:
            continue
        if store_key(str(start.get("uri", ""))) != store:
            continue
        metrics: dict[str, float] = {}
        for record in records:
            if record.get("op") == "metrics":
                metrics |= record["metrics"]
        return Finished(str(path), metrics)
    return None


def finished_point(cfg: Config, point: str) -> Finished | None:
    """Where this point (same id: same resolved config) already finished in the configured store and
    experiment, for `resume=true`: a run there, or a spool meant for it."""
    roots = [Path(root).resolve() for root in DEFAULT_ROOTS]
    if cfg.tracking.spool_dir:
        roots.append(Path(cfg.tracking.spool_dir).resolve())
    uri, experiment = tracking_uri(cfg.tracking), cfg.tracking.experiment
    return finished_in_store(cfg, point) or finished_in_spools(point, roots, uri, experiment)


UI_MODE = "workflowType=machine_learning"  # MLflow 3's UI opens experiments in its GenAI mode otherwise


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
    sweep's parent, `sweep`), found by their parent, else the run alone; never the rest of the experiment."""
    parent = run.run_id if sweep else run.parent_run_id
    if parent:
        return f"tags.`{PARENT_TAG}` = '{parent}'", parent
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


def point_link(parent: SpooledRun, point: str, ui_port: int) -> str | None:
    """The MLflow page of the sweep point `point`: its run under `parent`, else (a point a resumed
    sweep skipped) its newest FINISHED run in the experiment; None: the store is unreachable."""
    if not parent.online or parent.experiment_id is None:
        return None
    try:
        client = store_client(parent.uri)
        query = f"tags.`{POINT_TAG}` = '{point}'"
        child = f"{query} and tags.`{PARENT_TAG}` = '{parent.run_id}'"
        finished = f"{query} and attributes.status = 'FINISHED'"
        newest = ["attributes.start_time DESC"]
        runs = client.search_runs([parent.experiment_id], child, max_results=1) or client.search_runs(
            [parent.experiment_id], finished, max_results=1, order_by=newest
        )
    except Exception:  # the store went away since: the ranking above stands without the link
        return None
    return run_page(parent.uri, parent.experiment_id, runs[0].info.run_id, ui_port) if runs else None


def job_links(uri: str, job_id: str, ui_port: int) -> list[str]:
    """ "<run name>: <its MLflow page>" for each run the Ray job ``job_id`` recorded, sweep parents
    first (raises what MLflow raises when the store is unreachable)."""
    client = store_client(uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(experiments, f"tags.`{JOB_TAG}` = '{job_id}'", order_by=["attributes.start_time ASC"])
    runs.sort(key=lambda run: run.data.tags.get(KIND_TAG) != "sweep")
    return [f"{run.info.run_name}: {run_page(uri, run.info.experiment_id, run.info.run_id, ui_port)}" for run in runs]


def where(run: SpooledRun, ui_port: int, sweep: bool = False) -> str:
    """Which run was written and how to see it: its page, and the runs table on its sweep's points (the
    parent's own when `sweep`) or on the run alone, in a view written for them (`share_points_view`)."""
    if run.online:
        page = run_page(run.uri, run.experiment_id, run.run_id, ui_port)
        serve = f"mlflow ui --backend-store-uri {run.uri} --port {ui_port}"
        serve = "" if run.uri.startswith("http") else f" (serve the store: `{serve}`)"
        what = "the sweep's points" if sweep or run.parent_run_id else "this run"
        try:
            table = runs_table(run.uri, run.experiment_id, share_points_view(run, sweep), ui_port)
        except Exception:  # the store went away since the run's last write: its page stands alone
            table = "not linked (the store did not take the view)"
        return f"MLflow run {run.run_id}: {page} ; {what} in the runs table: {table}{serve}"
    return f"MLflow was unreachable: the run is spooled in {run.path}; replay it with `speculab-sync {run.spool_dir}`"
