"""`dataset.*`: the prompts a point decodes, and their checks (a known dataset, a positive prompt count,
a file that reads as prompts). The check imports `speculab.data` when it runs: the dataclass loads
with `speculab --help`, which needs no dataset."""

from __future__ import annotations

from dataclasses import dataclass

from speculab.config.errors import at_least, choice


@dataclass
class DatasetConfig:
    name: str = "humaneval"
    num_prompts: int | None = 8
    path: str | None = None


def dataset_errors(d: DatasetConfig) -> list[str]:
    """A known dataset, a positive prompt count, and (for a file) a file that reads as prompts."""
    from speculab.data import DATASETS, check_dataset

    errors: list[str] = []
    if d.num_prompts is not None:
        at_least(errors, "dataset.num_prompts", d.num_prompts, 1)
    if d.name not in DATASETS:
        choice(errors, "dataset.name", d.name, DATASETS)
        return errors
    try:
        check_dataset(d.name, d.path)
    except (ValueError, RuntimeError) as err:
        errors.append(str(err))
    return errors
