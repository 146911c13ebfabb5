"""What the replica tests compare: a point's tokens decoded alone (inline, in this process) and the tokens
a sweep's point run logged (its `records.jsonl`); and when a sweep's replicas are decoding (their spools)."""

from __future__ import annotations

import json
from pathlib import Path

from mlflow.tracking import MlflowClient

from speculab.config import resolve
from speculab.config.prompts import point_prompts
from speculab.point.experiment import prepare
from support.configs import load


def alone(overrides: list[str]) -> list[list[int]]:
    """What the point of `overrides` decodes alone, inline: its tokens, prompt by prompt."""
    plan = resolve(load([*overrides, "runtime=inline", "tracking=none", "baseline=false"]))
    point = prepare(plan, point_prompts(plan))
    (loop,) = point.loops
    units = [loop.decode_unit("speculative", unit, 0).result for unit in range(point.units)]
    return [list(p.tokens) for result in units for p in result.prompts]


def logged_tokens(client: MlflowClient, run_id: str, scratch: Path) -> list[list[int]]:
    """The tokens a point's run logged, prompt by prompt."""
    folder = scratch / run_id
    folder.mkdir(parents=True, exist_ok=True)
    records = Path(client.download_artifacts(run_id, "records.jsonl", str(folder))).read_text()
    return [json.loads(line)["tokens"] for line in records.splitlines()]


def point_overrides(params: dict[str, str]) -> list[str]:
    """The overrides that tell a sweep's points apart, from a point run's params (algorithm, temperature)."""
    return [f"algorithm={params['algorithm.name']}", f"sampling.temperature={params['sampling.temperature']}"]


def decoding(root: Path) -> dict[str, int]:
    """The replicas ("1 of 2", ...) whose point run is decoding, with the process writing it: it has logged a
    finished prompt and not ended (the spools under `root`)."""
    found = {}
    for spool in root.rglob("spool/*.jsonl"):
        records = []
        for line in spool.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:  # the line being written
                break
        replica = records[0].get("tags", {}).get("speculab.replica") if records else None
        decoded = any(r["op"] == "metrics" and "prompt/generated_tokens" in r["metrics"] for r in records)
        if replica and decoded and records[-1]["op"] != "end":
            found[replica] = records[0]["pid"]
    return found


# The hang guard of a wait for both replicas to decode (`support.waits.awaited`): two replica processes start
# their Ray actors and load the pair first, which took over 180 s on 2 cores loaded to 6; the tests that wait
# for it take `BOTH_DECODING_TIMEOUT_S` (pytest-timeout) for the guard, then a sweep's wind-down
BOTH_DECODING_S = 300
BOTH_DECODING_TIMEOUT_S = 600


def both_decoding(root: Path) -> dict[str, int]:
    """`decoding(root)` once both replicas of a two-replica sweep decode at once, else nothing."""
    found = decoding(root)
    return found if len(found) >= 2 else {}
