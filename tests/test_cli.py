"""The `speculab` command end to end: Hydra, the engine, MLflow, in both runtimes; what it refuses
before anything starts, checked in process (the subprocess runs only where the command itself is tested)."""

from __future__ import annotations

from pathlib import Path

import mlflow
import pytest

from speculab.config import ConfigError, unknown_keys, validate
from support.cli import runs, small_run, speculab
from support.configs import compose_config, load


@pytest.mark.slow
def test_ray_runtime_equals_inline(random_llama_pair, tmp_path: Path) -> None:
    outputs = []
    for runtime in ("inline", "ray"):
        store = tmp_path / f"{runtime}.db"
        result = speculab(
            [*small_run(random_llama_pair, store), f"runtime={runtime}", "sampling.temperature=1", "baseline=false"],
            tmp_path,
        )
        assert result.returncode == 0, result.stderr
        (run,) = runs(store)
        outputs.append(mlflow.artifacts.load_text(run.info.artifact_uri + "/records.jsonl"))
        conditions = run.data.tags["speculab.conditions"]  # where each figure was measured
        assert ("target and generate: this process" in conditions) == (runtime == "inline"), conditions
        assert "torch thread" in conditions and "target and generate" in result.stdout  # the summary's caption
    assert outputs[0] == outputs[1]


def test_bad_input_is_refused_naming_every_bad_value() -> None:
    with pytest.raises(ConfigError) as err:
        validate(load(["algorithm.K=0", "sampling.temperature=-1", "runtime=inline"]))
    assert "algorithm.K=0" in str(err.value) and "sampling.temperature=-1" in str(err.value)


def test_an_unknown_key_added_with_plus_is_named() -> None:
    """The command's first check (converting to the dataclasses would drop the key)."""
    errors = unknown_keys(compose_config(["+foo=1", "runtime=inline", "tracking=none"]))
    assert any("foo: unknown key; top-level keys are model, algorithm" in line for line in errors)


def test_a_sweep_with_one_bad_point_is_refused_before_any_point_runs(tmp_path: Path) -> None:
    store = tmp_path / "mlflow.db"
    args = ["-m", "algorithm=gbv", "algorithm.K=2,0", "runtime=inline", f"tracking.uri=sqlite:///{store}"]
    result = speculab([*args, f"hydra.sweep.dir={tmp_path / 'sweep'}"], tmp_path)
    assert result.returncode == 2
    assert "point 2 of 2 (algorithm.K=0): algorithm.K=0: must be an integer >= 1" in result.stderr
    assert not store.exists() and not (tmp_path / "sweep").exists()  # no run, no point started


