"""Hydra callback: a parent MLflow run around a multirun sweep.

`on_multirun_start` creates the parent run and leaves its id in the sweep directory, where
each sweep point (same process, Hydra's serial launcher) finds it and nests its own run
under it; `on_multirun_end` marks the parent finished. No process-global state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig

from speculab.config import TrackingConfig, tracking_uri

PARENT_FILE = "mlflow_parent_run_id"


def _client(config: DictConfig) -> tuple[MlflowClient, str] | None:
    """(client, experiment id) when tracking is on for this sweep."""
    tracking = TrackingConfig(**config.tracking)
    if not tracking.enabled:
        return None
    client = MlflowClient(tracking_uri(tracking))
    experiment = client.get_experiment_by_name(tracking.experiment)
    experiment_id = experiment.experiment_id if experiment else client.create_experiment(tracking.experiment)
    return client, experiment_id


class MlflowSweepCallback(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        found = _client(config)
        if found is None:
            return
        client, experiment_id = found
        overrides = " ".join(config.hydra.overrides.task)
        run = client.create_run(experiment_id, run_name=f"sweep {overrides}".strip(), tags={"speculab.kind": "sweep"})
        client.log_param(run.info.run_id, "sweep.overrides", overrides)
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        (sweep_dir / PARENT_FILE).write_text(run.info.run_id)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        found = _client(config)
        parent = Path(config.hydra.sweep.dir) / PARENT_FILE
        if found is not None and parent.is_file():
            found[0].set_terminated(parent.read_text().strip())


def parent_run_id() -> str | None:
    """The sweep's parent run id inside a multirun job, else None."""
    if not HydraConfig.initialized():
        return None
    hydra = HydraConfig.get()
    parent = Path(hydra.sweep.dir) / PARENT_FILE
    return parent.read_text().strip() if hydra.mode.name == "MULTIRUN" and parent.is_file() else None
