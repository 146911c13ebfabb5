"""`ConfigError` and the small checks every concern's validation uses: each appends one line naming
the field, its value and what it allows, so that `validate` can report every bad field at once."""

from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """Every invalid field of a config, one per line."""

    @classmethod
    def listing(cls, errors: list[str]) -> ConfigError:
        return cls("invalid config:\n  " + "\n  ".join(errors))


def choice(errors: list[str], key: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        errors.append(f"{key}={value!r}: must be one of {', '.join(allowed)}")


def within(errors: list[str], key: str, value: int, bounds: tuple[int, int]) -> None:
    low, high = bounds
    if not low <= value <= high:
        errors.append(f"{key}={value}: must be an integer >= {low} and <= {high}")
