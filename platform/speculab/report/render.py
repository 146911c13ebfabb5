"""A laid-out table (`report.layout.Grid`) as markdown, CSV and a console table.

Markdown and the console write each estimate with the one formatter (`format(estimate, spec)`),
the CSV with the one tabular form (`Estimate.cells`): a figure column, then the ends of its
interval or its standard error in columns of their own where any of its cells has them.
"""

from __future__ import annotations

import csv
import io

from rich.table import Table as RichTable
from rich.text import Text

from speculab.report.layout import Cell, Grid
from speculab.stats import Estimate

DIGITS = ".3f"


def text(cell: Cell) -> str:
    if cell is None:
        return "–"
    return f"{cell:{DIGITS}}" if isinstance(cell, Estimate) else str(cell)


def markdown(grid: Grid) -> str:
    lines = [f"### {grid.title}", "", grid.caption, "", "| " + " | ".join(grid.header) + " |"]
    lines.append("|" + "---|" * len(grid.header))
    for r, row in enumerate(grid.rows):
        cells = [f"**{text(cell)}**" if (r, c) in grid.bold else text(cell) for c, cell in enumerate(row)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def csv_text(grid: Grid) -> str:
    """The grid as numbers: each figure's value, then the ends of its interval or its standard error in
    columns of their own where a cell of the column has them (`Estimate.cells`), empty where a cell has none."""
    cells = [[c.cells(h) if isinstance(c, Estimate) else {h: c} for h, c in zip(grid.header, row)] for row in grid.rows]
    columns = [list(dict.fromkeys(name for row in cells for name in row[i])) or [h] for i, h in enumerate(grid.header)]
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow([name for names in columns for name in names])
    for row in cells:
        writer.writerow([_blank(row[i].get(name)) for i, names in enumerate(columns) for name in names])
    return out.getvalue()


def _blank(value: object) -> object:
    return "" if value is None else value


def rich_table(grid: Grid) -> RichTable:
    table = RichTable(title=Text(grid.title), caption=Text(grid.caption))  # text, not rich markup: `[low, high]`
    for i, name in enumerate(grid.header):
        table.add_column(name, justify="right" if any(isinstance(r[i], Estimate) for r in grid.rows) else "left")
    for r, row in enumerate(grid.rows):
        table.add_row(*(Text(text(cell), style="bold" if (r, c) in grid.bold else "") for c, cell in enumerate(row)))
    return table
