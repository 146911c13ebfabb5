"""The finished point runs of an experiment or a sweep, read back from MLflow for the report.

Everything comes through MLflow's client (`MlflowClient.search_runs`, its artifacts), never from the
store's files. A point keeps its shape (`PointShape.from_params`, from its flattened config), its
figures as it logged them (`results.names.parse`: each with the interval it was measured with), its
autoregressive baseline's beside them, and its per-unit sums (`units.json`), on which the report's
bold cells are decided (`results.verdicts.winners`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from speculab.config.report import DIMENSIONS
from speculab.results.point import PointResult, PointShape
from speculab.results.profile import checkpoint_id
from speculab.tracking.resume import logged_metrics, logged_units
from speculab.tracking.spool import KIND_TAG, MEMBER, PARENT_TAG, POINT_TAG, member_tag

REQUIRED = ("block_efficiency", "accepted_mean", "tokens_per_s", "ms_per_token")  # every finished point logs these


@dataclass(frozen=True)
class Point:
    """One finished point run: which run it is, and its result as it logged it."""

    run_id: str
    name: str
    start_time: int
    result: PointResult
    pair: tuple[str, str] = ("", "")  # its target's and draft's checkpoint ids (`results.profile.checkpoint_id`)


class ReportError(ValueError):
    """Bad input to the report: names what was given and what is allowed."""


def experiment_id(client: MlflowClient, name: str) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        known = ", ".join(sorted(e.name for e in client.search_experiments())) or "none"
        raise ReportError(f"no MLflow experiment named {name!r} in this store; experiments there: {known}")
    return experiment.experiment_id


def point_runs(client: MlflowClient, experiment_ids: list[str], query: str = "") -> list[Run]:
    """FINISHED point runs (tag speculab.kind=point) matching ``query``, oldest first."""
    finished = f"tags.`{KIND_TAG}` = 'point' and attributes.status = 'FINISHED'"
    runs = client.search_runs(experiment_ids, f"{finished} and {query}" if query else finished, max_results=50_000)
    return sorted(runs, key=lambda run: run.info.start_time)


def newest_per_point(runs: list[Run]) -> list[Run]:
    """One run per point id (the newest): an experiment holds reruns of the same point."""
    newest: dict[str, Run] = {}
    for run in runs:  # oldest first, so later ones win
        newest[run.data.tags.get(POINT_TAG, run.info.run_id)] = run
    return sorted(newest.values(), key=lambda run: run.info.start_time)


def sweep_children(client: MlflowClient, parent_id: str) -> list[Run]:
    """The finished points of a sweep's parent run; ReportError if it is not one."""
    try:
        parent = client.get_run(parent_id)
    except Exception as err:  # MlflowException: RESOURCE_DOES_NOT_EXIST
        raise ReportError(f"no MLflow run {parent_id!r} in this store ({err})") from None
    # every point of the launch (those a resumed launch found finished too), or an older sweep's children
    children = point_runs(client, [parent.info.experiment_id], f"tags.`{member_tag(parent_id)}` = '{MEMBER}'")
    children = children or point_runs(client, [parent.info.experiment_id], f"tags.`{PARENT_TAG}` = '{parent_id}'")
    if not children:
        kind = parent.data.tags.get(KIND_TAG, "unknown")
        raise ReportError(
            f"run {parent_id!r} ({parent.info.run_name}, speculab.kind={kind}) has no FINISHED point runs under it; "
            "give a sweep's parent run (`sweep ...`), --experiment NAME or --preset NAME"
        )
    return children


def read_point(client: MlflowClient, run: Run) -> Point:
    """A run's result, as it logged it."""
    shape = PointShape.from_params(run.data.params)
    logged = logged_metrics(client, run.info.run_id, dict(run.data.metrics))
    result = PointResult.from_logged(shape, logged, logged_units(client, run.info.run_id))
    pair = tuple(checkpoint_id(run.data.params.get(f"model.{role}_dir", "")) for role in ("target", "draft"))
    return Point(run.info.run_id, run.info.run_name or run.info.run_id, run.info.start_time, result, (pair[0], pair[1]))


def read_points(client: MlflowClient, runs: list[Run]) -> list[Point]:
    """The runs' points; ReportError naming every run that lacks a figure the tables need."""
    points = [read_point(client, run) for run in runs]
    missing = [
        f"{p.run_id} ({p.name}): no {', '.join(absent)}"
        for p in points
        if (absent := [key for key in REQUIRED if key not in p.result.figures])
    ]
    if missing:
        raise ReportError(
            "runs without the metrics the report needs (a speculab point run logs "
            f"{', '.join(REQUIRED)} when it finishes):\n  " + "\n  ".join(missing)
        )
    return points


@dataclass(frozen=True, order=True)
class Method:
    """A point's method as a coordinate: it sorts in the papers' order (`PointShape.method_rank`), ties by
    name, and reads as its name."""

    rank: tuple[int, int]
    label: str

    def __str__(self) -> str:
        return self.label


Value = str | int | float | Method | None


def dimensions(point: Point) -> dict[str, Value]:
    """The point's coordinates (`config.report.DIMENSIONS`), from its shape."""
    s = point.result.shape
    top_k = s.top_k or None  # the draft's truncation; 0: none
    values = (s.model, s.dataset, Method(s.method_rank, s.method), s.K, s.L, s.budgeted, s.temperature, top_k)
    return dict(zip(DIMENSIONS, (*values, s.prompts, s.max_new_tokens, s.batch_size, s.seed), strict=True))


def sort_key(value: Value) -> tuple[int, float, tuple[int, int], str]:
    """Coordinates in order: none first, then numbers, methods in the papers' order, other names."""
    if value is None:
        return (0, 0.0, (0, 0), "")
    if isinstance(value, int | float):
        return (1, float(value), (0, 0), "")
    if isinstance(value, Method):
        return (2, 0.0, value.rank, value.label)
    return (3, 0.0, (0, 0), value)


def varying(points: list[Point]) -> list[str]:
    """Dimensions that take more than one value across the points."""
    coordinates = [dimensions(p) for p in points]
    return [d for d in DIMENSIONS if len({c[d] for c in coordinates}) > 1]


def constants(points: list[Point], shown: Collection[str] = ()) -> str:
    """The dimensions with one value across the points, but those ``shown`` elsewhere
    (`Model pair tiny-pycode, Dataset humaneval, T 1.0`)."""
    first, spread = dimensions(points[0]), varying(points)
    return ", ".join(
        f"{d} {first[d]}" for d in DIMENSIONS if d not in shown and d not in spread and first[d] is not None
    )
