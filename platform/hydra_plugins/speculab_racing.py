"""speculab's racing sweeper (`hydra/sweeper=race`; `hydra.sweeper.stages`, the prompts decoded by the
end of each stage, [12, 32] by default): the sweep's points decode the first stage's prompts, the points
it rules out as the fastest stop, the rest decode the next stage's fresh prompts, and the sweep's answer
is decided on the points left, over every stage's prompts (`speculab.launch.racing`, `speculab.results.race`).
Hydra finds sweepers in the `hydra_plugins` namespace package; the sweep's points are expanded as its
basic sweeper expands them (the preset's `hydra.sweeper.params`, then the command line), and launched by
the sweep's launcher (`hydra/launcher: speculab`), replicas included."""

# No `from __future__ import annotations`: Hydra imports this module in its plugin scan before it is in
# sys.modules, where a dataclass cannot resolve string annotations; OmegaConf reads RaceConf's types as written.
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List  # noqa: UP035 (OmegaConf's structured configs read typing's)

from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf


@dataclass
class RaceConf:
    _target_: str = "hydra_plugins.speculab_racing.RacingSweeper"
    stages: List[int] = field(default_factory=lambda: [12, 32])  # noqa: UP006
    params: Dict[str, str] | None = None  # noqa: UP006 (a preset's sweep, as Hydra's basic sweeper takes it)


ConfigStore.instance().store(group="hydra/sweeper", name="race", node=RaceConf, provider="speculab")


class RacingSweeper(Sweeper):
    def __init__(self, stages: list[int], params: dict[str, str] | None = None) -> None:
        super().__init__()
        self.stages = list(stages)
        self.config: DictConfig | None = None
        self.launcher: Launcher | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> Any:
        """Every stage's jobs, through the launcher; the stages were checked, and every point of every stage
        resolved, when the sweep started (`speculab.config.sweep.sweep_plans`)."""
        from speculab.config.sweep import sweep_points
        from speculab.launch.racing import race

        assert self.config is not None and self.launcher is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        return race(self.launcher, self.config, sweep_points(self.config), self.stages)
