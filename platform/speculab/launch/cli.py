"""The `speculab` command: Hydra composes conf/ over the structured schema, then `run`.

`main` wraps Hydra's entry point so that no tracked run is left RUNNING: SIGTERM becomes
Ctrl-C, and an interrupt or an error ends every run still open (a sweep's parent) KILLED or
FAILED. Finished points are already recorded by then. Python swallows an exception raised
while a finaliser or weakref callback runs, so an interrupt is also remembered and raised
again at the next point boundary.
"""

from __future__ import annotations

import atexit
import gc
import os
import signal
import sys
import traceback
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, cast

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from speculab.config import PROJECT_ROOT, Config, ConfigError, override_errors, unknown_keys
from speculab.launch.cli_args import multirun_first
from speculab.process import interrupts, jobs
from speculab.process.jobs import ReplicaLost

if TYPE_CHECKING:
    from speculab.config import RunPlan
    from speculab.point.experiment import PointOutcome
    from speculab.results.point import FailedPoint

# What runs a point (torch, transformers, Ray, MLflow: seconds to import) is imported where it is
# used, so that `--help` and a refused key answer at once.
CONF = PROJECT_ROOT / "conf"
PLAN_FLAG = "--plan"  # print the run's plan and stop (`show_plan`)


def sweep_id() -> str:
    """conf/config.yaml's `${sweep_id:}` (hydra.sweep.dir): this process's sweep id."""
    from speculab.tracking.runs import sweep_id as process_sweep_id

    return process_sweep_id()


ConfigStore.instance().store(name="config_schema", node=Config)
OmegaConf.register_new_resolver("sweep_id", sweep_id, replace=True)


@hydra.main(version_base="1.3", config_path=str(CONF), config_name="config")
def hydra_main(cfg: DictConfig) -> PointOutcome | FailedPoint:
    """One point; its plan and result are the job's return value (a sweep's parent run summarises them).
    A sweep's point that fails mid-run is FAILED with the units it finished and the sweep goes on."""
    from speculab.config.sweep import PLANS, planned
    from speculab.point.experiment import run
    from speculab.runtime.placement import ClusterError

    interrupts.raise_if_received()
    if unknown := unknown_keys(cfg):  # `+key=...` adds keys the dataclasses would silently drop
        refuse(ConfigError.listing(unknown))
    job = jobs.current()
    # a sweep point's plan, resolved as the sweep started; one run's, by `precheck` before Hydra made its directory
    point = planned(list(job.overrides)) if job.sweeping else None
    try:
        plan = point or PLANS.get(job.overrides)
        if plan is not None and job.replica:  # the replica launcher's copy of the point's groups
            plan = replace(plan, placement=replace(plan.placement, replica=job.replica))
        outcome = run(cast(Config, OmegaConf.to_object(cfg)), plan)  # a structured config converts to its dataclass
    except ConfigError as err:
        if point is None:
            refuse(err)
        return point_failed(point, err)  # what only loading could tell (a Hugging Face dataset's size)
    except ReplicaLost:  # the launcher runs the point again on another replica
        raise
    except ClusterError as err:  # the point is FAILED with what it finished; a traceback would add nothing
        if point is not None:
            return point_failed(point, err)
        print(f"speculab: point failed: {err}", file=sys.stderr)
        close_open_runs("FAILED")
        raise SystemExit(1) from None
    except Exception as err:
        if point is None:  # one run ends here, FAILED, with Python's traceback
            raise
        traceback.print_exc()  # an error speculab did not foresee: its place in the code
        return point_failed(point, err)
    return outcome  # recorded: an interrupt since stops the sweep at its next point (the check above)


def point_failed(plan: RunPlan, err: Exception) -> FailedPoint:
    """A sweep point's failure in one line on stderr, remembered for the exit status; the sweep goes on."""
    from speculab.results.point import FailedPoint, PointShape

    interrupts.raise_if_received()  # an interrupt a library wrapped in its own error is the interrupt
    shape = PointShape.of(plan.cfg)
    reason = " ".join(str(err).split()) or type(err).__name__
    print(f"speculab: point failed: {shape.name}: {reason}; the sweep goes on", file=sys.stderr)
    jobs.FAILED_POINTS.append(shape.name)
    return FailedPoint(shape, f"{type(err).__name__}: {reason}")


