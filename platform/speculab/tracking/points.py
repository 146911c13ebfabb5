"""The finished point runs of an experiment or a sweep, read back from MLflow for the sweep report.

Everything comes through MLflow's client (`MlflowClient.search_runs`, `get_metric_history`),
never from the store's files. A point keeps its params (the flattened config), its final
metrics (MLflow names, as logged: 5 significant digits) and its per-prompt histories
(`prompt/*`, one value per finished prompt). Intervals across prompts come from those
histories: block efficiency and tau are ratios of sums over prompts (kept tokens, accepted
tokens over sequence-rounds), so their interval is the ratio estimator's (`measure.ratio_interval`),
centred on the run's own logged metric. Times are measured once per run (a batch decodes
several prompts at once), so time-based metrics carry no interval.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from speculab.algorithms import ALGORITHMS, NODE_RULE_LABELS, method_label
from speculab.measure import ratio_interval
from speculab.tracking.metrics import mlflow_name
from speculab.tracking.runs import KIND_TAG, POINT_TAG
from speculab.tracking.spool import PARENT_TAG

PROMPT_METRICS = ("prompt/block_efficiency", "prompt/accepted_mean", "prompt/generated_tokens")
REQUIRED = ("block_efficiency", "accepted_mean", "tokens_per_s", "ms_per_token")  # every finished point logs these


@dataclass(frozen=True)
class Estimate:
    """A value and the half-width of its interval (None: one measurement per run, no interval)."""

    value: float
    half_width: float | None = None


@dataclass(frozen=True)
class Point:
    """One finished point run: its params (flattened config), final metrics and per-prompt histories."""

    run_id: str
    name: str
    start_time: int
    params: dict[str, str]
    metrics: dict[str, float]
    prompts: dict[str, list[float]] = field(default_factory=dict)  # prompt/<key> -> value per prompt


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
    children = point_runs(client, [parent.info.experiment_id], f"tags.`{PARENT_TAG}` = '{parent_id}'")
    if not children:
        kind = parent.data.tags.get(KIND_TAG, "unknown")
        raise ReportError(
            f"run {parent_id!r} ({parent.info.run_name}, speculab.kind={kind}) has no FINISHED point runs under it; "
            "give a sweep's parent run (`sweep ...`), --experiment NAME or --preset NAME"
        )
    return children


def read_point(client: MlflowClient, run: Run) -> Point:
    """A run's params, metrics and per-prompt histories (step order)."""
    histories = {
        key: [m.value for m in sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.step)]
        for key in PROMPT_METRICS
        if key in run.data.metrics
    }
    return Point(
        run.info.run_id,
        run.info.run_name or run.info.run_id,
        run.info.start_time,
        dict(run.data.params),
        dict(run.data.metrics),
        histories,
    )


def check_metrics(points: list[Point]) -> None:
    """ReportError naming every run that lacks a metric the tables need."""
    missing = [
        f"{p.run_id} ({p.name}): no {', '.join(absent)}"
        for p in points
        if (absent := [key for key in REQUIRED if mlflow_name(key) not in p.metrics])
    ]
    if missing:
        raise ReportError(
            "runs without the metrics the report needs (a speculab point run logs "
            f"{', '.join(REQUIRED)} when it finishes):\n  " + "\n  ".join(missing)
        )


def prompt_rounds(point: Point) -> list[float]:
    """Sequence-rounds per prompt: its kept tokens over its block efficiency."""
    tokens, efficiency = point.prompts["prompt/generated_tokens"], point.prompts["prompt/block_efficiency"]
    return [g / b for g, b in zip(tokens, efficiency) if b > 0]


def per_round_estimate(point: Point, key: str) -> Estimate:
    """`block_efficiency` or `accepted_mean` (per sequence-round): the logged value and its interval
    across prompts (None without the per-prompt histories)."""
    value = point.metrics[mlflow_name(key)]
    if not all(k in point.prompts for k in ("prompt/generated_tokens", "prompt/block_efficiency", f"prompt/{key}")):
        return Estimate(value)
    rounds = prompt_rounds(point)
    per_prompt = [v for v, b in zip(point.prompts[f"prompt/{key}"], point.prompts["prompt/block_efficiency"]) if b > 0]
    return Estimate(value, ratio_interval([v * r for v, r in zip(per_prompt, rounds)], rounds))


def logged(key: str, scale: float = 1.0) -> Callable[[Point], Estimate | None]:
    """A whole-run metric as logged, times ``scale`` (no interval); None when the run lacks it."""

    def estimate(point: Point) -> Estimate | None:
        value = point.metrics.get(mlflow_name(key))
        return None if value is None else Estimate(value * scale)

    return estimate


def per_round(key: str) -> Callable[[Point], Estimate | None]:
    """`per_round_estimate` of ``key``; None when the run lacks it."""
    return lambda point: per_round_estimate(point, key) if mlflow_name(key) in point.metrics else None


# A point's coordinates, in the order tables list them; a dimension a table does not lay out
# becomes a row column when it varies across the points, or the caption when it does not.
DIMENSIONS = ("Model pair", "Dataset", "Method", "K", "L", "B", "T", "Top-k", "Prompts", "New tokens", "Batch", "Seed")
Value = str | int | float | None


def method(params: dict[str, str]) -> str:
    """The method as the papers name it (`speculab.algorithms.method_label`)."""
    return method_label(
        params.get("algorithm.name", "?"),
        params.get("algorithm.node_rule", "kseq"),
        params.get("drafter.name", "?"),
        params.get("algorithm.tree", ""),
    )


def _number(text: str | None) -> int | float | None:
    if text is None or text == "None":
        return None
    value = float(text)
    return int(value) if value.is_integer() and "." not in text else value


def dimensions(point: Point) -> dict[str, Value]:
    """The point's coordinates (DIMENSIONS) from its params; B only for a tree algorithm's best-first tree."""
    p = point.params
    spec = ALGORITHMS.get(p.get("algorithm.name", ""))
    budget = p.get("algorithm.budget") if spec and spec.tree_builder and p.get("algorithm.tree") != "chain" else None
    return {
        "Model pair": p.get("model.name"),
        "Dataset": p.get("dataset.name"),
        "Method": method(p),
        "K": _number(p.get("algorithm.K")),
        "L": _number(p.get("algorithm.L")),
        "B": _number(budget),
        "T": float(p.get("sampling.temperature", "nan")),
        "Top-k": _number(p.get("sampling.top_k")) or None,  # the draft's truncation; 0: none
        "Prompts": _number(p.get("dataset.num_prompts")),
        "New tokens": _number(p.get("sampling.max_new_tokens")),
        "Batch": _number(p.get("sampling.batch_size")),
        "Seed": _number(p.get("sampling.seed")),
    }


def method_order(label: str) -> tuple[int, int, str]:
    """Methods sort as the papers list them: single-path, multi-path (SpecTr's node rules in the
    Global Resolution paper's order), then DDTree; ties by name."""
    names = [spec.label for spec in ALGORITHMS.values() if not spec.tree_builder]
    rules = list(NODE_RULE_LABELS.values())
    first = next((i for i, name in enumerate(names) if label == name or label.startswith(f"{name} (")), len(names))
    rule = next((i for i, r in enumerate(rules) if label.endswith(f"({r})")), len(rules))
    return first, rule, label


def sort_key(dimension: str, value: Value) -> tuple[int, float, tuple[int, int, str]]:
    if value is None:
        return (0, 0.0, (0, 0, ""))
    if isinstance(value, int | float):
        return (1, float(value), (0, 0, ""))
    return (2, 0.0, method_order(value) if dimension == "Method" else (0, 0, value))


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
