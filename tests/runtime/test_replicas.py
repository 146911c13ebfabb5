"""`cluster.replicas`: a sweep's points side by side on copies of their model groups (`speculab.launch.launcher`).

Without Ray: how many copies the nodes hold, what a lost replica's group has left, the replica checks
and the board's line. End to end: a 2-point sweep on two replicas of the embedded cluster gives every
point the tokens the point decodes alone, under one parent, each run naming its replica."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from speculab.config import ConfigError, resolve
from speculab.config.prompts import point_prompts
from speculab.config.replicas import asked
from speculab.core.records import concat_runs
from speculab.models import LMSpec
from speculab.point.decoders import Decoders
from speculab.point.experiment import SPREAD_TAG, measure_point, prepare
from speculab.results.names import mlflow_name
from speculab.results.point import PointShape
from speculab.runtime import loop_groups
from speculab.runtime.groups import group_name
from speculab.runtime.nodes import Node, copies, without
from speculab.show.board import Tally
from speculab.tracking.tracker import NoopTracker
from support.cli import speculab
from support.configs import load
from support.job_probe import PROBE_FILE, PROBE_VARIABLE
from support.replicas import (
    BOTH_DECODING_S,
    BOTH_DECODING_TIMEOUT_S,
    alone,
    both_decoding,
    logged_tokens,
    point_overrides,
)
from support.waits import awaited

HEAD = Node("h0123456789", "10.0.0.1", True, {"CPU": 4.0, "GPU": 2.0})
B = Node("b0123456789", "10.0.0.2", True, {"CPU": 2.0})
LOOP = [[{"CPU": 1.0}]]  # a point's groups with the loop on rank 0: one group of one bundle


def test_copies_count_the_groups_each_node_holds_at_once() -> None:
    assert copies(LOOP, [HEAD, B], most=16) == 6
    assert copies(LOOP, [HEAD, B], most=3) == 3  # never more than the sweep's points
    tp2_gpu = [[{"CPU": 1.0, "GPU": 1.0}, {"CPU": 1.0, "GPU": 1.0}]]  # STRICT_PACK: both ranks on one node
    assert copies(tp2_gpu, [HEAD, B], most=16) == 1
    driver_loop = [[{"CPU": 2.0}], [{"CPU": 1.0}]]  # target group and draft actor: a copy is both
    assert copies(driver_loop, [HEAD, B], most=16) == 2
    assert copies(LOOP, [Node("d", "10.0.0.3", False, {"CPU": 8.0})], most=4) == 0  # a dead node holds nothing


def test_what_other_replicas_hold_is_not_there_for_a_lost_replicas_group() -> None:
    left = without([HEAD, B], {"h0123456789": {"CPU": 3.0, "GPU": 2.0}})
    assert left[0].resources == {"CPU": 1.0, "GPU": 0.0} and left[1].resources == B.resources


def test_each_replica_has_groups_of_its_own_name() -> None:
    spec = LMSpec("hf", "tiny")
    names = {group_name("target", spec, [{"CPU": 1.0}], replica) for replica in (0, 1, 2)}
    assert len(names) == 3


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        (["cluster.replicas=0"], "cluster.replicas=0: must be an integer >= 1 and <= 1024, or auto"),
        (["cluster.replicas=many"], "cluster.replicas=many: must be an integer >= 1 and <= 1024, or auto"),
        (["cluster.replicas=2", "runtime=inline"], "cluster.replicas=2: replicas are copies of a point's Ray groups"),
        (["cluster.replicas=2", "runtime.loop=driver"], "with the decode loop in the driver (runtime.loop=driver)"),
        (["cluster.replicas=3", "cluster.num_cpus=2"], "cluster.replicas=3: the local Ray cluster has 2 CPUs"),
        (  # a copy drafting ahead is its loop group and its draft actor: two actors
            ["cluster.replicas=2", "cluster.num_cpus=3", "cluster.draft_placement=own", "drafter.ahead=ssd"],
            "2 copies of the point's 2 model actor(s) need 4",
        ),
        (["cluster.spread=true"], "cluster.spread=true: spreads a point's units over replicas; set cluster.replicas"),
    ],
)
def test_replicas_that_cannot_run_are_refused_naming_the_field(overrides: list[str], line: str) -> None:
    with pytest.raises(ConfigError, match=line.replace("(", r"\(").replace(")", r"\)")):
        resolve(load(overrides))


def test_the_replica_count_is_a_positive_integer_or_auto() -> None:
    assert (asked(2), asked("auto")) == (2, None)
    for bad in (0, -1, True, "2", 1.5):
        with pytest.raises(ValueError):
            asked(bad)


def test_the_sweeps_line_counts_points_by_state() -> None:
    tally = Tally(total=8, done=3, failed=1, running=2)
    assert tally.queued == 2
    assert tally.line(2) == "sweep on 2 replicas: 3 done · 1 failed · 2 running · 2 queued"


SWEEP = [
    "-m",
    "algorithm=block,token",
    "sampling.temperature=1",
    "dataset.num_prompts=2",
    "sampling.max_new_tokens=12",
    "measure.repeats=1",
    "baseline_hf=false",
    "runtime=ray",
    "runtime.torch_threads=1",
    "cluster.num_cpus=2",
]


@pytest.mark.slow
def test_a_sweep_on_two_replicas_decodes_every_point_as_it_does_alone(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = speculab([*SWEEP, "cluster.replicas=2", f"tracking.uri={uri}"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "speculab: sweep of 2 points on 2 replicas" in done.stdout
    assert "sweep on 2 replicas: 2 done · 0 running · 0 queued" in done.stdout

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("speculab")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    (parent,) = [r for r in runs if r.data.tags["speculab.kind"] == "sweep"]
    points = [r for r in runs if r.data.tags["speculab.kind"] == "point"]
    assert parent.info.status == "FINISHED" and len(points) == 2
    assert {p.data.tags["mlflow.parentRunId"] for p in points} == {parent.info.run_id}
    assert {p.data.tags["speculab.replica"] for p in points} == {"1 of 2", "2 of 2"}  # both replicas ran points
    assert all(p.data.metrics[mlflow_name("model_loads")] == 1 for p in points)  # each replica loaded its models once
    for p in points:
        point = point_overrides(p.data.params)
        assert logged_tokens(client, p.info.run_id, tmp_path) == alone([*point, *SWEEP[3:6]]), point


class Recorded(NoopTracker):
    """What a point logs: its metrics and tags."""

    records = True

    def __init__(self) -> None:
        self.metrics: dict[str, float] = {}
        self.tags: dict[str, str] = {}

    def log_metrics(self, metrics: dict[str, float], step: int = 0) -> None:
        self.metrics |= metrics

    def set_tags(self, tags: dict[str, str]) -> None:
        self.tags |= tags


@pytest.mark.slow
def test_a_point_spread_over_two_replicas_decodes_as_alone_pooled_over_its_units(ray_pool) -> None:
    """`cluster.spread`: a single run's 3 units dealt to two replicas' loops (units 0 and 2 to one, 1 to
    the other), each prompt's tokens those the point decodes alone, the figures over all 3 units."""
    point = ["dataset.num_prompts=3", "sampling.max_new_tokens=12", "sampling.temperature=1", "measure.repeats=1"]
    plan = resolve(
        load([*point, "runtime=ray", "runtime.torch_threads=1", "cluster.replicas=2", "cluster.spread=true"])
    )
    prepared = prepare(plan, point_prompts(plan))
    assert len(prepared.loops) == 2 and prepared.units == 3
    tracker = Recorded()
    lanes = [Decoders(loop, loop_groups(loop)) for loop in prepared.loops]
    measured = measure_point(plan, PointShape.of(plan.cfg), prepared, tracker, lanes)
    spec = concat_runs(measured.decoders.runs["speculative"])
    assert [list(p.tokens) for p in spec.prompts] == alone(point)
    assert [len(lane.runs["speculative"]) for lane in lanes] == [2, 1]
    assert all(len(unit) == 1 for method in measured.timings.values() for unit in method)  # every unit timed once
    assert tracker.tags[SPREAD_TAG] == "3 units over 2 replicas, figures pooled over units"
    assert measured.runtime["model_loads"] == 2 and " | " in measured.conditions  # one loop a replica, both named


