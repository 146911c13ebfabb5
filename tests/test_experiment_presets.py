"""The paper-table presets of conf/experiment/: every point of every preset's sweep is a valid
config, each preset has a report layout, and (slow) each runs end to end on the tiny pair."""

from __future__ import annotations

import itertools
from pathlib import Path

import mlflow
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from speculab.config import validate
from speculab.config.report import COLUMNS, DIMENSIONS, ReportConfig, ReportTable, report_errors
from speculab.report.cli import main
from speculab.report.presets import preset_experiment, preset_report, presets
from speculab.results.names import lookup
from support.cli import speculab
from support.configs import CONF, load

PRESETS = presets()


def sweep_axes(preset: str) -> list[list[str]]:
    """Each swept key's overrides (`key=value`), in the order of the preset's `hydra.sweeper.params`."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        composed = compose("config", overrides=[f"+experiment={preset}"], return_hydra_config=True)
    params = OmegaConf.to_container(composed.hydra.sweeper.params) or {}
    assert isinstance(params, dict)
    parser = OverridesParser.create()
    return [
        [f"{key}={value}" for value in parser.parse_override(f"{key}={values}").sweep_string_iterator()]
        for key, values in params.items()
    ]


def sweep_points(preset: str) -> list[list[str]]:
    """The overrides of every point of a preset's sweep (`hydra.sweeper.params`, a product)."""
    return [list(point) for point in itertools.product(*sweep_axes(preset))]


def two_points(preset: str) -> list[str]:
    """Command-line values that narrow a preset's grid to two points (a command-line value of a swept key
    replaces the preset's): the first two values of its first swept key, the first of each other."""
    first, *rest = sweep_axes(preset)
    key = first[0].split("=", 1)[0]
    return [f"{key}={first[0].split('=', 1)[1]},{first[1].split('=', 1)[1]}", *(axis[0] for axis in rest)]


def test_the_paper_presets_are_there() -> None:
    expected = {"gbv_table1", "gbv_table7", "bv_table4", "ddtree_table1", "ddtree_chain", "global_resolution_table4"}
    expected |= {"spectr_gbv_table1", "spectr_gbv_table1_single"}
    assert expected <= set(PRESETS)


@pytest.mark.parametrize("preset", PRESETS)
def test_every_point_of_a_preset_sweep_is_valid(preset: str) -> None:
    points = sweep_points(preset)
    assert len(points) >= 2, "a preset sweeps at least one parameter"
    for point in points:
        validate(load([f"+experiment={preset}", *point]))


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_has_a_report_layout_and_its_own_experiment(preset: str) -> None:
    composed = load([f"+experiment={preset}"])
    assert composed.tracking.experiment == preset_experiment(preset)
    assert composed.report.tables and composed.report == preset_report(preset)  # as a run and the report read it


def test_the_ddtree_drafter_is_one_override_away() -> None:
    assert load(["+experiment=ddtree_table1"]).drafter.name == "parallel"
    assert load(["+experiment=ddtree_table1", "drafter=ar_marginals"]).drafter.name == "ar_marginals"


def test_a_command_line_value_replaces_the_preset_grid() -> None:
    # Hydra's basic sweeper: command-line overrides come after hydra.sweeper.params and win.
    assert len(sweep_points("gbv_table1")) == 12
    assert load(["+experiment=gbv_table1", "algorithm.K=3"]).algorithm.K == 3


TINY = [
    "runtime=inline",
    "dataset.num_prompts=1",
    "sampling.max_new_tokens=4",
    "baseline_hf=false",
    "measure.repeats=1",
]


@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS)
def test_each_preset_runs_tiny_and_reports(preset: str, tmp_path: Path) -> None:
    """Two points of each preset's grid (every point validates, above), run and reported end to end."""
    store = tmp_path / "mlflow.db"
    args = ["-m", f"+experiment={preset}", *two_points(preset), *TINY, f"tracking.uri=sqlite:///{store}"]
    result = speculab(args, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    mlflow.set_tracking_uri(f"sqlite:///{store}")
    runs = mlflow.search_runs(experiment_names=[preset_experiment(preset)], output_format="list")
    finished = [r for r in runs if r.data.tags.get("speculab.kind") == "point" and r.info.status == "FINISHED"]
    assert len(finished) == 2
    main(["--preset", preset, "--uri", f"sqlite:///{store}", "--out", str(tmp_path / "report"), "--no-log"])
    tables = (tmp_path / "report" / "tables.md").read_text()
    # the preset's own tables, then acceptance by depth (alpha_j, overlap_j, accepted lengths): every preset drafts
    assert tables.count("###") == len(preset_report(preset).tables) + 3 and "### Acceptance by depth" in tables


def test_a_report_layout_names_known_dimensions_and_columns() -> None:
    bad = ReportConfig(
        [ReportTable("t", "title", ["Model pair", "Depth"], ["speedup", "nope"], "Q"), ReportTable("u", "u")]
    )
    assert report_errors(bad) == [
        f"report.tables[0].rows='Depth': must be one of {', '.join(DIMENSIONS)}",
        f"report.tables[0].across='Q': must be one of {', '.join(DIMENSIONS)}",
        f"report.tables[0].columns='nope': must be one of {', '.join(COLUMNS)}",
        f"report.tables[1].columns: empty; name one or more of {', '.join(COLUMNS)}",
    ]
    assert all(lookup(column.key) for column in COLUMNS.values())  # each column is a figure of the name table