def test_a_point_the_cluster_cannot_keep_fails_in_one_line(monkeypatch, capsys) -> None:
    """A `ClusterError` (a lost node with nowhere to go): exit 1, its message on one line, no traceback;
    the point's run was already ended FAILED by `tracked`, with what it finished. The point's function
    itself, not Hydra's wrapper: Hydra's run would configure this process's logging for the session."""
    from speculab.launch import cli
    from speculab.runtime.placement import ClusterError

    def lost(cfg, plan=None):
        raise ClusterError("loop group: node 10.0.0.2 was lost; no alive node can hold ...")

    monkeypatch.setattr(
        "speculab.point.experiment.run", lost
    )  # what `launch.cli.hydra_main` imports when it runs a point
    with pytest.raises(SystemExit) as ended:
        cli.hydra_main.__wrapped__(compose_config(["runtime=inline", "tracking=none"]))
    assert ended.value.code == 1
    err = capsys.readouterr().err
    assert err.strip() == "speculab: point failed: loop group: node 10.0.0.2 was lost; no alive node can hold ..."


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["algorithm=foo"], "algorithm=foo: no such algorithm; allowed: block, ddtree, gbv, greedy_block, nss,"),
        (["algorithm.L=abc"], "algorithm.L=abc: must be an integer >= 1 and <= 128"),  # the type, and the range
        (["algorithm.L=4", "algorithm.L=1.5"], "algorithm.L=1.5: must be an integer >= 1"),  # the last, as applied
        (
            ["--multirun", "hydra/sweeper=race", "hydra.sweeper.stages=[12.5,32]"],
            "hydra.sweeper.stages=[12.5,32]: stages[0]",
        ),
        (["sampling.temperature=warm"], "sampling.temperature=warm: must be a finite number >= 0 (0 = greedy)"),
        (["baseline=maybe"], "baseline=maybe: must be true or false"),
        (["algorithm.K=1,2"], "algorithm.K=1,2: several values sweep only with -m (speculab -m algorithm.K=1,2)"),
        (["algorithm.K=[1"], "algorithm.K=[1: not an override Hydra can read (no viable alternative at input"),
        (["experiment=gbv_table1"], "experiment=gbv_table1: experiment is not in the defaults; add it with a plus"),
        (["--multirun", "algorithm=gbv,foo"], None),  # the point is the sweep's to check, with its number
        (["sampling.seed=-1", "runtime=inline"], "sampling.seed=-1: must be an integer in [0, "),
        # issue 63's classes: values taken only as what they are, switches that need another, stores that
        # outlive the run, tracking=none writing nothing, a preset run as its grid
        (["model.compile=2"], "model.compile=2: must be true or false"),
        (["--multirun", "baseline=true,1"], "baseline=1: must be true or false"),
        (["=4"], "=4: an override needs a key (key=value"),
        (["cluster.actor_cpus=nan"], "cluster.actor_cpus=nan: must be a finite number"),
        (["--multirun", "sampling.temperature=1,inf"], "sampling.temperature=inf: must be a finite number"),
        (["model.compile=true", "runtime=inline"], "model.compile=true: needs a CUDA model.device"),
        (
            ["model.capture_verifier=true", "model.capture=false", "runtime=inline"],
            "model.capture_verifier=true: needs model.capture=true",
        ),
        (["tracking.uri=sqlite://", "runtime=inline"], "tracking.uri='sqlite://': an in-memory SQLite store is gone"),
        (["tracking.uri=sqlite:///:memory:", "runtime=inline"], "tracking.uri='sqlite:///:memory:': an in-memory"),
        (["resume=true", "tracking=none", "runtime=inline"], "resume=true: finds finished points in the tracking"),
        (["runtime.placement_timeout_s=1e-9"], "runtime.placement_timeout_s=1e-09: must be >= 1 and <= 86400 (seconds"),
        (["+experiment=gbv_table1"], "+experiment=gbv_table1: a preset sweeps its paper's grid; run it with -m"),
        (["--multirun", "+experiment=gbv_table1,bv_table4"], "+experiment=gbv_table1,bv_table4: one preset a sweep"),
        (["--multirun", "+experiment=gbv_table1", "algorithm.K=7"], "algorithm.K=7: +experiment=gbv_table1 sweeps"),
    ],
)
def test_hydras_own_refusals_are_one_line_before_any_output_directory(
    args: list[str], line: str | None, capsys, tmp_path: Path, monkeypatch
) -> None:
    """What Hydra refuses itself (a block of lines, sometimes a traceback, exit 1) and what validation
    refuses, as one line naming the field, exit 2, before Hydra makes `outputs/<date>/<time>`."""
    from speculab.launch import cli

    monkeypatch.chdir(tmp_path)
    if line is None:
        cli.precheck(args)  # composes the fixed part; `sweep_plans` names the point
        return
    with pytest.raises(SystemExit) as ended:
        cli.precheck(args)
    assert ended.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "speculab: invalid config:" and len(err) == 2 and err[1].strip().startswith(line), err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("lines", "said"),
    [
        (
            ['{"id": "x", "prompt": "' + "x = 1; " * 900 + '"}', '{"id": "x", "prompt": "short"}'],
            "id 'x' already names",
        ),
        (['{"prompt": "abc \\ud800 def"}'], "the `prompt` holds '\\ud800' at character 5, half of a UTF-16 pair"),
        (['{"prompt": "' + "x = 1; " * 900 + '"}'], "dataset: prompt 'prompts/1' has"),  # too long: before Hydra
    ],
    ids=["duplicate ids", "a lone surrogate", "too long for the context"],
)
def test_prompts_a_run_cannot_decode_are_refused_before_any_output_directory(
    lines: list[str], said: str, capsys, tmp_path_factory, monkeypatch
) -> None:
    """Prompt identity (every prompt checked: a later one with the same id hid an earlier long one) and
    text a tokenizer cannot take, refused in one line, exit 2, with no directory made."""
    from speculab.launch import cli

    data = tmp_path_factory.mktemp("data") / "prompts.jsonl"
    data.write_text("\n".join(lines) + "\n")
    here = tmp_path_factory.mktemp("here")
    monkeypatch.chdir(here)
    with pytest.raises(SystemExit) as ended:
        cli.precheck(["dataset=jsonl", f"dataset.path={data}", "runtime=inline"])
    assert ended.value.code == 2 and said in capsys.readouterr().err
    assert list(here.iterdir()) == []


def test_a_key_every_point_of_a_sweep_shares_takes_one_value(tmp_path: Path) -> None:
    """cluster.spread (like cluster.replicas, the store and the experiment) is the sweep's, not a point's."""
    args = ["-m", "cluster.spread=false,true", "cluster.replicas=2", "dataset.num_prompts=2", "tracking=none"]
    result = speculab([*args, f"hydra.sweep.dir={tmp_path / 'sweep'}"], tmp_path)
    assert result.returncode == 2 and not (tmp_path / "sweep").exists()
    assert "cluster.spread=False,True: one value for the whole sweep" in result.stderr


