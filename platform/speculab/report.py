"""`speculab-report`: a sweep's runs as the papers' tables and plots (the per-run summary is
`speculab.tracking.summary`).

Given an MLflow experiment, a sweep's parent run or a preset (`conf/experiment/<name>.yaml`,
whose runs go to its own experiment), it reads the finished point runs through MLflow's
client (`speculab.tracking.points`), lays them out as the preset's paper tables (`LAYOUTS`;
anything else gets `DEFAULT_LAYOUT`), and writes `tables.md`, one CSV per table and the plots
of `speculab.tracking.sweep_figures`. It prints the tables and logs the files under `report/`
of the sweep's parent run (for an experiment or a preset: of the experiment's `report` run),
so the MLflow UI shows them beside the sweep. Cells are value ± the 95% interval across
prompts where the metric has per-prompt histories; the paired comparison (`compare/<verifier>/*`
metrics) shows ± one standard error.

    speculab-report --preset gbv_table1
    speculab-report --experiment speculab --uri http://mlflow:5000
    speculab-report --run <parent run id> --out reports/my-sweep
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
from mlflow.entities import Run
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from speculab.config import PROJECT_ROOT, TrackingConfig, tracking_uri
from speculab.tracking.acceptance import reached_depth
from speculab.tracking.metrics import BASELINE_PREFIX, acceptance_logged, mlflow_name
from speculab.tracking.points import (
    Estimate,
    Point,
    ReportError,
    Value,
    check_metrics,
    constants,
    dimensions,
    experiment_id,
    logged,
    newest_per_point,
    per_round,
    point_runs,
    read_point,
    sort_key,
    sweep_children,
    varying,
)
from speculab.tracking.runs import KIND_TAG, NOTE_TAG
from speculab.tracking.spool import fail_fast
from speculab.tracking.store import store_client
from speculab.tracking.sweep_figures import FIGURES

PRESETS_DIR = PROJECT_ROOT / "conf" / "experiment"
COMPARE_PREFIX = "compare/"
# compare/<verifier>/<statistic> and its standard error, as item 3's paired comparison logs them
COMPARE_STATS = (
    ("block_efficiency", "block_efficiency_se", "block efficiency"),
    ("accepted_mean", "accepted_se", "accepted tokens"),
    ("diff_block_efficiency", "diff_block_efficiency_se", "Δ block efficiency"),
)


@dataclass(frozen=True)
class Column:
    """A metric column: its header and its value (with interval, if any) for a point."""

    label: str
    estimate: Callable[[Point], Estimate | None]
    better: int = 0  # +1: higher is better, -1: lower is better (the best of a row is in bold), 0: neither


BLOCK_EFFICIENCY = Column("Block efficiency (tokens/M_p-call)", per_round("block_efficiency"), +1)
TAU = Column("τ", per_round("block_efficiency"), +1)  # DDTree's acceptance length counts the bonus token
WALLTIME = Column("Walltime (ms/token)", logged("ms_per_token"), -1)
THROUGHPUT = Column("Throughput (tokens/s)", logged("tokens_per_s"), +1)
SPEEDUP = Column("Speedup over autoregressive", logged("speedup_vs_ar"), +1)
AUTOREGRESSIVE = Column("Autoregressive (tokens/s)", logged(f"{BASELINE_PREFIX}tokens_per_s"))  # same run's baseline
DRAFT_COST = Column("Draft cost (%walltime)", logged("share_draft", 100.0))
TARGET_COST = Column("Target cost (%walltime)", logged("share_target", 100.0))


@dataclass(frozen=True)
class Table:
    """A paper table: `rows` name its row dimensions, `across` a dimension spread over the columns
    (GBV Table 1's K), `columns` its metrics. Dimensions it does not name are added as rows when
    they vary across the points, and go to the caption when they do not."""

    name: str  # file stem
    title: str
    rows: tuple[str, ...]
    columns: tuple[Column, ...]
    across: str | None = None


DEFAULT_LAYOUT = (
    Table(
        "block_efficiency", "Block efficiency (tokens/M_p-call) by K", ("Method", "L", "T"), (BLOCK_EFFICIENCY,), "K"
    ),
    Table("walltime", "Walltime (ms/token) by K", ("Method", "L", "T"), (WALLTIME,), "K"),
    Table("points", "Every point", ("Method", "K", "L", "T"), (BLOCK_EFFICIENCY, THROUGHPUT, WALLTIME, SPEEDUP)),
)
DDTREE_TABLE1 = (
    Table(
        "table1",
        "DDTree Table 1: speedup over autoregressive decoding and τ, every budget B (the paper shows the best)",
        ("Dataset", "T", "Method", "B"),
        (SPEEDUP, TAU, THROUGHPUT, AUTOREGRESSIVE),
    ),
)
SPECTR_GBV_TABLE1 = (
    Table(
        "table1",
        "SpecTr-GBV Table 1: block efficiency (BE) and speedup ratio (SR); SpecTr-GBV at K >= 2 is not lossless",
        ("Dataset", "Method", "K"),
        (BLOCK_EFFICIENCY, SPEEDUP, WALLTIME),
    ),
)
LAYOUTS: dict[str, tuple[Table, ...]] = {
    "gbv_table1": (
        Table(
            "table1",
            "GBV Table 1: block efficiency (tokens/M_p-call)",
            ("Model pair", "Dataset", "L"),
            (BLOCK_EFFICIENCY,),
            "K",
        ),
        Table("table2", "GBV Table 2: walltime (ms/token)", ("Model pair", "Dataset", "L"), (WALLTIME,), "K"),
        Table(
            "table6",
            "GBV Table 6: draft length ablation",
            ("L", "K"),
            (BLOCK_EFFICIENCY, WALLTIME, DRAFT_COST, TARGET_COST),
        ),
    ),
    "gbv_table7": (
        Table(
            "table7",
            "GBV Table 7: multi-path comparison",
            ("T", "K", "Method"),
            (BLOCK_EFFICIENCY, THROUGHPUT, WALLTIME),
        ),
    ),
    "bv_table4": (
        Table("table4", "BV Table 4: block efficiency", ("Dataset", "L"), (BLOCK_EFFICIENCY,), "Method"),
        Table(
            "speedup",
            "BV Tables 1, 6-7: wall clock time speedup over autoregressive",
            ("Dataset", "L"),
            (SPEEDUP,),
            "Method",
        ),
    ),
    "ddtree_table1": DDTREE_TABLE1,
    "ddtree_chain": DDTREE_TABLE1,
    "spectr_gbv_table1": SPECTR_GBV_TABLE1,
    "spectr_gbv_table1_single": SPECTR_GBV_TABLE1,
    "global_resolution_table4": (
        Table(
            "table4", "Global Resolution Table 4: SpecTr per-node rules", ("K", "Method"), (BLOCK_EFFICIENCY, SPEEDUP)
        ),
    ),
}


# What each preset's paper shows of acceptance by depth, beside the tables of `acceptance_tables`.
DDTREE_ACCEPTANCE = (
    "DDTree gives no per-position acceptance; its Fig. 4 is this histogram (MATH-500, Qwen3-8B, T = 0, B = 512 "
    "against vanilla DFlash; its τ counts the bonus token: n + 1) as a plot, with no numbers in the text to set here"
)
GBV_ACCEPTANCE = "the GBV paper gives no per-position acceptance nor accepted-length histogram (block efficiency only)"
ACCEPTANCE_NOTES = {
    "ddtree_table1": DDTREE_ACCEPTANCE,
    "ddtree_chain": DDTREE_ACCEPTANCE,
    "gbv_table1": GBV_ACCEPTANCE,
    "gbv_table7": GBV_ACCEPTANCE,
    "bv_table4": "BV Fig. 3 plots the empirical CCDF of τ, P(τ >= n) = α_1 ... α_n, for token and block "
    "verification on its context-independent toy models (γ = 10): a plot, no numbers",
    "spectr_gbv_table1": "SpecTr-GBV Fig. 2(a) gives the mean acceptance rate against K, not per position",
    "spectr_gbv_table1_single": "SpecTr-GBV Fig. 2(a) gives the mean acceptance rate against K, not per position",
}


def _share(key: str) -> Callable[[Point], Estimate | None]:
    """An acceptance-by-depth figure as logged, ± the larger side of its interval (clipped to [0, 1])."""

    def estimate(point: Point) -> Estimate | None:
        name, metrics = mlflow_name(key), point.metrics
        if name not in metrics:
            return None
        value = metrics[name]
        if math.isnan(value):  # no round reached this depth
            return None
        low, high = (metrics.get(f"{name}_ci_{end}", math.nan) for end in ("low", "high"))
        return Estimate(value, None if math.isnan(low + high) else max(value - low, high - value))

    return estimate


def acceptance_tables(points: list[Point], paper: str) -> tuple[Table, ...]:
    """alpha_j and the overlap per depth, and the accepted-length histogram, up to the deepest depth a
    point's rounds reached (none when no point drafted); ``paper``: what the preset's paper shows of them."""
    L = max((reached_depth(acceptance_logged(p.metrics)) for p in points), default=0)
    if not L:
        return ()
    depths = range(1, L + 1)
    where = f" ({paper})" if paper else ""
    return (
        Table(
            "acceptance_alpha",
            f"Acceptance by depth: α_j = P(depth j accepted | depths 1..j-1 accepted){where}",
            ("Method",),
            tuple(Column(f"α_{j}", _share(f"alpha_{j}")) for j in depths),
        ),
        Table(
            "acceptance_overlap",
            "Overlap by depth: mean Σ_x min(p_j, q_j) over the rounds that reached depth j (α_j under token "
            "verification of one path)",
            ("Method",),
            tuple(Column(f"overlap_{j}", _share(f"overlap_{j}")) for j in depths),
        ),
        Table(
            "accepted_length",
            f"Accepted-length histogram: share of rounds that accepted n draft tokens{where}",
            ("Method",),
            tuple(Column(f"n={n}", _share(f"hist_{n}")) for n in range(L + 1)),
        ),
    )


@dataclass(frozen=True)
class Grid:
    """A laid-out table: header, rows of cells (a dimension's value, or an estimate), caption."""

    name: str
    title: str
    caption: str
    header: list[str]
    rows: list[list[Value | Estimate]]
    bold: set[tuple[int, int]]  # (row, column) of the best values, as the papers bold them


def caption_of(points: list[Point], shown: set[str], note: str) -> str:
    """The dimensions constant across the points (and not in the table), then ``note``."""
    return ". ".join(part for part in (constants(points, shown), note) if part)


def half_width(cell: Value | Estimate) -> float | None:
    return cell.half_width if isinstance(cell, Estimate) else None


def lay_out(table: Table, points: list[Point], note: str) -> Grid:
    """The table's grid over ``points``; of points sharing every coordinate the newest is shown."""
    row_dims = [*table.rows, *(d for d in varying(points) if d not in table.rows and d != table.across)]
    across: list[Value] = [None]
    if table.across:
        across = sorted({dimensions(p)[table.across] for p in points}, key=lambda v: sort_key(table.across or "", v))
    cells: dict[tuple[Value, ...], dict[Value, Point]] = {}
    for point in sorted(points, key=lambda p: p.start_time):  # newest last: it wins
        coordinate = dimensions(point)
        cells.setdefault(tuple(coordinate[d] for d in row_dims), {})[coordinate.get(table.across or "")] = point
    keys = sorted(cells, key=lambda key: [sort_key(d, v) for d, v in zip(row_dims, key)])
    header = [*row_dims, *(_header(table, column, value) for value in across for column in table.columns)]
    rows = [
        [*key, *(_cell(column, cells[key].get(value)) for value in across for column in table.columns)] for key in keys
    ]
    if not any(half_width(cell) is not None for row in rows for cell in row):
        note = ""  # nothing to explain: no cell has an interval
    caption = caption_of(points, {*row_dims, table.across or ""}, note)
    return Grid(table.name, table.title, caption, header, rows, bold_cells(table, row_dims, rows))


Cell = tuple[int, int]  # (row, column) of a grid


def bold_cells(table: Table, row_dims: list[str], rows: list[list[Value | Estimate]]) -> set[Cell]:
    """The cells the papers set in bold: of one metric across a dimension (GBV Table 1), each row's
    best; otherwise each metric's best among rows that differ only in the table's last row
    dimension (GBV Table 7: the best method per T and K)."""
    first = len(row_dims)
    contests: list[tuple[list[Cell], int]] = []  # (competing cells, +1 higher or -1 lower is better)
    if table.across is not None:
        (column, *others) = table.columns
        if column.better and not others:
            contests = [([(r, c) for c in range(first, len(row))], column.better) for r, row in enumerate(rows)]
    else:
        last = row_dims.index(table.rows[-1])
        groups: dict[tuple[Value | Estimate, ...], list[int]] = {}
        for r, row in enumerate(rows):
            groups.setdefault(tuple(v for j, v in enumerate(row[:first]) if j != last), []).append(r)
        contests = [
            ([(r, first + i) for r in members], column.better)
            for members in groups.values()
            for i, column in enumerate(table.columns)
            if column.better
        ]
    return {cell for cells, better in contests for cell in best_of(rows, cells, better)}


def best_of(rows: list[list[Value | Estimate]], cells: list[Cell], better: int) -> set[Cell]:
    """The best estimates among ``cells`` (all of a tie; none when every one is equal)."""
    scored = {(r, c): better * cell.value for r, c in cells if isinstance(cell := rows[r][c], Estimate)}
    top = max(scored.values(), default=0.0)
    return {at for at, score in scored.items() if score == top} if len(set(scored.values())) > 1 else set()


def _header(table: Table, column: Column, value: Value) -> str:
    """`K=2` (or the method's name) for a table of one metric across K; `<metric> · K=2` for several."""
    if table.across is None:
        return column.label
    where = value if isinstance(value, str) else f"{table.across}={value}"  # a method is its own name
    return where if len(table.columns) == 1 else f"{column.label} · {where}"


def _cell(column: Column, point: Point | None) -> Estimate | None:
    return None if point is None else column.estimate(point)


def compare_columns(points: list[Point]) -> tuple[Column, ...]:
    """Per verifier found under `compare/<verifier>/`: its block efficiency, accepted tokens and its
    difference to the run's own verifier, each ± its standard error."""
    verifiers = sorted(
        {
            key[len(COMPARE_PREFIX) :].rsplit("/", 1)[0]
            for p in points
            for key in p.metrics
            if key.startswith(COMPARE_PREFIX)
        }
    )
    return tuple(
        Column(f"{verifier} · {label}", _compare(verifier, stat, se))
        for verifier in verifiers
        for stat, se, label in COMPARE_STATS
    )


def _compare(verifier: str, stat: str, se: str) -> Callable[[Point], Estimate | None]:
    def estimate(point: Point) -> Estimate | None:
        value = point.metrics.get(f"{COMPARE_PREFIX}{verifier}/{stat}")
        return None if value is None else Estimate(value, point.metrics.get(f"{COMPARE_PREFIX}{verifier}/{se}"))

    return estimate


CI_NOTE = "± : 95% confidence interval across prompts (times are measured per run: no interval)"
SE_NOTE = "± : one standard error, paired over the same prompts and drafts; Δ is against the run's own verifier"


def grids(layout: tuple[Table, ...], points: list[Point], paper: str = "") -> list[Grid]:
    """The layout's tables, acceptance by depth (``paper``: what the layout's paper shows of it) when runs
    logged it, and the paired comparison when runs logged `compare/` metrics."""
    laid = [lay_out(table, points, CI_NOTE) for table in (*layout, *acceptance_tables(points, paper))]
    if columns := compare_columns(points):
        paired = Table("paired_comparison", "Paired comparison", ("Method",), columns)
        laid.append(lay_out(paired, points, SE_NOTE))
    return laid


def text(value: Value | Estimate, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, Estimate):
        shown = f"{value.value:.{digits}f}"
        return shown if value.half_width is None else f"{shown} ± {value.half_width:.{digits}f}"
    return str(value)


def markdown(grid: Grid) -> str:
    lines = [f"### {grid.title}", "", grid.caption, "", "| " + " | ".join(grid.header) + " |"]
    lines.append("|" + "---|" * len(grid.header))
    for r, row in enumerate(grid.rows):
        cells = [f"**{text(cell)}**" if (r, c) in grid.bold else text(cell) for c, cell in enumerate(row)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def csv_text(grid: Grid) -> str:
    """The grid with each estimate as two columns, the value and the half-width of its interval
    (`<header> ±`, empty without one): numbers, not formatted text."""
    out = io.StringIO()
    writer = csv.writer(out)
    intervals = [any(half_width(row[i]) is not None for row in grid.rows) for i in range(len(grid.header))]
    writer.writerow([name for i, h in enumerate(grid.header) for name in ([h, f"{h} ±"] if intervals[i] else [h])])
    for row in grid.rows:
        writer.writerow([value for i, cell in enumerate(row) for value in _csv_cells(cell, intervals[i])])
    return out.getvalue()


def _csv_cells(cell: Value | Estimate, with_interval: bool) -> list[Value]:
    value = cell.value if isinstance(cell, Estimate) else cell
    half = half_width(cell)
    return [value, "" if half is None else half] if with_interval else [value]


def rich_table(grid: Grid) -> RichTable:
    table = RichTable(title=grid.title, caption=grid.caption)
    for i, name in enumerate(grid.header):
        table.add_column(name, justify="right" if any(isinstance(r[i], Estimate) for r in grid.rows) else "left")
    for r, row in enumerate(grid.rows):
        table.add_row(*(Text(text(cell), style="bold" if (r, c) in grid.bold else "") for c, cell in enumerate(row)))
    return table


@dataclass(frozen=True)
class Source:
    """What a report is about: its name, its layout, its points and the run its files go to
    (None: the experiment's `report` run, created on first use)."""

    name: str
    layout: str
    experiment_id: str
    points: list[Point]
    parent_run_id: str | None


def presets() -> list[str]:
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def preset_experiment(preset: str) -> str:
    """The MLflow experiment a preset's runs go to (its `tracking.experiment`)."""
    if preset not in presets():
        raise ReportError(f"unknown preset {preset!r}; presets (conf/experiment/): {', '.join(presets())}")
    return str(OmegaConf.select(OmegaConf.load(PRESETS_DIR / f"{preset}.yaml"), "tracking.experiment", default=preset))


def layout_of_experiment(name: str) -> str:
    """The layout of the preset writing to this experiment (the one named after it first), else the default."""
    writers = [p for p in presets() if preset_experiment(p) == name and p in LAYOUTS]
    return name if name in writers else next(iter(writers), "default")


def layout_of_sweep(overrides: str) -> str:
    """The preset a sweep ran (`+experiment=NAME` among its overrides), else the default layout."""
    found = re.search(r"\+experiment=(\S+)", overrides)
    return found.group(1) if found and found.group(1) in LAYOUTS else "default"


def read_points(client: MlflowClient, runs: list[Run]) -> list[Point]:
    points = [read_point(client, run) for run in runs]
    check_metrics(points)
    return points


def sweep_source(client: MlflowClient, run_id: str) -> Source:
    """A sweep's finished points; the layout of the preset it ran."""
    children = sweep_children(client, run_id)
    parent = client.get_run(run_id)
    layout = layout_of_sweep(parent.data.params.get("sweep.overrides", ""))
    name = f"{layout if layout != 'default' else 'report'} sweep {run_id[:8]}"  # its run name is a command line
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


def write(source: Source, out: Path) -> list[Path]:
    """tables.md, one CSV per table and the plots that apply, under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    laid = grids(LAYOUTS.get(source.layout, DEFAULT_LAYOUT), source.points, ACCEPTANCE_NOTES.get(source.layout, ""))
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
    Console().print(*(rich_table(grid) for grid in laid))
    return files


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "report"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="speculab-report", description="A sweep's runs as the papers' tables (markdown, CSV) and plots."
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--preset", help=f"a conf/experiment preset: {', '.join(presets())}")
    what.add_argument("--experiment", help="an MLflow experiment name: its finished points, the newest run of each")
    what.add_argument("--run", metavar="PARENT_RUN_ID", help="a sweep's parent run: its finished points")
    parser.add_argument("--uri", help="MLflow tracking URI (default: sqlite:///<cwd>/mlflow.db, as speculab)")
    parser.add_argument("--out", type=Path, help="where the files go (default: reports/<name>)")
    parser.add_argument("--no-log", action="store_true", help="write the files only; log nothing to MLflow")
    args = parser.parse_args(argv)
    fail_fast()
    uri = args.uri or tracking_uri(TrackingConfig())
    client = store_client(uri)
    try:
        if args.run:
            source = sweep_source(client, args.run)
        elif args.preset:
            source = preset_source(client, args.preset)
        else:
            source = experiment_source(client, args.experiment)
    except ReportError as err:
        print(f"speculab-report: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    files = write(source, args.out or Path("reports") / slug(source.name))
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