def command_problems(args: list[str], planning: bool = False) -> list[str]:
    """What is wrong with a command line (`--multirun` first) before anything composes: an unknown key, the
    overrides' grammar and values (`config.overrides`), a preset off its grid; where it runs does not matter
    (`jobs/submit.py` checks what it is about to send). ``planning``: `--plan`, which shows one point of a
    preset too."""
    from speculab.config.overrides import override_problems, preset_problems

    multirun = args[:1] == ["--multirun"]
    overrides = args[1:] if multirun else args
    groups = sorted(path.name for path in CONF.iterdir() if path.is_dir())
    return (
        override_errors(overrides, groups)
        or override_problems(overrides, multirun)
        or preset_problems(overrides, multirun or planning)
    )


def precheck(args: list[str], planning: bool = False) -> None:
    """The command line refused in speculab's format (one line per problem, exit 2) before Hydra makes a
    run's output directory or prints its own block: the overrides' grammar, a sweep without `-m`, what
    composing them raises (an unknown group option, a value of the wrong type), and for one run its
    whole validation (the plan is kept for the run: `PLANS`); a sweep's points are checked when it starts
    (`config.sweep.sweep_plans`). ``planning``: for `--plan`, which shows one point of a preset too."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from speculab.config import resolve
    from speculab.config.answer import contrast_errors
    from speculab.config.attach import attach_env, attach_errors
    from speculab.config.overrides import composition_problem, with_range
    from speculab.config.prompts import point_prompts
    from speculab.config.replicas import AUTO
    from speculab.config.schema import job_config
    from speculab.config.sweep import PLANS
    from speculab.config.tracking import not_writable

    multirun = args[:1] == ["--multirun"]
    overrides = args[1:] if multirun else args
    if problems := command_problems(args, planning):
        refuse(ConfigError.listing(problems))
    parsed = OverridesParser.create().parse_overrides(overrides)
    fixed = [text for text, o in zip(overrides, parsed, strict=True) if not o.is_sweep_override()]
    try:
        composed = composed_config(fixed)
        key, directory = (
            ("hydra.sweep.dir", composed.hydra.sweep.dir) if multirun else ("hydra.run.dir", composed.hydra.run.dir)
        )
    except Exception as err:
        if (line := composition_problem(err, fixed)) is None:
            raise
        refuse(ConfigError.listing([with_range(line, fixed, composed_config)]))
    os.environ.update(attach_env(composed, os.environ, Path.home()))  # before Ray is imported (it reads it then)
    if (locked := not_writable(Path(directory).absolute())) is not None:
        refuse(
            ConfigError.listing(
                [f"{key}={directory}: {locked} is not writable by this user; run where you can write, or set {key}"]
            )
        )
    if multirun:
        return
    cfg = OmegaConf.masked_copy(composed, [str(k) for k in composed if k != "hydra"])
    if unknown := unknown_keys(cfg):
        refuse(ConfigError.listing(unknown))
    try:
        plan = resolve(job_config(cfg))
    except ConfigError as err:
        refuse(err)
    try:
        point_prompts(plan)  # what only loading the prompts tells (one too long for the context), before Hydra starts
    except (ConfigError, ValueError, RuntimeError) as err:
        refuse(err if isinstance(err, ConfigError) else ConfigError.listing([str(err)]))
    if not planning and (unreachable := attach_errors(plan.cfg)):  # a plan needs no cluster to answer
        refuse(ConfigError.listing(unreachable))
    if (replicas := plan.cfg.cluster.replicas) not in (1, AUTO) and not plan.cfg.cluster.spread:
        one_point = (
            "replicas run a sweep's points side by side (speculab -m ...); a single run has one point (its units "
            "spread over them with cluster.spread=true)"
        )
        refuse(ConfigError.listing([f"cluster.replicas={replicas}: {one_point}"]))
    if lone := contrast_errors(plan.cfg.sweep.contrast, [], sweeping=False):
        refuse(ConfigError.listing(lone))
    PLANS[tuple(o for o in overrides if not o.lstrip("+~").startswith("hydra."))] = plan


def composed_config(overrides: list[str]) -> DictConfig:
    """conf/ composed with `overrides`, Hydra's own keys included (what Hydra raises, raised)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=overrides, return_hydra_config=True)


