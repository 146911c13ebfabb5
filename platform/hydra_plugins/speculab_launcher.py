"""speculab's Hydra launcher (`hydra/launcher: speculab`, conf/config.yaml): Hydra finds launchers in the
`hydra_plugins` namespace package. With `cluster.replicas` = 1 it is Hydra's basic launcher; with more,
the sweep's points run side by side on replicas of their model groups (`speculab.launcher`)."""

from __future__ import annotations

from collections.abc import Sequence

from hydra._internal.core_plugins.basic_launcher import BasicLauncher
from hydra.core.utils import JobReturn


class ReplicaLauncher(BasicLauncher):
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from speculab.launcher import launch_side_by_side, replica_count

        if not job_overrides or (replicas := replica_count(job_overrides)) == 1:
            return super().launch(job_overrides, initial_job_idx)
        assert self.hydra_context is not None and self.task_function is not None and self.config is not None
        return launch_side_by_side(
            self.hydra_context, self.task_function, self.config, job_overrides, initial_job_idx, replicas
        )
