"""The `speculab` command: Hydra composes conf/ over the structured schema, then `run`.

`main` wraps Hydra's entry point so that no tracked run is left RUNNING: SIGTERM becomes
Ctrl-C, and an interrupt or an error ends every run still open (a sweep's parent) KILLED or
FAILED. Finished points are already recorded by then.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType
from typing import cast

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from speculab.config import PROJECT_ROOT, Config, ConfigError, unknown_keys
from speculab.experiment import run
from speculab.tracking.spool import close_open_runs

ConfigStore.instance().store(name="config_schema", node=Config)


@hydra.main(version_base="1.3", config_path=str(PROJECT_ROOT / "conf"), config_name="config")
def hydra_main(cfg: DictConfig) -> dict[str, float]:
    """One point; its metrics are the job's return value (a sweep's parent run summarises them)."""
    try:
        if unknown := unknown_keys(cfg):  # `+key=...` adds keys the dataclasses would silently drop
            raise ConfigError.listing(unknown)
        return run(cast(Config, OmegaConf.to_object(cfg)))  # a structured config converts to its dataclass
    except ConfigError as err:
        print(f"speculab: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> None:
    signal.signal(signal.SIGTERM, interrupt)
    try:
        hydra_main()
    except KeyboardInterrupt:
        close_open_runs("KILLED")
        print(
            "speculab: interrupted; finished points are recorded (rerun with resume=true to do the rest)",
            file=sys.stderr,
        )
        raise SystemExit(130) from None
    except BaseException:
        close_open_runs("FAILED")
        raise


if __name__ == "__main__":
    main()
