"""Hydra's own refusals of a command line, in speculab's one format: a line per problem naming the field
and what it allows (Hydra prints a block, some of them ending in a traceback, and exits 1).

`override_problems` checks the overrides' grammar and, outside `-m`, that none sweeps; `composition_problem`
turns what Hydra raises while composing (an unknown group option, a value of the wrong type, a group
override without its `+`) into one line.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig
from omegaconf.errors import ValidationError

GRAMMAR = "https://hydra.cc/docs/advanced/override_grammar/basic/"
# What OmegaConf says of a value a field's type refuses ("could not be converted to Integer", "is not a valid
# bool") -> what the field takes
TYPES = {
    "converted to Integer": "an integer",
    "converted to Float": "a number",
    "not a valid bool": "true or false",
    "converted to String": "a string",
}


def override_problems(overrides: list[str], multirun: bool) -> list[str]:
    """A line per override Hydra's grammar refuses, without a key, outside `-m` listing values to sweep
    over (Hydra calls it ambiguous), or with a value its field takes only by conversion (`value_problem`)."""
    parser = OverridesParser.create()
    problems = []
    for override in overrides:
        try:
            (parsed,) = parser.parse_overrides([override])
        except OverrideParseException as err:
            problems.append(f"{override}: not an override Hydra can read ({first_line(err)}; {GRAMMAR})")
            continue
        if not parsed.key_or_group:
            problems.append(f"{override}: an override needs a key (key=value: {GRAMMAR})")
        elif parsed.is_sweep_override() and not multirun:
            problems.append(
                f"{override}: several values sweep only with -m (speculab -m {override}); one list value is "
                f"written {parsed.key_or_group}=[a,b]"
            )
        values = list(parsed.sweep_iterator()) if parsed.is_sweep_override() else [parsed.value()]
        problems += [line for value in values if (line := value_problem(parsed.key_or_group, value))]
    return problems


def field_type(key: str) -> Any:
    """The annotated type of a config key (`model.compile` -> bool), None for a key no dataclass of the
    schema holds (a group, Hydra's own, a misspelling: checked elsewhere)."""
    from speculab.config.schema import Config

    node: Any = Config
    for part in key.lstrip("+~").split("."):
        if not dataclasses.is_dataclass(node):
            return None
        hints = typing.get_type_hints(node)
        if part not in hints:
            return None
        node = hints[part]
    return node


def value_problem(key: str, value: Any) -> str | None:
    """A value that a field would take only by conversion or that no run can use: a bool field given
    anything but true or false (OmegaConf makes `model.compile=2` true), a number field given NaN or an
    infinity (which every range check lets through)."""
    kind = field_type(key)
    if kind is None:
        return None
    numeric = {int, float} & ({*typing.get_args(kind)} | {kind})
    if kind is bool and not isinstance(value, bool):
        return f"{key}={value}: must be true or false"
    if numeric and isinstance(value, float) and not math.isfinite(value):
        return f"{key}={value}: must be a finite number"
    return None


def composition_problem(err: Exception, overrides: list[str]) -> str | None:
    """One line for what Hydra raised composing `overrides`; None for an error that is not Hydra's."""
    cause = err.__cause__
    if isinstance(err, MissingConfigException) and err.options and err.missing_cfg_file:
        group, _, option = err.missing_cfg_file.rpartition("/")
        return f"{group}={option}: no such {group}; allowed: {', '.join(sorted(err.options))}"
    if isinstance(err, ConfigCompositionException) and isinstance(cause, ValidationError) and cause.full_key:
        key = str(cause.full_key)
        wanted = next((words for said, words in TYPES.items() if said in str(cause)), None)
        said = f"must be {wanted}" if wanted else first_line(cause)
        if (value := given_value(key, overrides)) is not None:
            return f"{key}={value}: {said}"
        whole = key.split("[", 1)[0]  # an element of a list: the list as given, and which element
        return f"{whole}={given_value(whole, overrides) or '?'}: {key.rsplit('.', 1)[-1]} {said}"
    if isinstance(err, ConfigCompositionException) and str(err).startswith("Could not override '"):
        group = str(err).split("'")[1]
        given = next((o for o in overrides if o.split("=", 1)[0] == group), group)
        return f"{given}: {group} is not in the defaults; add it with a plus: +{given}"
    if isinstance(err, (ConfigCompositionException, OverrideParseException)):
        return " ".join(str(err).split("\n\n")[0].split())
    return None


def given_value(key: str, overrides: list[str]) -> str | None:
    """The value the command line gave `key`: its last override, the one Hydra applies."""
    values = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].lstrip("+~") == key]
    return values[-1] if values else None


