"""A sweep on one copy of its model groups against the same sweep on N copies side by side.

    PYTHONPATH=platform python benchmarks/replicas.py [--replicas 2] [--runs 1] [-- extra overrides]

Runs the 8-point sweep of issue 50 (block and token, L = 2 and 4, T = 0 and 1, 16 HumanEval prompts x 64
tokens, one timed repetition, the engine's autoregressive baseline, on the embedded Ray cluster) as
`speculab -m ...` processes, `cluster.replicas=1` and `cluster.replicas=N` in turn (alternating
over `--runs`), each in a fresh directory with its own MLflow store. Prints each launch's wall time
(process start to exit, Ray's start and the models' loads included) with its timeline (Ray's start,
each point's end and the parent's summary, in seconds from the launch: where the time goes), the ratio
of the medians, and whether every point decoded the same tokens in both (its `records.jsonl`, point by
point).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"  # a bar per downloaded records.jsonl otherwise

from mlflow.tracking import MlflowClient

SWEEP = [
    "-m",
    "algorithm=block,token",
    "algorithm.L=2,4",
    "sampling.temperature=0,1",
    "dataset.num_prompts=16",
    "sampling.max_new_tokens=64",
    "measure.repeats=1",
    "baseline_hf=false",
    "runtime=ray",
]


# What the sweep's console says as it goes, for where its time goes: Ray's start, each point's end, the end
MILESTONES = {"Started a local Ray instance": "Ray started", "speculab: sweep summary": "the parent's summary"}
POINT_END = re.compile(r"speculab: (?P<point>.+?): done in (?P<seconds>[\d.]+) s on replica (?P<replica>\d+)")
SERIAL_END = re.compile(r"speculab: MLflow run: ")  # one a point, as a serial sweep's point ends


def launch(replicas: int, extra: list[str], where: Path) -> tuple[float, list[str]]:
    """One sweep in `where` (its store `where/mlflow.db`): its wall seconds and its timeline (seconds from the
    launch to Ray's start, each point's end, the parent's summary)."""
    where.mkdir(parents=True)
    args = [*SWEEP, *extra, f"cluster.replicas={replicas}", f"tracking.uri=sqlite:///{where / 'mlflow.db'}"]
    start = time.perf_counter()
    sweep = subprocess.Popen(
        [sys.executable, "-m", "speculab.launch.cli", *args],
        cwd=where,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert sweep.stdout is not None
    said, timeline, ended = [], [], 0
    for line in sweep.stdout:
        said.append(line)
        at = time.perf_counter() - start
        if point := POINT_END.search(line):
            timeline.append(f"{at:6.1f} s  {point['point']} done on replica {point['replica']} ({point['seconds']} s)")
        elif replicas == 1 and SERIAL_END.search(line):
            ended += 1
            timeline.append(f"{at:6.1f} s  point {ended} done")
        else:
            timeline += [f"{at:6.1f} s  {what}" for key, what in MILESTONES.items() if key in line]
    wall = time.perf_counter() - start
    if sweep.wait() != 0:
        sys.exit(f"replicas={replicas} failed:\n{''.join(said)[-3000:]}")
    return wall, [*timeline, f"{wall:6.1f} s  exit"]


def tokens(where: Path) -> dict[tuple[str, ...], list[list[int]]]:
    """Every point's tokens, prompt by prompt, by (algorithm, L, T)."""
    client = MlflowClient(f"sqlite:///{where / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("speculab")
    assert experiment is not None
    found = {}
    for run in client.search_runs([experiment.experiment_id], "tags.`speculab.kind` = 'point'"):
        p = run.data.params
        local = client.download_artifacts(run.info.run_id, "records.jsonl", str(where))
        key = (p["algorithm.name"], p["algorithm.L"], p["sampling.temperature"])
        found[key] = [json.loads(line)["tokens"] for line in Path(local).read_text().splitlines()]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--runs", type=int, default=1, help="launches of each, alternating")
    parser.add_argument("extra", nargs="*", help="more overrides for both sweeps")
    args = parser.parse_args()
    walls: dict[int, list[float]] = {1: [], args.replicas: []}
    with tempfile.TemporaryDirectory() as scratch:
        for run in range(args.runs):
            for replicas in (1, args.replicas) if run % 2 == 0 else (args.replicas, 1):
                where = Path(scratch) / f"r{replicas}-{run}"
                wall, timeline = launch(replicas, args.extra, where)
                walls[replicas].append(wall)
                print(f"replicas={replicas} run {run + 1}: {wall:.1f} s", *timeline, sep="\n  ", flush=True)
        one, many = tokens(Path(scratch) / "r1-0"), tokens(Path(scratch) / f"r{args.replicas}-0")
    same = sorted(one) == sorted(many) and all(one[k] == many[k] for k in one)
    serial, side = statistics.median(walls[1]), statistics.median(walls[args.replicas])
    count = sum(len(t) for point in one.values() for t in point)
    print(f"serial {serial:.1f} s, {args.replicas} replicas {side:.1f} s: {side / serial:.3f}x the serial wall time")
    print(f"tokens: {'equal' if same else 'DIFFERENT'} at all {len(one)} points ({count} tokens compared)")


if __name__ == "__main__":
    main()
