"""speculab's Hydra launcher (`hydra/launcher: speculab`, conf/config.yaml): Hydra finds launchers in the
`hydra_plugins` namespace package. With `cluster.replicas` = 1 it runs the sweep's points one after another,
each through Hydra's `run_job` (its directory, saved config, logging, environment and callbacks); with
more, side by side on replicas of their model groups (`speculab.launch.launcher`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from hydra.core.utils import JobReturn, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

log = logging.getLogger(__name__)


class ReplicaLauncher(Launcher):
    def __init__(self) -> None:
        super().__init__()
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from speculab.launch.launcher import launch_side_by_side, replica_count

        assert self.hydra_context is not None and self.task_function is not None and self.config is not None
        if job_overrides and (replicas := replica_count(job_overrides)) > 1:
            return launch_side_by_side(
                self.hydra_context, self.task_function, self.config, job_overrides, initial_job_idx, replicas
            )
        return self.one_by_one(job_overrides, initial_job_idx)

    def one_by_one(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[JobReturn]:
        """Each point in turn as Hydra runs a job: its config composed and numbered as for points side by
        side (`speculab.launch.launcher.composed`), and run by `run_job`.

        The loop is Hydra 1.3's `BasicLauncher.launch` (hydra/_internal/core_plugins/basic_launcher.py),
        step for step: globals set, logging configured, the sweep directory made, a line per job, its
        config composed and numbered, `run_job` with the sweep's directory keys, logging configured again
        after each job. It is not called: BasicLauncher lives in Hydra's `_internal` package, which Hydra
        does not keep stable, and it composes each job's config itself, where a point here is composed by
        `composed`, as a point side by side is."""
        from speculab.launch.launcher import composed

        assert self.hydra_context is not None and self.task_function is not None and self.config is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        log.info(f"Launching {len(job_overrides)} jobs locally")
        done = []
        for index, overrides in enumerate(job_overrides, start=initial_job_idx):
            log.info(f"\t#{index} : {' '.join(filter_overrides(overrides))}")
            config = composed(self.hydra_context, self.config, overrides, index).config
            done.append(
                run_job(
                    hydra_context=self.hydra_context,
                    task_function=self.task_function,
                    config=config,
                    job_dir_key="hydra.sweep.dir",
                    job_subdir_key="hydra.sweep.subdir",
                )
            )
            configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)  # the job changed it
        return done
