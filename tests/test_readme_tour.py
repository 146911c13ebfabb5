"""The README tour's DFlash commands, run as printed at short settings: what the README says of them
holds in direction (the DFlash chain accepts more than the context-only drafter's chain at T = 0,
and a DDTree tree more than the chain). The figures themselves are for the default settings."""

from __future__ import annotations

import shlex

from speculab.config import PROJECT_ROOT
from speculab.point import experiment
from speculab.tracking.tracker import NoopTracker
from support.configs import plan_and_shape

SHORT = ["runtime=inline", "dataset.num_prompts=2", "sampling.max_new_tokens=16", "measure.repeats=1"]
UNTIMED = ["tracking=none", "baseline=false", "baseline_hf=false"]  # the direction needs no speed figure


def tour_commands(marker: str) -> list[list[str]]:
    """The overrides of every README command line that starts with `marker`, comments dropped."""
    lines = (PROJECT_ROOT / "README.md").read_text().splitlines()
    return [shlex.split(line, comments=True)[1:] for line in lines if line.startswith(marker)]


def block_efficiency(overrides: list[str]) -> float:
    result = experiment.decode_point(*plan_and_shape([*overrides, *SHORT, *UNTIMED]), NoopTracker())
    return result.figures["block_efficiency"].value


def test_the_dflash_tour_prints_what_the_readme_says_in_direction() -> None:
    tree, chain, parallel = tour_commands(".venv/bin/speculab model=tiny-pycode_dflash")
    assert "sampling.temperature=0" in tree and "algorithm.tree=chain" in chain and "drafter=parallel" in parallel
    figures = [block_efficiency(command) for command in (tree, chain, parallel)]
    assert figures[0] >= figures[1] > figures[2] > 1, figures  # tree, DFlash chain, parallel chain
