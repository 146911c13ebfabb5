"""`speculab-report`: a sweep's runs as the papers' tables and plots (docs/report.md).

Given an MLflow experiment, a sweep's parent run or a preset (`conf/experiment/<name>.yaml`,
whose runs go to its own experiment), it reads the finished point runs through MLflow's client
(`report.points`), lays them out as the preset's paper tables (`report.tables`), and writes
`tables.md`, one CSV per table and the plots of `report.figures`. It prints the tables and logs the
files under `report/` of the sweep's parent run (for an experiment or a preset: of the
experiment's `report` run), so the MLflow UI shows them beside the sweep.

    speculab-report --preset gbv_table1
    speculab-report --experiment speculab --uri http://mlflow:5000
    speculab-report --run <parent run id> --out reports/my-sweep
    speculab-report --experiment speculab --profile speculation_profile.json   # another tool's, beside the runs
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import matplotlib.pyplot as plt
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from rich.console import Console

from speculab.config import TrackingConfig, tracking_uri
from speculab.config.overrides import first_line
from speculab.config.tracking import scheme_error, store_error, store_path
from speculab.report.figures import FIGURES
from speculab.report.points import (
    Point,
    ReportError,
    experiment_id,
    newest_per_point,
    point_runs,
    read_points,
    sweep_children,
)
from speculab.report.presets import (
    DEFAULT,
    layout_of_experiment,
    layout_of_sweep,
    preset_experiment,
    preset_report,
    presets,
)
from speculab.report.profiles import profile_grid
from speculab.report.render import console_table, csv_text, markdown
from speculab.report.tables import grids, layout_of
from speculab.results.profile_read import ProfileError, read_profile
from speculab.tracking.spool import KIND_TAG, NOTE_TAG, fail_fast
from speculab.tracking.store import store_client


@dataclass(frozen=True)
class Source:
    """What a report is about: its name, its layout, its points and the run its files go to
    (None: the experiment's `report` run, created on first use)."""

    name: str
    layout: str
    experiment_id: str
    points: list[Point]
    parent_run_id: str | None


def sweep_source(client: MlflowClient, run_id: str) -> Source:
    """A sweep's finished points; the layout of the preset it ran."""
    children = sweep_children(client, run_id)
    parent = client.get_run(run_id)
    layout = layout_of_sweep(parent.data.params.get("sweep.overrides", ""))
    name = f"{layout if layout != DEFAULT else 'report'} sweep {run_id[:8]}"  # its run name is a command line
    return Source(name, layout, parent.info.experiment_id, read_points(client, children), run_id)


def experiment_source(client: MlflowClient, experiment: str) -> Source:
    """An experiment's finished points, the newest run of each; the layout of the preset writing to it."""
    found = experiment_id(client, experiment)
    runs = newest_per_point(point_runs(client, [found]))
    if not runs:
        raise ReportError(f"experiment {experiment!r} has no FINISHED point runs")
    return Source(experiment, layout_of_experiment(experiment), found, read_points(client, runs), None)


def preset_source(client: MlflowClient, preset: str) -> Source:
    """The points of the experiment a preset writes to."""
    experiment = preset_experiment(preset)
    try:
        return experiment_source(client, experiment)
    except ReportError as err:
        raise ReportError(
            f"preset {preset!r} writes to experiment {experiment!r}: {err}; "
            f"run `speculab -m +experiment={preset}` first"
        ) from None


def report_run(client: MlflowClient, source: Source) -> str:
    """The run the report's files go to: the sweep's parent, or the experiment's `report` run."""
    if source.parent_run_id is not None:
        return source.parent_run_id
    query = f"tags.`{KIND_TAG}` = 'report'"
    existing = client.search_runs([source.experiment_id], query, max_results=1)
    if existing:
        return existing[0].info.run_id
    run = client.create_run(source.experiment_id, run_name=f"report {source.name}", tags={KIND_TAG: "report"})
    client.set_terminated(run.info.run_id)
    return run.info.run_id


def write(source: Source, out: Path, profiles: list[Path] | None = None) -> list[Path]:
    """tables.md, one CSV per table and the plots that apply, under ``out``; each of ``profiles`` (speculation
    profiles another tool wrote) first, beside the runs of its pair and method (`report.profiles`)."""
    report = preset_report(source.layout)
    beside = [profile_grid(read_profile(path), path, source.points) for path in profiles or []]
    out.mkdir(parents=True, exist_ok=True)
    laid = beside + grids(layout_of(report), source.points, report.acceptance_note or "")
    intro = f"# {source.name}\n\n{len(source.points)} finished point run(s); layout `{source.layout}`.\n\n"
    files = [out / "tables.md"]
    files[0].write_text(intro + "\n".join(markdown(grid) for grid in laid))
    for grid in laid:
        files.append(out / f"{grid.name}.csv")
        files[-1].write_text(csv_text(grid))
    for filename, draw in FIGURES.items():
        if (figure := draw(source.points)) is not None:
            files.append(out / filename)
            figure.savefig(files[-1], dpi=120)
            plt.close(figure)
    console = Console()
    console.print(*(console_table(grid, console, str(files[0])) for grid in laid))
    return files


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "report"


def argument_problems(uri: str, out: Path | None) -> list[str]:
    """The report's own arguments, checked before anything is read or written: a store it can read (a known
    scheme; a local one that exists, since the report reads runs and creating an empty store would only
    hide a misspelt path) and an output directory that can be made."""
    problems = []
    scheme = urlparse(uri).scheme.split("+")[0]
    store = store_path(uri)
    if (unknown := scheme_error(uri, "--uri ")) is not None:
        problems.append(unknown)
    elif scheme == "sqlite" and store is None:
        problems.append(f"--uri {uri}: an in-memory store holds no runs; name the database a run wrote")
    elif store is not None and not store.exists():
        problems.append(f"--uri {uri}: no store at {store}; name the store your runs were tracked in (tracking.uri)")
    elif (wrong := store_error(uri, "--uri ")) is not None:
        problems.append(wrong)
    blocker = None if out is None else next((p for p in (out, *out.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        problems.append(f"--out {out}: {blocker} is a file, so the report's directory cannot be made there")
    return problems


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="speculab-report", description="A sweep's runs as the papers' tables (markdown, CSV) and plots."
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--preset", help=f"a conf/experiment preset: {', '.join(presets())}")
    what.add_argument("--experiment", help="an MLflow experiment name: its finished points, the newest run of each")
    what.add_argument("--run", metavar="PARENT_RUN_ID", help="a sweep's parent run: its finished points")
    parser.add_argument(
        "--profile",
        type=Path,
        action="append",
        metavar="FILE",
        help="a speculation_profile.json another tool wrote (specdec_bench schema 1.0), laid beside the runs of "
        "its pair and method; may be given more than once",
    )
    parser.add_argument("--uri", help="MLflow tracking URI (default: sqlite:///<cwd>/mlflow.db, as speculab)")
    parser.add_argument("--out", type=Path, help="where the files go (default: reports/<name>)")
    parser.add_argument("--no-log", action="store_true", help="write the files only; log nothing to MLflow")
    args = parser.parse_args(argv)
    fail_fast()
    uri = args.uri or tracking_uri(TrackingConfig())
    if problems := argument_problems(uri, args.out):
        parser.exit(2, "".join(f"speculab-report: {line}\n" for line in problems))
    client = store_client(uri)
    try:  # a server that does not answer is said once, not as each read's traceback (fail_fast: no retries)
        client.search_experiments(max_results=1)
    except MlflowException as err:
        parser.exit(2, f"speculab-report: --uri {uri}: the store did not answer ({first_line(err)})\n")
    try:
        if args.run:
            source = sweep_source(client, args.run)
        elif args.preset:
            source = preset_source(client, args.preset)
        else:
            source = experiment_source(client, args.experiment)
        files = write(source, args.out or Path("reports") / slug(source.name), args.profile)
    except (ReportError, ProfileError) as err:
        print(f"speculab-report: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    print("speculab-report: wrote " + ", ".join(str(f) for f in files))
    if not args.no_log:
        run_id = report_run(client, source)
        for path in files:
            client.log_artifact(run_id, str(path), "report")
        if source.parent_run_id is None:  # the report run's page shows the tables (a sweep's keeps its summary)
            client.set_tag(run_id, NOTE_TAG, files[0].read_text())
        print(f"speculab-report: logged as artifacts report/ of MLflow run {run_id} ({uri})")


if __name__ == "__main__":
    main()
