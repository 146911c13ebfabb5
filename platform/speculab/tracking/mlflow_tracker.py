"""Experiment tracking: MLflow runs, or a no-op tracker with the same methods.

Only the coordinator writes. One run per experiment point; in a Hydra multirun each run is a
child of the sweep's parent run (see `tracking.callbacks`). The engine never sees a tracker.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import mlflow


class Tracker(Protocol):
    def run(self, name: str, parent_run_id: str | None = None) -> Any: ...  # context manager
    def log_params(self, params: dict[str, Any]) -> None: ...
    def log_metrics(self, metrics: dict[str, float]) -> None: ...
    def log_text(self, text: str, artifact: str) -> None: ...
    def log_figure(self, figure: Any, artifact: str) -> None: ...


class NoopTracker:
    """Tracking switched off: every call does nothing."""

    @contextmanager
    def run(self, name: str, parent_run_id: str | None = None) -> Iterator[None]:
        yield None

    def log_params(self, params: dict[str, Any]) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float]) -> None:
        pass

    def log_text(self, text: str, artifact: str) -> None:
        pass

    def log_figure(self, figure: Any, artifact: str) -> None:
        pass


class MlflowTracker:
    def __init__(self, uri: str, experiment: str) -> None:
        mlflow.set_tracking_uri(uri)
        mlflow.set_experiment(experiment)

    @contextmanager
    def run(self, name: str, parent_run_id: str | None = None) -> Iterator[Any]:
        with mlflow.start_run(run_name=name, parent_run_id=parent_run_id) as active:
            yield active

    def log_params(self, params: dict[str, Any]) -> None:
        mlflow.log_params({key: str(value) for key, value in params.items()})

    def log_metrics(self, metrics: dict[str, float]) -> None:
        mlflow.log_metrics(metrics)

    def log_text(self, text: str, artifact: str) -> None:
        mlflow.log_text(text, artifact)

    def log_figure(self, figure: Any, artifact: str) -> None:
        mlflow.log_figure(figure, artifact)


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
