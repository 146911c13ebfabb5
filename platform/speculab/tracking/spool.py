"""Durable tracking: every record of a run goes to a local spool first, then to MLflow.

A run's spool is one JSONL file, ``<spool dir>/<spool_id>.jsonl``: a ``start`` record
(tracking URI, experiment and the tags it should carry, run name, tags, the parent's spool id
and run id), then ``params``, ``tags``, ``metrics`` (with step and timestamp), ``text``,
``table`` (rows shown as a table by the MLflow UI) and ``figure`` records (a figure's PNG is
saved in ``<spool dir>/<spool_id>/``), and an ``end`` record with the final status (FINISHED,
FAILED or KILLED). `SpooledRun` writes each record before it forwards it to
MLflow; the first MLflow failure (server down, store unwritable) is reported once and the
run goes on recording to the spool alone, without waiting on retries. `apply_record` is the
one place that turns a record into MLflow calls, for the live run and for
`speculab.tracking.sync`, which replays spools later and skips what MLflow already holds.
The engine never sees any of this.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure
from mlflow.entities import Metric, Param
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from speculab.process.interrupts import held
from speculab.tracking.orphans import OWNER_TAG, close_orphans, owner, process_start
from speculab.tracking.store import retrying_busy, store_client

SPOOL_TAG = "speculab.spool_id"
PARENT_TAG = "mlflow.parentRunId"
POINT_TAG = "speculab.point_id"  # a point's identity (`tracking.resume.point_id`)
# A run's verdicts in words (the runs table's column): its own (`faster than AR; ...`), or its sweep's once the
# sweep has decided (`out; faster than AR`): `show.answers.run_verdict_words`, `sweep_verdict_words`.
VERDICT_TAG = "speculab.verdict"
# A finished point's headline figure with its 95% interval: with the verdict, the first tags its page lists (a
# run's tags show in the order they were made, above its description where MLflow's Assistant panel is open).
HEADLINE_TAG = "speedup_vs_ar"
DECODING_TAG = "decoding…"  # both, until the point ends
KIND_TAG = "speculab.kind"  # point, sweep (a sweep's parent) or report (`speculab-report`'s files)
LOSSLESS_TAG = "lossless"  # "false" where the algorithm at this K is not certified lossless (spectr_gbv, K >= 2)
NOTE_TAG = "mlflow.note.content"  # the description MLflow shows on a run's and an experiment's page
MEMBER = "point"  # the value of `member_tag`


def member_tag(parent_run_id: str) -> str:
    """The tag every point of a sweep's launch carries, its own runs and the runs a resumed launch found
    finished (which stay nested under their first parent): what the launch's link and report search."""
    return f"speculab.sweep.{parent_run_id}"


DEFAULT_ROOTS = ("outputs", "multirun")  # where Hydra writes, so where spools are looked for by default
TERMINAL = ("FINISHED", "FAILED", "KILLED")
# One retry per call: an unreachable server must not hold a run for minutes of retries (MLflow's
# defaults: 7 retries with exponential backoff, 120 s timeout); a slow but live one still answers.
FAST_FAIL_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}


def fail_fast() -> None:
    """MLflow clients of this process give up quickly (unless the user set these variables)."""
    for key, value in FAST_FAIL_ENV.items():
        os.environ.setdefault(key, value)


def spool_files(paths: Iterable[Path]) -> list[Path]:
    """Spool files named directly, in a named directory (a `tracking.spool_dir`), or in ``spool/``
    directories below it (Hydra's output dirs)."""
    found: list[Path] = []
    for path in paths:
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            below = {p for p in path.rglob("*.jsonl") if p.parent.name == "spool"}
            found += sorted(below | set(path.glob("*.jsonl")))
    return found


def read_spool(path: Path) -> list[dict[str, Any]]:
    """The records of one spool file, in order (a torn last line from a crash is dropped)."""
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return records


@dataclass
class RunContent:
    """What MLflow already holds of a run, so that replaying a spool adds only the rest."""

    params: set[str] = field(default_factory=set)
    metrics: set[tuple[str, int, int]] = field(default_factory=set)  # (key, step, timestamp)
    artifacts: set[str] = field(default_factory=set)
    tags: dict[str, str] = field(default_factory=dict)
    status: str = "RUNNING"


def run_content(client: MlflowClient, run_id: str) -> RunContent:
    run = client.get_run(run_id)
    metrics = {(m.key, m.step, m.timestamp) for key in run.data.metrics for m in client.get_metric_history(run_id, key)}
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    return RunContent(set(run.data.params), metrics, artifacts, dict(run.data.tags), run.info.status)


