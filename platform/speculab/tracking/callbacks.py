"""Hydra callback: a parent MLflow run around a multirun sweep.

`on_multirun_start` opens the parent run (spooled like every run, see `tracking.spool`) and
leaves its spool id and run id in the sweep directory, where each sweep point (same process,
Hydra's serial launcher) finds it and nests its own run under it; `on_multirun_end` ends it
FINISHED. A sweep that stops early (a failed point, Ctrl-C, SIGTERM) never reaches
`on_multirun_end`: the `speculab` entry point ends the parent FAILED or KILLED instead.
`on_job_end` collects each finished point's row; `on_multirun_end` gives the parent the sweep's
table (markdown, CSV, an MLflow table), a chart, the best point's metrics and a description.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from speculab.config import Config, TrackingConfig, tracking_uri
from speculab.tracking.runs import KIND_TAG, NOTE_TAG, PARENT_FILE, experiment_tags, spool_dir, where
from speculab.tracking.spool import SpooledRun
from speculab.tracking.sweep import (
    best_metrics,
    fastest_first,
    point_row,
    sweep_csv,
    sweep_description,
    sweep_figure,
    sweep_markdown,
)


class MlflowSweepCallback(Callback):
    def __init__(self) -> None:
        self.parent: SpooledRun | None = None
        self.rows: list[dict[str, Any]] = []  # one per finished point, for the parent's summary

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        tracking = TrackingConfig(**config.tracking)
        if not tracking.enabled:
            return
        sweep_dir = Path(config.hydra.sweep.dir)
        overrides = " ".join(config.hydra.overrides.task)
        swept = " ".join(o for o in config.hydra.overrides.task if "," in o) or overrides
        tags = {KIND_TAG: "sweep", NOTE_TAG: f"Sweep `{overrides}`: running."}
        self.parent = SpooledRun(
            spool_dir(tracking, sweep_dir / "spool"),
            tracking_uri(tracking),
            tracking.experiment,
            f"sweep {swept}".strip(),
            tags,
            experiment_tags=experiment_tags(),
        )
        self.parent.log_params({"sweep.overrides": overrides})
        sweep_dir.mkdir(parents=True, exist_ok=True)
        (sweep_dir / PARENT_FILE).write_text(json.dumps(asdict(self.parent.ref)))

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        if self.parent is not None and job_return.status == JobStatus.COMPLETED and job_return.return_value:
            job = OmegaConf.masked_copy(config, [str(key) for key in config if key != "hydra"])
            cfg = cast(Config, OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(Config), job)))
            self.rows.append(point_row(cfg, job_return.return_value))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self.parent is None:
            return
        if self.rows:
            overrides = " ".join(config.hydra.overrides.task)
            self.parent.log_table(fastest_first(self.rows), "sweep_points.json")
            self.parent.log_text(sweep_markdown(self.rows), "sweep_table.md")
            self.parent.log_text(sweep_csv(self.rows), "sweep_table.csv")
            self.parent.log_figure(sweep_figure(self.rows), "sweep_points.png")
            self.parent.log_metrics(best_metrics(self.rows))
            self.parent.set_tags({NOTE_TAG: sweep_description(overrides, self.rows)})
        self.parent.end("FINISHED")
        print(f"speculab: sweep summary in the parent {where(self.parent)}")
