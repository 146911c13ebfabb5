"""`-m/--multirun` wherever the user puts it: the pure move, and the `speculab` command through Hydra."""

from __future__ import annotations

from pathlib import Path

import pytest

from speculab.launch.cli_args import multirun_first
from support.cli import speculab


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["algorithm=gbv", "-m", "algorithm.K=1,2"], ["--multirun", "algorithm=gbv", "algorithm.K=1,2"]),
        (["a=1", "--multirun"], ["--multirun", "a=1"]),
        (["-m", "a=1,2"], ["--multirun", "a=1,2"]),
        (["a=1", "--cfg", "job"], ["a=1", "--cfg", "job"]),  # no -m: untouched
        (["a=-m", "b=1"], ["a=-m", "b=1"]),  # a value that merely contains -m is no flag
    ],
)
def test_multirun_flag_is_moved_to_the_front(args: list[str], expected: list[str]) -> None:
    assert multirun_first(args) == expected


def test_speculab_takes_m_after_an_override(tmp_path: Path) -> None:
    # An unknown key stops the sweep before any point runs: quick, and proof that Hydra parsed `-m`
    # (the whole-sweep check names both points).
    done = speculab(["tracking=none", "algorithm=gbv", "-m", "algorithm.K=1,2", "+foo=1"], tmp_path)
    assert "unrecognized arguments" not in done.stderr
    assert "point 1 of 2 (algorithm.K=1): foo: unknown key" in done.stderr and "point 2 of 2" in done.stderr
    assert done.returncode == 2