def experiment_id(client: MlflowClient, name: str, tags: dict[str, str]) -> str:
    """The experiment's id, created if absent; ``tags`` it lacks are set (kind, description, views)."""
    found = client.get_experiment_by_name(name)
    if found is None:
        try:
            return client.create_experiment(name, tags=tags)
        except MlflowException as err:  # another process created it between the two calls
            if err.error_code != "RESOURCE_ALREADY_EXISTS" or (found := client.get_experiment_by_name(name)) is None:
                raise
    for key, value in tags.items():
        if found.tags.get(key) != value:
            client.set_experiment_tag(found.experiment_id, key, value)
    return found.experiment_id


def find_spooled_run(client: MlflowClient, experiment: str, spool_id: str) -> str | None:
    """The MLflow run created for a spool, if any."""
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return None
    runs = client.search_runs([found.experiment_id], f"tags.`{SPOOL_TAG}` = '{spool_id}'", max_results=1)
    return runs[0].info.run_id if runs else None


def create_run(client: MlflowClient, start: dict[str, Any], parent_run_id: str | None) -> tuple[str, str]:
    """(experiment id, run id) of a new RUNNING run for a spool's start record."""
    tags = {**start["tags"], SPOOL_TAG: start["spool_id"]}
    if "pid_start" in start:  # spools written before runs carried their owner have none
        tags[OWNER_TAG] = owner(start["host"], start["pid"], start["pid_start"])
    if parent_run_id:
        tags |= {PARENT_TAG: parent_run_id, member_tag(parent_run_id): MEMBER}
    experiment = experiment_id(client, start["experiment"], start.get("experiment_tags", {}))
    close_orphans(client, start["uri"], experiment)  # what a killed process left RUNNING, before this run
    run = client.create_run(experiment, start["time_ms"], tags, start["name"])
    return run.info.experiment_id, run.info.run_id


def apply_record(client: MlflowClient, run_id: str, record: dict[str, Any], spool_dir: Path, held: RunContent) -> None:
    """Send one non-start record to MLflow, skipping what ``held`` says is there already."""
    op = record["op"]
    if op == "params":
        params = [Param(k, v) for k, v in record["params"].items() if k not in held.params]
        if params:
            client.log_batch(run_id, params=params)
        held.params |= {p.key for p in params}
    elif op == "metrics":
        step, ts = record["step"], record["time_ms"]
        metrics = [Metric(k, v, ts, step) for k, v in record["metrics"].items() if (k, step, ts) not in held.metrics]
        if metrics:
            client.log_batch(run_id, metrics=metrics)
        held.metrics |= {(m.key, step, ts) for m in metrics}
    elif op == "tags":
        for key, value in record["tags"].items():
            if held.tags.get(key) != value:
                client.set_tag(run_id, key, value)
                held.tags[key] = value
    elif op == "table" and record["artifact"] not in held.artifacts:
        client.log_table(run_id, pd.DataFrame(record["rows"]), record["artifact"])
        held.artifacts.add(record["artifact"])
    elif op == "text" and record["artifact"] not in held.artifacts:
        client.log_text(run_id, record["text"], record["artifact"])
        held.artifacts.add(record["artifact"])
    elif op == "figure" and record["artifact"] not in held.artifacts:
        folder = str(Path(record["artifact"]).parent)
        local = spool_dir / record["spool_id"] / record["artifact"]
        client.log_artifact(run_id, str(local), None if folder == "." else folder)
        held.artifacts.add(record["artifact"])
    elif op == "end" and held.status not in TERMINAL:
        client.set_terminated(run_id, record["status"], record["time_ms"])
        held.status = record["status"]


@dataclass(frozen=True)
class RunRef:
    """How a child names its parent: the parent's spool id, and its MLflow run id if it has one."""

    spool_id: str
    run_id: str | None


def now_ms() -> int:
    return int(time.time() * 1000)


EarlyEnd = Callable[[str, BaseException | None], dict[str, str]]


