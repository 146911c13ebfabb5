"""A sweep on a replica per node of a real two-node Ray (`ray.cluster_utils.Cluster`, one CPU a node), and
node B crashed while both replicas decode a point: node B's point runs again on the head's replica and decodes
the same tokens, the lost replica takes no more points, and every point finishes under one parent.
The crash is triggered by the sweep's own progress (both replicas decoding, seen in their spools), not a timer."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from speculab.results.names import mlflow_name
from speculab.tracking.run_page import REPLICA_LOST_TAG
from speculab.tracking.spool import NOTE_TAG
from support.replicas import (
    BOTH_DECODING_S,
    BOTH_DECODING_TIMEOUT_S,
    alone,
    both_decoding,
    logged_tokens,
    point_overrides,
)
from support.two_nodes import FAST_HEALTH, TwoNodes, cluster_of_two
from support.waits import awaited

pytestmark = pytest.mark.slow

POINT = ["dataset.num_prompts=4", "sampling.max_new_tokens=24", "sampling.batch_size=1"]


@pytest.fixture(scope="module")
def nodes() -> Iterator[TwoNodes]:
    """A head and node B of one CPU each: one replica's loop group fits on each, never two on one."""
    yield from cluster_of_two(FAST_HEALTH, head_cpus=1)


@pytest.mark.timeout(BOTH_DECODING_TIMEOUT_S)
def test_a_lost_replicas_point_runs_again_on_another_with_the_same_tokens(nodes: TwoNodes, tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = [
        "-m",
        "algorithm=block,token",
        "sampling.temperature=0,1",
        *POINT,
        "measure.repeats=1",
        "baseline=false",
        "baseline_hf=false",
        "runtime.torch_threads=1",
        "cluster.actor_cpus=1",
        "cluster.replicas=2",
        f"cluster.address={nodes.cluster.address}",
        f"tracking.uri={uri}",
    ]
    command = [sys.executable, "-m", "speculab.launch.cli", *args]
    sweep = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    awaited(partial(both_decoding, tmp_path), "both replicas decoded at once", sweep, BOTH_DECODING_S)
    nodes.crash_b()  # Ray places the two copies, one a node: whichever is on node B is lost
    out, err = sweep.communicate(timeout=240)
    assert sweep.returncode == 0, err[-3000:]
    lost = re.search(r"speculab: replica (\d) lost \(.*lost an actor.*\); .* runs again on another replica", out)
    assert lost is not None, out[-3000:]
    assert "Error executing job" not in err  # the launcher says what happened, not Hydra's failure line
    logs = [log for log in tmp_path.rglob("*.log") if lost[0] in log.read_text()]
    assert len(logs) == 1, "the lost attempt's point log says so"
    on_lost, on_other = f"{lost[1]} of 2", f"{3 - int(lost[1])} of 2"
    assert "sweep on 2 replicas: 4 done · 0 running · 0 queued" in out

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("speculab")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])
    (parent,) = [r for r in runs if r.data.tags["speculab.kind"] == "sweep"]
    points = [r for r in runs if r.data.tags["speculab.kind"] == "point"]
    finished = [p for p in points if p.info.status == "FINISHED"]
    (attempt,) = [p for p in points if p.info.status == "FAILED"]  # the point's run on the lost replica
    assert parent.info.status == "FINISHED" and len(finished) == 4
    assert attempt.data.tags["speculab.replica"] == on_lost and mlflow_name("units_finished") in attempt.data.metrics
    # its page says it was cut short and run again, and the parent's links it
    assert attempt.data.tags[REPLICA_LOST_TAG] == lost[1] and "Decoding" not in attempt.data.tags[NOTE_TAG]
    assert attempt.data.tags[NOTE_TAG].startswith(f"**Replica {lost[1]} lost**: ")
    said = parent.data.tags[NOTE_TAG]
    assert "1 attempt(s) cut short by a lost replica" in said and f"/runs/{attempt.info.run_id}" in said, said
    (moved,) = [p for p in finished if p.data.params == attempt.data.params and p is not attempt]
    assert moved.data.tags["speculab.replica"] == on_other
    after = [p for p in finished if p.info.start_time > attempt.info.start_time]
    assert all(p.data.tags["speculab.replica"] == on_other for p in after)  # the lost replica took no more points
    for p in finished:
        point = point_overrides(p.data.params)
        assert logged_tokens(client, p.info.run_id, tmp_path) == alone([*point, *POINT]), point