def test_the_replica_count_is_no_part_of_a_points_identity() -> None:
    """`resume=true` finds a point finished on any number of replicas: they change no token."""
    from speculab.tracking.resume import point_id

    ids = {point_id(load(["runtime=ray", f"cluster.replicas={n}"])) for n in (1, 2, "auto")}
    assert len(ids) == 1 and point_id(load(["runtime=ray", "sampling.seed=1"])) not in ids


SAVED = ("config.yaml", "hydra.yaml", "overrides.yaml")  # what Hydra saves in a job's .hydra/


SUMMARY_LINE = "every figure, each explained: summary.txt"  # the last line of a point's table


def job_seen(job_dir: Path, sweep_dir: Path) -> dict[str, object]:
    """What a point's job saw (`support.job_probe`) and saved (`.hydra/`), with the paths made relative to
    its sweep and the replica count taken out."""
    probe = json.loads((job_dir / PROBE_FILE).read_text())
    saved = {name: OmegaConf.load(job_dir / ".hydra" / name) for name in SAVED}
    config, hydra = saved["config.yaml"], saved["hydra.yaml"].hydra
    config.cluster.replicas = None
    return {
        "cwd": str(Path(probe["cwd"]).relative_to(sweep_dir)),
        "env": probe["env"],
        "num": probe["num"],
        "output_dir": str(Path(probe["output_dir"]).relative_to(sweep_dir)),
        "config": OmegaConf.to_yaml(config),
        "overrides": [o for o in saved["overrides.yaml"] if not o.startswith("cluster.replicas=")],
        "job": OmegaConf.to_yaml(OmegaConf.masked_copy(hydra, ["job"])).replace("replicas=2", "replicas=1"),
        "log": SUMMARY_LINE in (job_dir / f"{hydra.job.name}.log").read_text(),  # the point's table
    }