# A value of a field's type below every range validation allows: validating it names that range
OUT_OF_RANGE = {"an integer": "-1000000000000", "a number": "-1e300"}


def with_range(line: str, overrides: list[str], compose: Callable[[list[str]], DictConfig]) -> str:
    """A type refusal (`algorithm.L=x: must be an integer`) completed with the range validation allows the
    field (`an integer >= 1 and <= 128`), found by validating an out-of-range value of that type in its place
    (`compose`: the overrides composed as the refused ones were); the line as it was where validation names
    no range."""
    from speculab.config.checks import validate
    from speculab.config.errors import ConfigError
    from speculab.config.schema import job_config

    given, _, wanted = line.partition(": must be ")
    key = given.split("=", 1)[0]
    if (probe := OUT_OF_RANGE.get(wanted)) is None:
        return line
    others = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != key]
    try:
        validate(job_config(compose([*others, f"{key}={probe}"])))
    except ConfigError as err:
        found = [text.strip() for text in str(err).splitlines() if text.strip().startswith(f"{key}=")]
        if found and ": must be " in found[0]:
            return f"{given}: must be {found[0].split(': must be ', 1)[1]}"
    except Exception:  # the range is a courtesy: the type refusal stands without it
        return line
    return line


def first_line(err: BaseException) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


# how a command line picks a preset (conf/experiment/; without +: refused)
PRESET_KEYS = ("+experiment", "++experiment")


def preset_grid(name: str) -> dict[str, set[str]]:
    """A preset's grid: each key its `hydra.sweeper.params` sweeps and the values it takes (none for an
    unknown preset, which composing refuses)."""
    from omegaconf import OmegaConf

    from speculab.config.checkpoints import PROJECT_ROOT

    path = PROJECT_ROOT / "conf" / "experiment" / f"{name}.yaml"
    if not path.is_file():
        return {}
    params = OmegaConf.select(OmegaConf.load(path), "hydra.sweeper.params") or {}
    return {str(key): {v.strip() for v in str(values).split(",")} for key, values in params.items()}


def preset_problems(overrides: list[str], multirun: bool) -> list[str]:
    """A preset is its paper's grid: it runs under `-m`, one preset a sweep (each files its points under
    its own experiment), and no override takes a key it sweeps outside the grid (a point outside it would
    be filed under the preset's experiment and laid out in the paper's table)."""
    parser = OverridesParser.create()
    parsed = parser.parse_overrides(overrides)
    chosen = [(text, p) for text, p in zip(overrides, parsed) if text.split("=", 1)[0] in PRESET_KEYS]
    if not chosen:
        return []
    text = chosen[0][0]
    names = {str(v) for _, p in chosen for v in (p.sweep_iterator() if p.is_sweep_override() else [p.value()])}
    if not multirun:
        return [f"{text}: a preset sweeps its paper's grid; run it with -m (speculab -m {text})"]
    if len(names) > 1:
        return [
            f"{text}: one preset a sweep (each files its points under its own experiment, the sweep's parent in "
            "one); run them one after the other"
        ]
    grid, problems = preset_grid(names.pop()), []
    for given, override in zip(overrides, parsed):
        key = override.key_or_group.lstrip("+~")
        values = override.sweep_iterator() if override.is_sweep_override() else [override.value()]
        if key in grid and not {str(v) for v in values} <= grid[key]:
            problems.append(
                f"{given}: {text} sweeps {key} over {','.join(sorted(grid[key]))}, its paper's grid; a point outside "
                f"it is not the paper's table: run it without {text} (filed under the experiment speculab)"
            )
    return problems