def test_a_sweep_point_hydra_cannot_compose_is_named_with_its_number() -> None:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from speculab.config.sweep import PLANS, sweep_plans
    from speculab.launch.cli import CONF

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):  # the sweep's Hydra, as it starts
        config = compose("config", overrides=["runtime=inline", "tracking=none"], return_hydra_config=True)
        OmegaConf.set_readonly(config, False)
        config.hydra.overrides.task = ["runtime=inline", "tracking=none", "algorithm=gbv,foo", "algorithm.L=2,x"]
        plans, errors = sweep_plans(config)
    PLANS.clear()
    assert len(plans) == 1 and errors == [
        "point 2 of 4 (algorithm=gbv algorithm.L=x): algorithm.L=x: must be an integer >= 1 and <= 128, or auto "
        "(chosen each round)",
        "point 3 of 4 (algorithm=foo algorithm.L=2): algorithm=foo: no such algorithm; allowed: block, ddtree, gbv, "
        "greedy_block, nss, specinfer, spectr, spectr_gbv, token, traversal",
        "point 4 of 4 (algorithm=foo algorithm.L=x): algorithm=foo: no such algorithm; allowed: block, ddtree, gbv, "
        "greedy_block, nss, specinfer, spectr, spectr_gbv, token, traversal",
    ]


def test_sweep_values_that_read_as_one_point_are_refused() -> None:
    """`sampling.temperature=1,1.0` is one point twice: Hydra would run it twice, a contrast would test it
    against itself, and resume would take the second for the first."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from speculab.config.sweep import PLANS, sweep_plans
    from speculab.launch.cli import CONF

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        config = compose("config", overrides=["runtime=inline", "tracking=none"], return_hydra_config=True)
        OmegaConf.set_readonly(config, False)
        config.hydra.overrides.task = ["runtime=inline", "tracking=none", "sampling.temperature=1,1.0,0"]
        plans, errors = sweep_plans(config)
    PLANS.clear()
    assert len(plans) == 3 and errors == [
        "point 2 of 3 (sampling.temperature=1.0): the same point as sampling.temperature=1 (the values differ as "
        "written, not as read); sweep each value once"
    ]


def test_an_output_directory_this_user_cannot_write_is_refused_before_hydra_makes_it(
    capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from speculab.launch import cli

    monkeypatch.chdir(tmp_path)
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != tmp_path and real(path, mode))
    with pytest.raises(SystemExit) as ended:
        cli.precheck(["runtime=inline", f"tracking.uri=sqlite:///{tmp_path.parent / 'elsewhere.db'}"])
    assert ended.value.code == 2
    line = capsys.readouterr().err.splitlines()[1].strip()
    assert line.startswith("hydra.run.dir=outputs/") and line.endswith(
        f"{tmp_path} is not writable by this user; run where you can write, or set hydra.run.dir"
    )


def test_one_run_refused_on_load_exits_2_though_precheck_planned_it(monkeypatch, capsys) -> None:
    """A single run has a plan from `precheck`; what loading refuses (a prompt too long) still ends it
    with exit 2 and the refusal, not as a failed sweep point."""
    from speculab.config import resolve
    from speculab.config.sweep import PLANS
    from speculab.launch import cli
    from speculab.process import jobs

    def too_long(cfg, plan=None):
        raise ConfigError.listing(["dataset: prompt 'long/1' has 4401 tokens"])

    cfg = compose_config(["runtime=inline", "tracking=none"])
    monkeypatch.setitem(PLANS, (), resolve(load(["runtime=inline", "tracking=none"])))  # no overrides: key ()
    monkeypatch.setattr("speculab.point.experiment.run", too_long)
    with pytest.raises(SystemExit) as ended:
        cli.hydra_main.__wrapped__(cfg)
    assert ended.value.code == 2 and jobs.FAILED_POINTS == []
    assert "dataset: prompt 'long/1' has 4401 tokens" in capsys.readouterr().err


def test_plan_prints_where_everything_runs_and_starts_nothing(capsys, tmp_path: Path, monkeypatch) -> None:
    """`speculab ... --plan`: the validated plan (the loop, each model's place, every memory figure), exit 0,
    no output directory and no run; `-m` with it is refused in one line."""
    import sys

    from speculab.launch import cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["speculab", "cluster.tp_size=2", "--plan", "cluster.draft_placement=sharded"])
    with pytest.raises(SystemExit) as ended:
        cli.main()
    assert ended.value.code == 0
    out = capsys.readouterr().out
    assert "sharded with the target over the same 2 ranks (cluster.draft_placement=sharded)" in out
    assert "on rank 0 of the target's group" in out and "2 draft share(s) x (weights" in out
    monkeypatch.setattr(sys, "argv", ["speculab", "--plan", "-m", "algorithm.K=1,2"])
    with pytest.raises(SystemExit) as ended:
        cli.main()
    assert ended.value.code == 2 and "--plan: shows one run's plan" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
