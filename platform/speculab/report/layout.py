"""A report's tables: which figures a paper's table shows and how its rows and columns run
(`Table`), laid out over the points as a grid of cells (`lay_out` -> `Grid`).

A table names its row dimensions, optionally one dimension spread over the columns (GBV Table 1's
K), and its figure columns; dimensions it does not name become rows where they vary across the
points and the caption where they do not. Every cell is a dimension's value or the point's
`Estimate`, as it was measured (`speculab.results`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from speculab.config.report import ReportColumn
from speculab.report.points import Point, Value, constants, dimensions, sort_key, varying
from speculab.results.verdicts import Contest, winners
from speculab.stats import Estimate


def estimate(column: ReportColumn, point: Point) -> Estimate | None:
    """The point's figure of ``column`` (its autoregressive baseline's where the column says), in the
    column's unit; None where the point has none."""
    figures = point.result.autoregressive if column.baseline else point.result.figures
    found = None if figures is None else figures.get(column.key)
    if found is None or column.scale == 1.0:
        return found
    s = column.scale
    return replace(found, value=found.value * s, low=found.low * s, high=found.high * s, se=found.se * s)


@dataclass(frozen=True)
class Table:
    """A paper table: `rows` name its row dimensions, `across` a dimension spread over the columns,
    `columns` its figures."""

    name: str  # file stem
    title: str
    rows: tuple[str, ...]
    columns: tuple[ReportColumn, ...]
    across: str | None = None


Cell = Value | Estimate
At = tuple[int, int]  # (row, column) of a grid


@dataclass(frozen=True)
class Grid:
    """A laid-out table: header, rows of cells, caption, and the cells set in bold."""

    name: str
    title: str
    caption: str
    header: list[str]
    rows: list[list[Cell]]
    bold: set[At]  # the best values, as the papers bold them, where the verdict rule separates them


def lay_out(table: Table, points: list[Point], note: str) -> Grid:
    """The table's grid over ``points``; of points sharing every coordinate the newest is shown.
    ``note`` (what the intervals are) joins the caption where a cell has one."""
    row_dims = [*table.rows, *(d for d in varying(points) if d not in table.rows and d != table.across)]
    across: list[Value] = [None]
    if table.across:
        across = sorted({dimensions(p)[table.across] for p in points}, key=sort_key)
    cells: dict[tuple[Value, ...], dict[Value, Point]] = {}
    for point in sorted(points, key=lambda p: p.start_time):  # newest last: it wins
        coordinate = dimensions(point)
        cells.setdefault(tuple(coordinate[d] for d in row_dims), {})[coordinate.get(table.across or "")] = point
    keys = sorted(cells, key=lambda key: [sort_key(v) for v in key])
    header = [*row_dims, *(_header(table, column, value) for value in across for column in table.columns)]
    rows: list[list[Cell]] = [
        [*key, *(_cell(column, cells[key].get(value)) for value in across for column in table.columns)] for key in keys
    ]
    at = {
        (r, len(row_dims) + i * len(table.columns) + j): behind
        for r, key in enumerate(keys)
        for i, value in enumerate(across)
        if (behind := cells[key].get(value)) is not None
        for j in range(len(table.columns))
    }  # the point behind each figure cell
    measured = any(isinstance(c, Estimate) and (c.has_interval or c.has_se) for row in rows for c in row)
    shown = {*row_dims, table.across or ""}
    caption = ". ".join(part for part in (constants(points, shown), note if measured else "") if part)
    return Grid(table.name, table.title, caption, header, rows, bold_cells(table, row_dims, rows, at))


def bold_cells(table: Table, row_dims: list[str], rows: list[list[Cell]], at: dict[At, Point]) -> set[At]:
    """The cells the papers set in bold, where the verdict rule separates them (`results.verdicts.
    winners`: one family over the table): of one figure across a dimension (GBV Table 1), each row's
    best; otherwise each figure's best among rows that differ only in the table's last row dimension
    (GBV Table 7: the best method per T and K). Only a point's own figures compete (a baseline's column
    does not: its `better` is 0)."""
    first = len(row_dims)
    contests: list[tuple[list[At], ReportColumn]] = []  # competing cells and their column
    if table.across is not None:
        (column, *others) = table.columns
        if column.better and not others:
            contests = [([(r, c) for c in range(first, len(row))], column) for r, row in enumerate(rows)]
    else:
        last = row_dims.index(table.rows[-1])
        groups: dict[tuple[Cell, ...], list[int]] = {}
        for r, row in enumerate(rows):
            groups.setdefault(tuple(v for j, v in enumerate(row[:first]) if j != last), []).append(r)
        contests = [
            ([(r, first + i) for r in members], column)
            for members in groups.values()
            for i, column in enumerate(table.columns)
            if column.better
        ]
    competing = [
        [cell for cell in cells if cell in at and isinstance(rows[cell[0]][cell[1]], Estimate)] for cells, _ in contests
    ]
    found = winners(
        [
            Contest([at[c].result for c in cells], column.key, column.better)
            for cells, (_, column) in zip(competing, contests)
        ]
    )
    return {next(c for c in cells if at[c].result is won) for cells, won in zip(competing, found) if won is not None}


def _header(table: Table, column: ReportColumn, value: Value) -> str:
    """`K=2` (or the method's name) for a table of one figure across K; `<figure> · K=2` for several."""
    if table.across is None:
        return column.label
    where = value if isinstance(value, str) else f"{table.across}={value}"  # a method is its own name
    return where if len(table.columns) == 1 else f"{column.label} · {where}"


def _cell(column: ReportColumn, point: Point | None) -> Estimate | None:
    return None if point is None else estimate(column, point)