@pytest.mark.slow
def test_a_points_hydra_job_is_the_same_on_two_replicas_as_on_one(tmp_path: Path) -> None:
    """Side by side, each replica runs its points in a process of its own through Hydra's `run_job`: the
    working directory (`hydra.job.chdir`), the environment (`hydra.job.env_set`), `HydraConfig`, the output
    directory, the saved config, the callbacks and the log file are a point's as at `cluster.replicas=1`."""
    seen = {}
    for replicas in (1, 2):
        sweep_dir = tmp_path / f"replicas{replicas}"
        args = [
            *SWEEP,
            "baseline=false",
            "tracking=none",
            f"cluster.replicas={replicas}",
            f"hydra.sweep.dir={sweep_dir}",
            "hydra.job.chdir=true",
            f"+hydra.job.env_set.{PROBE_VARIABLE}=set",
            "+hydra.callbacks.probe._target_=support.job_probe.JobProbe",
        ]
        path = os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")])
        done = subprocess.run(
            [sys.executable, "-m", "speculab.launch.cli", *args],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": path},  # the probe callback's module, in every replica's process too
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        seen[replicas] = [job_seen(sweep_dir / str(num), sweep_dir) for num in (0, 1)]
    assert seen[1][0]["cwd"] == "0" and seen[1][0]["env"] == "set" and seen[1][1]["num"] == 1 and seen[1][0]["log"]
    assert seen[2] == seen[1]


@pytest.mark.slow
@pytest.mark.timeout(BOTH_DECODING_TIMEOUT_S)
def test_sigterm_stops_a_sweep_on_two_replicas_with_every_run_killed(tmp_path: Path, sweeps) -> None:
    """SIGTERM to the launcher while both replicas decode: each replica's process stops its point at the end
    of its unit and ends its run KILLED, no point starts after, the parent ends KILLED, and the exit is 130."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = [*SWEEP, "dataset.num_prompts=16", "sampling.max_new_tokens=64", "cluster.replicas=2", f"tracking.uri={uri}"]
    sweep = sweeps(args, tmp_path)  # killed when the test ends, if it still runs
    awaited(partial(both_decoding, tmp_path), "both replicas decoded at once", sweep, BOTH_DECODING_S)
    sweep.send_signal(signal.SIGTERM)
    out, err = sweep.communicate(timeout=120)
    assert sweep.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]  # nor a replica's
    assert "speculab: interrupted; the running points stop at the end of their unit" in out
    assert "lost" not in out and "failed" not in out  # an interrupt is neither
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("speculab")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    assert sorted((r.data.tags["speculab.kind"], r.info.status) for r in runs) == [
        ("point", "KILLED"),
        ("point", "KILLED"),
        ("sweep", "KILLED"),
    ]


def test_groups_lost_before_a_points_first_unit_give_the_point_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A node lost between two points: the next point's groups fail as it starts. With another replica
    running, the point goes back to the queue (ReplicaLost); alone, it fails (ClusterError)."""
    import multiprocessing

    from speculab.point import experiment
    from speculab.process import jobs
    from speculab.runtime.placement import ClusterError

    def lost(*_: object) -> None:
        raise ClusterError("loop group g: lost an actor (ActorDiedError)")

    monkeypatch.setattr(experiment, "prepare", lost)
    flags = multiprocessing.get_context("spawn").Array("b", 2)
    plan = resolve(load(["runtime=inline", "tracking=none", "dataset.num_prompts=1"]))
    shape = PointShape.of(plan.cfg)
    monkeypatch.setattr(jobs._Seated, "seat", jobs.Seat(0, 2, flags))
    with pytest.raises(jobs.ReplicaLost, match="before the point's first unit"):
        experiment.decode_point(plan, shape, NoopTracker())
    assert list(flags) == [1, 0]  # replica 1 gave its point up, and is lost
    flags[0], flags[1] = 0, 1  # the other replica lost instead: none left to take the point
    with pytest.raises(ClusterError, match="lost an actor"):
        experiment.decode_point(plan, shape, NoopTracker())
    assert list(flags) == [0, 1]  # the last replica runs on


def test_two_replicas_lost_at_once_never_both_give_their_points_up() -> None:
    """The decision is one, under the flags' lock: of two replicas whose groups are lost at the same moment,
    one gives its point up to the other, and the other, now the last, goes on (restarts its groups)."""
    import multiprocessing
    import threading

    from speculab.process import jobs

    for _ in range(50):
        flags = multiprocessing.get_context("spawn").Array("b", 2)
        seats, answers, start = [jobs.Seat(r, 2, flags) for r in range(2)], [False, False], threading.Barrier(2)

        def decide(r: int) -> None:
            start.wait()
            answers[r] = seats[r].give_up()

        threads = [threading.Thread(target=decide, args=(r,)) for r in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(answers) == [False, True] and sum(flags) == 1
    three = multiprocessing.get_context("spawn").Array("b", 3)
    assert [jobs.Seat(r, 3, three).give_up() for r in (0, 1, 2)] == [True, True, False]
    assert jobs.Seat(0, 3, three).give_up()  # asked again, a lost replica stays lost
