"""A sweep's points, resolved before any of them starts.

`sweep_plans` expands the sweep as Hydra's basic sweeper does (the preset's `hydra.sweeper.params`,
then the command line; a later value of a key replaces an earlier one; the cartesian product of the
lists, in order), composes and resolves every point, and returns what is wrong with any of them, so
the whole sweep is refused before a run exists. Each point's job then takes its plan (`planned`)
rather than resolving its config a second time.
"""

from __future__ import annotations

import itertools

from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from omegaconf import DictConfig

from speculab.config import ConfigError, RunPlan, resolve, unknown_keys
from speculab.config.answer import contrast_errors, race_errors, stage_bounds, stage_jobs
from speculab.config.attach import attach_errors
from speculab.config.overrides import composition_problem, with_range
from speculab.config.replicas import sweep_wide_errors
from speculab.config.schema import job_config
from speculab.stats import MIN_CLUSTERS

# This process's points, resolved before they run, by their overrides (Hydra's `overrides.task`): a job
# gets only its composed config from Hydra, so this is how it finds its plan. Filled by the sweep's
# callback when it starts (a single run's by `speculab.launch.cli.precheck`), emptied when the sweep ends;
# written before any point starts and only read while they run, so replica threads share it safely.
PLANS: dict[tuple[str, ...], RunPlan] = {}


def planned(overrides: list[str]) -> RunPlan:
    """The plan of this process's point with these overrides."""
    try:
        return PLANS[tuple(overrides)]
    except KeyError:
        raise RuntimeError(
            f"sweep point {' '.join(overrides)!r} was not resolved when its sweep started: is "
            "speculab.tracking.callbacks.MlflowSweepCallback among hydra.callbacks?"
        ) from None


def choices(override: Override) -> list[str]:
    """The `key=value` overrides one override stands for: each value of a sweep, else itself."""
    key = override.get_key_element()
    if not override.is_sweep_override():
        return [f"{key}={override.get_value_element_as_str()}"]
    if not override.is_discrete_sweep():
        raise ConfigError.listing([f"{override.input_line}: a sweep over an interval needs a sweeper that samples it"])
    return [f"{key}={value}" for value in override.sweep_string_iterator()]


def sweep_points(config: DictConfig) -> list[list[str]]:
    """Every point's overrides, in launch order: the preset's `hydra.sweeper.params`, then the command
    line (a later value of a key replaces an earlier one), as the cartesian product of their lists."""
    params = config.hydra.sweeper.get("params") or {}
    arguments = [f"{key}={value}" for key, value in params.items()] + list(config.hydra.overrides.task)
    by_key = {o.get_key_element(): choices(o) for o in OverridesParser.create().parse_overrides(arguments)}
    return [list(job) for job in itertools.product(*by_key.values())]


def values(points: list[list[str]], key: str) -> set[str]:
    """The values ``key`` takes over the points' overrides."""
    return {o.split("=", 1)[1] for job in points for o in job if o.split("=", 1)[0] == key}


def varied_keys(points: list[list[str]]) -> list[str]:
    """The keys (or groups) that take two values or more over the points' overrides, in their order."""
    keys = [o.split("=", 1)[0] for o in points[0]] if points else []
    return [key for key in keys if len(values(points, key)) > 1]


def race_stages(config: DictConfig) -> list[int] | None:
    """A racing sweep's stages (`hydra/sweeper=race`); None for any other sweeper."""
    sweeper = config.hydra.sweeper
    return list(sweeper.stages) if str(sweeper.get("_target_", "")).endswith(".RacingSweeper") else None


def dataset_held(name: str, path: str | None) -> int | None:
    """How many prompts the sweep's dataset holds, where that is known before it loads; None otherwise, and
    for a dataset that is not one (its points' checks say so)."""
    from speculab.data import check_dataset

    try:
        return check_dataset(name, path)
    except (ValueError, RuntimeError):
        return None


def sweep_plans(config: DictConfig) -> tuple[list[RunPlan], list[str]]:
    """(each valid point's plan, in launch order, kept in `PLANS`; what `resolve` and the unknown-key
    check say of the invalid ones, each line prefixed by its point)."""
    loader = GlobalHydra.instance().config_loader()
    points = sweep_points(config)
    varied = varied_keys(points)
    wide = contrast_errors(config.sweep.contrast, varied, True)
    if (stages := race_stages(config)) is not None:  # a race's points: each at each of its stages
        held = dataset_held(config.dataset.name, config.dataset.path)
        wide = race_errors(stages, list(config.hydra.overrides.task), config.sweep.contrast, MIN_CLUSTERS, held)
        if wide:
            return [], wide
        points = [job for start, stop in stage_bounds(stages) for job in stage_jobs(points, start, stop, stages[-1])]
    plans: list[RunPlan] = []
    errors: list[str] = []
    first: dict[str, str] = {}  # a resolved point's config -> the first point that resolved to it
    for number, overrides in enumerate(points, start=1):
        label = " ".join(o for o in overrides if o.split("=", 1)[0] in varied)
        try:
            job = loader.load_sweep_config(config, overrides)
        except Exception as err:  # Hydra's: an unknown group option, a value of the wrong type
            if (line := composition_problem(err, overrides)) is None:
                raise
            line = with_range(line, overrides, lambda changed: loader.load_sweep_config(config, changed))
            errors.append(f"point {number} of {len(points)} ({label}): {line}")
            continue
        try:
            if unknown := unknown_keys(job):
                raise ConfigError.listing(unknown)
            plans.append(resolve(job_config(job)))
            PLANS[tuple(overrides)] = plans[-1]
            if (earlier := first.setdefault(repr(plans[-1].cfg), label)) != label:
                errors.append(
                    f"point {number} of {len(points)} ({label}): the same point as {earlier} (the values differ as "
                    "written, not as read); sweep each value once"
                )
        except ConfigError as err:
            lines = str(err).splitlines()[1:]  # after "invalid config:"
            errors += [f"point {number} of {len(points)} ({label}): {line.strip()}" for line in lines]
    wide += sweep_wide_errors([plan.cfg for plan in plans])
    attach = attach_errors(plans[0].cfg) if plans and not wide and not errors else []  # one address a sweep
    return plans, [*wide, *attach, *errors]
