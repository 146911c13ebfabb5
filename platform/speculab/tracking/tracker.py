"""What the experiment writes a run through: the `Tracker` protocol (a spooled MLflow run has its
methods, `speculab.tracking.spool.SpooledRun`), the `NoopTracker` of `tracking.enabled=false`, and
the config as MLflow params."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # a type only: an untracked run imports no matplotlib
    from matplotlib.figure import Figure


class Tracker(Protocol):
    records: bool  # whether what is logged is kept; a point builds its figures for a tracker that keeps them

    def log_params(self, params: dict[str, Any]) -> None: ...
    def log_metrics(self, metrics: dict[str, float], step: int = 0) -> None: ...
    def set_tags(self, tags: dict[str, str]) -> None: ...
    def log_text(self, text: str, artifact: str) -> None: ...
    def log_table(self, rows: list[dict[str, Any]], artifact: str) -> None: ...
    def log_figure(self, figure: Figure, artifact: str) -> None: ...


class NoopTracker:
    """`tracking.enabled=false`: every call does nothing."""

    records = False

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


def flat_params(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config -> {"a.b.c": value}, the form MLflow params take."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flat_params(value, f"{name}."))
        else:
            flat[name] = value
    return flat