def only_overrides(args: list[str]) -> bool:
    """Whether the command line is overrides alone (and `-m`): no Hydra flag (`--help`, `--cfg`, ...)."""
    return all(arg == "--multirun" or not arg.startswith("-") for arg in args)


def refuse(err: ConfigError) -> NoReturn:
    """The one way a bad config ends: its lines on stderr, exit status 2 (a usage error)."""
    print(f"speculab: {err}", file=sys.stderr)
    raise SystemExit(2) from None


def close_open_runs(status: str) -> None:
    """End the runs this process left open; none can be where the spool was never imported (`--help`,
    a refused key), and importing it (MLflow) would take seconds."""
    if spool := sys.modules.get("speculab.tracking.spool"):
        spool.close_open_runs(status)


def show_plan(args: list[str]) -> NoReturn:
    """`speculab [key=value ...] --plan`: the run's plan (where each model and the loop run, every figure
    of the memory plan), validated as a run would be, and exit 0; nothing starts and no weight loads."""
    from speculab.config import plan_lines
    from speculab.config.attach import attach_errors
    from speculab.config.sweep import PLANS

    if args[:1] == ["--multirun"] or not only_overrides(args):
        refuse(ConfigError.listing(["--plan: shows one run's plan from key=value overrides; drop -m and other flags"]))
    precheck(args, planning=True)
    (plan,) = PLANS.values()
    print("speculab: plan (nothing started, no weights loaded)")
    for line in plan_lines(plan):
        print(f"  {line}")
    if plan.cfg.runtime.kind == "ray" and plan.cfg.cluster.address:
        unreachable = attach_errors(plan.cfg)
        print(f"  attach  {unreachable[0] + ' (a run here would be refused)' if unreachable else 'the head answers'}")
    raise SystemExit(0)


def main() -> None:
    # The interpreter's exit runs full garbage collections over every object torch and transformers
    # made: about 1 s of a short run's wall time on a 2-core machine. Frozen, they are left to reference
    # counting as the modules are torn down; nothing here relies on a finaliser at exit, which Python
    # does not promise to run for objects still alive then.
    atexit.register(gc.freeze)
    sys.argv[1:] = multirun_first(sys.argv[1:])  # `-m` wherever the user put it
    if PLAN_FLAG in sys.argv[1:]:
        show_plan([arg for arg in sys.argv[1:] if arg != PLAN_FLAG])
    if errors := override_errors(sys.argv[1:], sorted(path.name for path in CONF.iterdir() if path.is_dir())):
        refuse(ConfigError.listing(errors))  # a misspelt key before Hydra's own flags are looked at
    if only_overrides(sys.argv[1:]):
        precheck(sys.argv[1:])
    signal.signal(signal.SIGTERM, interrupts.handler)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where the shell set SIGINT ignored
        signal.signal(signal.SIGINT, interrupts.handler)
    try:
        hydra_main()
    except BaseException as err:
        # An interrupt can land inside a library that wraps what it catches (OmegaConf turns it into
        # its own error while Hydra composes the next point): after a signal, any error is the interrupt.
        if not (isinstance(err, KeyboardInterrupt) or interrupts.RECEIVED):
            close_open_runs("FAILED")
            raise
        close_open_runs("KILLED")
        print(
            "speculab: interrupted; finished points are recorded (rerun with resume=true to do the rest)",
            file=sys.stderr,
        )
        raise SystemExit(130) from None
    if jobs.FAILED_POINTS:  # the sweep went on past them; its parent says which (resume=true retries them)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
