"""Hydra callback: a parent MLflow run around a multirun sweep.

`on_multirun_start` opens the parent run (spooled like every run, see `tracking.spool`) and
leaves its spool id and run id in the sweep directory, where each sweep point (same process,
Hydra's serial launcher) finds it and nests its own run under it; `on_multirun_end` ends it
FINISHED. A sweep that stops early (a failed point, Ctrl-C, SIGTERM) never reaches
`on_multirun_end`: the `speculab` entry point ends the parent FAILED or KILLED instead.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from speculab.config import TrackingConfig, tracking_uri
from speculab.tracking.runs import KIND_TAG, PARENT_FILE
from speculab.tracking.spool import SpooledRun, open_run


class MlflowSweepCallback(Callback):
    def __init__(self) -> None:
        self.parent: SpooledRun | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        tracking = TrackingConfig(**config.tracking)
        if not tracking.enabled:
            return
        sweep_dir = Path(config.hydra.sweep.dir)
        overrides = " ".join(config.hydra.overrides.task)
        spool = Path(tracking.spool_dir).resolve() if tracking.spool_dir else sweep_dir / "spool"
        self.parent = open_run(
            spool, tracking_uri(tracking), tracking.experiment, f"sweep {overrides}".strip(), {KIND_TAG: "sweep"}
        )
        self.parent.log_params({"sweep.overrides": overrides})
        sweep_dir.mkdir(parents=True, exist_ok=True)
        (sweep_dir / PARENT_FILE).write_text(json.dumps(asdict(self.parent.ref)))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self.parent is not None:
            self.parent.end("FINISHED")
