"""Command-line fix-ups shared by `speculab` and `jobs/submit.py`, kept free of heavy imports.

Hydra's parser takes `-m/--multirun` only before the overrides (`speculab algorithm=gbv -m
algorithm.K=1,2` stops with "unrecognized arguments"): its overrides are one positional list,
which argparse fills once. `-m` takes no value, so moving it to the front changes nothing else.
"""

from __future__ import annotations

MULTIRUN_FLAGS = ("-m", "--multirun")


def multirun_first(args: list[str]) -> list[str]:
    """``args`` with every `-m`/`--multirun` moved to the front (once), the rest in order."""
    rest = [arg for arg in args if arg not in MULTIRUN_FLAGS]
    return ["--multirun", *rest] if len(rest) < len(args) else rest
