"""The `speculab` command: Hydra composes conf/ over the structured schema, then `run`.

`main` wraps Hydra's entry point so that no tracked run is left RUNNING: SIGTERM becomes
Ctrl-C, and an interrupt or an error ends every run still open (a sweep's parent) KILLED or
FAILED. Finished points are already recorded by then. Python swallows an exception raised
while a finaliser or weakref callback runs, so an interrupt is also remembered and raised
again at the next point boundary.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType
from typing import cast

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from speculab.cli_args import multirun_first
from speculab.config import PROJECT_ROOT, Config, ConfigError, unknown_keys
from speculab.experiment import PointOutcome, run
from speculab.runtime.placement import ClusterError
from speculab.tracking.runs import sweep_id
from speculab.tracking.spool import close_open_runs

ConfigStore.instance().store(name="config_schema", node=Config)
OmegaConf.register_new_resolver("sweep_id", sweep_id, replace=True)  # conf/config.yaml's hydra.sweep.dir


@hydra.main(version_base="1.3", config_path=str(PROJECT_ROOT / "conf"), config_name="config")
def hydra_main(cfg: DictConfig) -> PointOutcome:
    """One point; its plan and metrics are the job's return value (a sweep's parent run summarises them)."""
    raise_if_interrupted()
    try:
        if unknown := unknown_keys(cfg):  # `+key=...` adds keys the dataclasses would silently drop
            raise ConfigError.listing(unknown)
        outcome = run(cast(Config, OmegaConf.to_object(cfg)))  # a structured config converts to its dataclass
    except ConfigError as err:
        print(f"speculab: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except ClusterError as err:  # the point is FAILED with what it finished; a traceback would add nothing
        print(f"speculab: point failed: {err}", file=sys.stderr)
        close_open_runs("FAILED")
        raise SystemExit(1) from None
    raise_if_interrupted()  # this point is recorded; the sweep stops before the next
    return outcome


INTERRUPTS: list[int] = []  # signals received by this process


def raise_if_interrupted() -> None:
    """Raise an interrupt that was swallowed where it landed (a finaliser, a weakref callback)."""
    if INTERRUPTS:
        raise KeyboardInterrupt(f"signal {INTERRUPTS[0]}")


def interrupt(signum: int, frame: FrameType | None) -> None:
    INTERRUPTS.append(signum)
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> None:
    sys.argv[1:] = multirun_first(sys.argv[1:])  # `-m` wherever the user put it
    signal.signal(signal.SIGTERM, interrupt)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where the shell set SIGINT ignored
        signal.signal(signal.SIGINT, interrupt)
    try:
        hydra_main()
    except BaseException as err:
        # An interrupt can land inside a library that wraps what it catches (OmegaConf turns it into
        # its own error while Hydra composes the next point): after a signal, any error is the interrupt.
        if not (isinstance(err, KeyboardInterrupt) or INTERRUPTS):
            close_open_runs("FAILED")
            raise
        close_open_runs("KILLED")
        print(
            "speculab: interrupted; finished points are recorded (rerun with resume=true to do the rest)",
            file=sys.stderr,
        )
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