class SpooledRun:
    """One tracked run: spool first, MLflow while it answers (`run_id` is None offline)."""

    records = True  # `tracker.Tracker`: what it is given is kept

    def __init__(
        self,
        spool_dir: Path,
        uri: str,
        experiment: str,
        name: str,
        tags: dict[str, str],
        parent: RunRef | None = None,
        experiment_tags: dict[str, str] | None = None,
    ) -> None:
        fail_fast()
        self.spool_dir = spool_dir
        self.uri = uri
        self.spool_id = uuid.uuid4().hex
        self.path = spool_dir / f"{self.spool_id}.jsonl"
        self.held = RunContent()
        self.run_id: str | None = None
        self.experiment_id: str | None = None
        self.parent_run_id = parent.run_id if parent else None  # a sweep point's parent: its link shows the sweep
        self.client: MlflowClient | None = None
        self.error: str | None = None
        # The tags a run sets when it ends other than FINISHED, from that status and the error (None: an
        # interrupt or `close_open_runs`), so that its page says what happened, not what it was doing.
        self.early_end: EarlyEnd | None = None
        start = {
            "op": "start",
            "spool_id": self.spool_id,
            "uri": uri,
            "experiment": experiment,
            "experiment_tags": experiment_tags or {},
            "name": name,
            "tags": tags,
            "parent_spool_id": parent.spool_id if parent else None,
            "parent_run_id": parent.run_id if parent else None,
            "time_ms": now_ms(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "pid_start": process_start(os.getpid()),  # with host and pid, the run's owner (`tracking.orphans`)
        }
        OPEN_RUNS.add(self)  # until `end`, so an interrupt even during creation closes it (`close_open_runs`)
        self._append(start)
        self._forward(lambda client: self._create(client, start))

    def _create(self, client: MlflowClient, start: dict[str, Any]) -> None:
        self.experiment_id, self.run_id = create_run(client, start, start["parent_run_id"])

    def _append(self, record: dict[str, Any]) -> None:
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        with held(), self.path.open("a") as spool:  # a whole line, whatever signal lands in it
            spool.write(json.dumps(record) + "\n")

    def _forward(self, call: Any) -> None:
        """Run ``call(client)`` unless offline; on the first failure go offline and say so once."""
        if self.error is not None:
            return
        try:
            # held: an interrupt raised inside an SQLite transaction would leave the connection holding the
            # write lock, and the runs' ends that follow (close_open_runs) would find the store locked
            with held():
                if self.client is None:
                    self.client = retrying_busy(lambda: store_client(self.uri))
                client = self.client
                retrying_busy(lambda: call(client))  # a store busy with another writer is waited for, bounded
        except Exception as err:  # any store failure: the spool already holds the record
            self.error = f"{type(err).__name__}: {err}".splitlines()[0][:300]
            print(
                f"speculab: MLflow at {self.uri} failed ({self.error}); recording to {self.path}. "
                f"Replay it later with `speculab-sync {self.spool_dir}`.",
                file=sys.stderr,
            )

    def record(self, op: str, **fields: Any) -> None:
        record = {"op": op, "spool_id": self.spool_id, "time_ms": now_ms(), **fields}
        self._append(record)
        if self.run_id is not None:
            self._forward(lambda client: apply_record(client, self.run_id, record, self.spool_dir, self.held))

    def log_params(self, params: dict[str, Any]) -> None:
        self.record("params", params={key: str(value) for key, value in params.items()})

    def log_metrics(self, metrics: dict[str, float], step: int = 0) -> None:
        self.record("metrics", metrics=metrics, step=step)

    def set_tags(self, tags: dict[str, str]) -> None:
        self.record("tags", tags=tags)

    def log_text(self, text: str, artifact: str) -> None:
        self.record("text", text=text, artifact=artifact)

    def log_table(self, rows: list[dict[str, Any]], artifact: str) -> None:
        self.record("table", rows=rows, artifact=artifact)

    def log_figure(self, figure: Figure, artifact: str) -> None:
        target = self.spool_dir / self.spool_id / artifact
        target.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(target)
        self.record("figure", artifact=artifact)

    def end(self, status: str, err: BaseException | None = None) -> None:
        if status != "FINISHED" and self.early_end is not None:
            self.set_tags(self.early_end(status, err))
        self.record("end", status=status)
        OPEN_RUNS.discard(self)

    @property
    def ref(self) -> RunRef:
        return RunRef(self.spool_id, self.run_id)

    @property
    def online(self) -> bool:
        return self.run_id is not None and self.error is None


OPEN_RUNS: set[SpooledRun] = set()  # runs started and not ended in this process


@contextmanager
def tracked(run: SpooledRun) -> Iterator[SpooledRun]:
    """End ``run`` FINISHED, FAILED on an exception, KILLED on Ctrl-C or SIGTERM (re-raised)."""
    try:
        yield run
    except KeyboardInterrupt:
        run.end("KILLED")
        raise
    except BaseException as err:
        run.end("FAILED", err)
        raise
    run.end("FINISHED")


def close_open_runs(status: str) -> None:
    """End every run still open (a sweep's parent after an interrupt or a failed point)."""
    for run in list(OPEN_RUNS):
        run.end(status)
