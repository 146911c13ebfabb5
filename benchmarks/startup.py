"""How soon the smallest run decodes: the wall time of `speculab` decoding one prompt, and what it imports.

    PYTHONPATH=platform python benchmarks/startup.py [--runs 5] [--against CHECKOUT]

Runs the smallest inline run (`runtime=inline tracking=none dataset.num_prompts=1 baseline=false
baseline_hf=false`) as a `speculab` process in a fresh directory, `--runs` times for each of
`sampling.max_new_tokens=1` (its first token: the run ends once the decode's first token is out, so its
wall time bounds the time to the first token from above) and `=8`, alternating; then once tracked
(`tracking=local`, MLflow's store in the directory) for comparison. Prints each case's median and range
of wall time (process start to exit), and one run's `python -X importtime` split: the cumulative import
time of each heavy package, and whether the untracked run imported MLflow, pandas, matplotlib or Ray.
`--against CHECKOUT` also times the untracked cases of another checkout of speculab (its `platform/`),
each of its runs right after the same run of this one: a before and after in one run, on one load.
Both checkouts' sources are compiled to bytecode first, as pip does on install: where Python writes none
(PYTHONDONTWRITEBYTECODE, set on the project's machines) each run would otherwise compile them again.
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SMALLEST = ["runtime=inline", "tracking=none", "dataset.num_prompts=1", "baseline=false", "baseline_hf=false"]
CASES = {
    "first token (max_new_tokens=1)": [*SMALLEST, "sampling.max_new_tokens=1"],
    "8 tokens (max_new_tokens=8)": [*SMALLEST, "sampling.max_new_tokens=8"],
}
TRACKED_RUN = [*SMALLEST[:1], "tracking=local", *SMALLEST[2:], "sampling.max_new_tokens=8"]
TRACKED = ("8 tokens, tracked (tracking=local)", TRACKED_RUN)
HEAVY = ("torch", "transformers", "hydra", "omegaconf", "rich", "scipy", "mlflow", "pandas", "matplotlib", "ray")
UNTRACKED_LACKS = ("mlflow", "pandas", "matplotlib", "ray")  # of no use to a run tracking nothing, with no actor


def speculab(
    overrides: list[str], where: Path, importtime: bool = False, checkout: Path | None = None
) -> tuple[float, str]:
    """(wall seconds from process start to exit, its stderr) of one `speculab` run in ``where``, of this
    process's speculab or of the one in ``checkout``."""
    command = [sys.executable, *(["-X", "importtime"] if importtime else []), "-m", "speculab.launch.cli", *overrides]
    env = os.environ | ({"PYTHONPATH": str(checkout / "platform")} if checkout else {})
    start = time.perf_counter()
    done = subprocess.run(command, cwd=where, capture_output=True, text=True, check=False, env=env)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"speculab {' '.join(overrides)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return seconds, done.stderr


def compile_sources(platform: Path) -> None:
    """A checkout's `platform/` compiled to bytecode (its `__pycache__`), so that no timed run compiles it."""
    if not compileall.compile_dir(platform, quiet=1):
        raise SystemExit(f"{platform}: does not compile")


def top_level_imports(stderr: str) -> dict[str, float]:
    """Each package's cumulative import seconds (`-X importtime`), where it was first imported."""
    found: dict[str, float] = {}
    for line in stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \|( *)([\w.]+)$", line)
        if match and "." not in match[3] and match[3] not in found:
            found[match[3]] = int(match[1]) / 1e6
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each case, alternating (default 5)")
    parser.add_argument("--against", type=Path, help="another checkout, timed right after each untracked run")
    args = parser.parse_args()
    against = {name: f"{name}, {args.against}" for name in CASES} if args.against else {}
    this = importlib.util.find_spec("speculab")
    if this is None or this.origin is None:
        raise SystemExit("speculab is not importable: run with PYTHONPATH=platform")
    for platform in (Path(this.origin).parents[1], *([args.against / "platform"] if args.against else [])):
        compile_sources(platform)
    walls: dict[str, list[float]] = {name: [] for name in [*CASES, *against.values(), TRACKED[0]]}
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(args.runs):
            for name, overrides in CASES.items():
                walls[name].append(speculab(overrides, Path(scratch))[0])
                if name in against:
                    walls[against[name]].append(speculab(overrides, Path(scratch), checkout=args.against)[0])
        walls[TRACKED[0]].append(speculab(TRACKED[1], Path(scratch))[0])
        _, stderr = speculab(CASES["first token (max_new_tokens=1)"], Path(scratch), importtime=True)
    width = max(map(len, walls))
    print(f"{'case':{width}} {'median s':>9} {'min s':>7} {'max s':>7}  runs")
    for name, seconds in walls.items():
        middle = statistics.median(seconds)
        print(f"{name:{width}} {middle:9.2f} {min(seconds):7.2f} {max(seconds):7.2f}  {len(seconds)}")
    imports = top_level_imports(stderr)
    print("\nimports of the first-token run (cumulative s, python -X importtime):")
    print("  " + ", ".join(f"{name} {imports[name]:.2f}" for name in HEAVY if name in imports))
    present = [name for name in UNTRACKED_LACKS if name in imports]
    print(f"  imported though unused: {', '.join(present) if present else 'none of ' + ', '.join(UNTRACKED_LACKS)}")


if __name__ == "__main__":
    main()
