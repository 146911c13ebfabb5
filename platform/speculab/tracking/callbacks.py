"""Hydra callback: a sweep checked whole before it starts, and its parent MLflow run.

`on_multirun_start` resolves every point of the sweep (`config.sweep.sweep_plans`) and refuses the
whole sweep, before any run exists or any point starts, when one is invalid; with tracking on it opens
the sweep's parent run (`tracking.sweep_run.SweepRun`), which each point's job end feeds and the
sweep's end completes. Hydra builds its callbacks for every run, so this module imports no MLflow: a
single or untracked run does not pay for it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from hydra.core.utils import JobReturn
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from speculab.config import TrackingConfig
from speculab.config.sweep import PLANS, sweep_plans

if TYPE_CHECKING:
    from speculab.tracking.sweep_run import SweepRun


class MlflowSweepCallback(Callback):
    def __init__(self) -> None:
        self.sweep: SweepRun | None = None  # a tracked sweep's parent run

    def __getstate__(self) -> dict[str, Any]:
        # a copy in a replica's process (`speculab.launch.replica_process`) has no parent run: the launcher feeds
        # this one, where the parent is open, each job's end
        return {**self.__dict__, "sweep": None}

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        plans, errors = sweep_plans(config)
        if errors:
            print("speculab: invalid sweep:\n  " + "\n  ".join(errors), file=sys.stderr)
            raise SystemExit(2)
        tracking = TrackingConfig(**config.tracking)
        if tracking.enabled:
            # MLflow, pandas and matplotlib: 1.9 s of imports on 2 cores (python -X importtime), a tracked sweep's only
            from speculab.tracking.sweep_run import SweepRun

            self.sweep = SweepRun(config, plans, tracking)

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        if self.sweep is not None:
            self.sweep.job_ended(config, job_return)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        PLANS.clear()
        if self.sweep is not None:
            self.sweep.end()
