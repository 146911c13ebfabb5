"""A Hydra callback that writes down the job it starts in: its working directory, the variable
`hydra.job.env_set` sets, the job's number and output directory from `HydraConfig` (what the replica
test compares between `cluster.replicas=1` and `=2`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

PROBE_FILE = "job_probe.json"
PROBE_VARIABLE = "SPECULAB_PROBE"


class JobProbe(Callback):
    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        hydra = HydraConfig.get()
        seen = {
            "cwd": os.getcwd(),
            "env": os.environ.get(PROBE_VARIABLE),
            "num": hydra.job.num,
            "output_dir": hydra.runtime.output_dir,
        }
        Path(hydra.runtime.output_dir, PROBE_FILE).write_text(json.dumps(seen))
