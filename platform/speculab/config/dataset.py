"""`dataset.*`: the prompts a point decodes (`num_prompts` of them, a random sample drawn with
`sample_seed`, or the first ones where it is null), and their checks (a known dataset, a positive
prompt count no larger than the dataset holds, a seed that is an integer >= 0 or null, a file that
reads as prompts). The check imports `speculab.data` when
it runs: the dataclass loads with `speculab --help`, which needs no dataset."""

from __future__ import annotations

from dataclasses import dataclass

from speculab.config.errors import choice
from speculab.config.sampling import SEED_LIMIT

PROMPTS_RANGE = (1, 1_000_000)  # dataset.num_prompts (null: every prompt the dataset holds)


@dataclass
class DatasetConfig:
    name: str = "humaneval"
    num_prompts: int | None = 12  # the fewest prompts a figure's interval and a verdict need (stats.MIN_CLUSTERS)
    path: str | None = None
    sample_seed: int | None = 0  # the prompts are a random sample drawn with it; null: the first num_prompts
    slice: list[int] | None = None  # [start, stop]: those positions of the sample alone (a racing sweep's stages)


def dataset_errors(d: DatasetConfig) -> list[str]:
    """A known dataset, a positive prompt count no larger than the dataset holds (where that is known
    without a download), and (for a file) a file that reads as prompts."""
    from speculab.data import DATASETS, check_dataset

    errors: list[str] = []
    low, high = PROMPTS_RANGE
    if d.num_prompts is not None and not low <= d.num_prompts <= high:
        errors.append(
            f"dataset.num_prompts={d.num_prompts}: must be an integer >= {low} and <= {high}, or null (every prompt)"
        )
    if d.sample_seed is not None and (isinstance(d.sample_seed, bool) or not 0 <= d.sample_seed < SEED_LIMIT):
        errors.append(
            f"dataset.sample_seed={d.sample_seed!r}: must be an integer in [0, {SEED_LIMIT}) (a random sample of "
            "the prompts) or null (the first dataset.num_prompts)"
        )
    if d.name not in DATASETS:
        choice(errors, "dataset.name", d.name, DATASETS)
        return errors + slice_errors(d, None)
    try:
        held = check_dataset(d.name, d.path)
    except (ValueError, RuntimeError) as err:
        errors.append(str(err))
        return errors + slice_errors(d, None)
    if held is not None and d.num_prompts is not None and d.num_prompts > held:
        errors.append(too_many_prompts(d, held))
    return errors + slice_errors(d, held)


def source(d: DatasetConfig) -> str:
    """The prompts' source as a user named it."""
    return f"dataset.path={d.path!r}" if d.name == "jsonl" else d.name


def too_many_prompts(d: DatasetConfig, held: int) -> str:
    """The line refusing `dataset.num_prompts` beyond the `held` prompts: the run would decode fewer
    prompts than its name and records say."""
    count = f"{held} prompt" if held == 1 else f"{held} prompts"
    return (
        f"dataset.num_prompts={d.num_prompts}: {source(d)} holds {count}; "
        f"must be an integer >= 1 and <= {held}, or null (every prompt)"
    )


def slice_errors(d: DatasetConfig, held: int | None) -> list[str]:
    """`dataset.slice` is null or [start, stop] with 0 <= start < stop <= the sample's size: dataset.num_prompts,
    or the `held` prompts of the whole dataset where that is null (None: not known before it loads)."""
    if d.slice is None:
        return []
    bounds = list(d.slice)
    top = d.num_prompts if d.num_prompts is not None else held
    if len(bounds) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in bounds):
        start, stop = bounds
        if 0 <= start < stop and (top is None or stop <= top):
            return []
    if d.num_prompts is not None:
        within = f"<= dataset.num_prompts={d.num_prompts}"
    else:
        within = f"<= {held}, the prompts {source(d)} holds" if held is not None else f"within what {source(d)} holds"
    return [f"dataset.slice={bounds}: must be [start, stop] with 0 <= start < stop {within}, or null"]
