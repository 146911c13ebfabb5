"""The `speculab` command: Hydra composes conf/ over the structured schema, then `run`."""

from __future__ import annotations

import sys

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from speculab.config import PROJECT_ROOT, Config, ConfigError
from speculab.experiment import run

ConfigStore.instance().store(name="config_schema", node=Config)


@hydra.main(version_base="1.3", config_path=str(PROJECT_ROOT / "conf"), config_name="config")
def main(cfg: DictConfig) -> None:
    try:
        run(OmegaConf.to_object(cfg))
    except ConfigError as err:
        print(f"speculab: {err}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
