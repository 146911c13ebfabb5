"""A laid-out table (`report.layout.Grid`) as markdown, CSV and a console table.

Markdown and the console write each estimate with the one formatter (`speculab.stats.Estimate`);
the CSV keeps numbers: a figure column, then the ends of its interval or its standard error in
columns of their own where any of its cells has them.
"""

from __future__ import annotations

import csv
import io
import math

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


def spreads(grid: Grid, column: int) -> tuple[str, ...]:
    """What a CSV column carries beside its values: `low`, `high` where a cell has an interval, `se`
    where a cell has a standard error."""
    cells = [row[column] for row in grid.rows if isinstance(row[column], Estimate)]
    interval = ("low", "high") if any(c.has_interval for c in cells if isinstance(c, Estimate)) else ()
    return interval + (("se",) if any(c.has_se for c in cells if isinstance(c, Estimate)) else ())


def csv_text(grid: Grid) -> str:
    """The grid as numbers: each figure's value, then `<header> low`, `<header> high` (its interval's
    ends) or `<header> se` where the column has them, empty where a cell has none."""
    out = io.StringIO()
    writer = csv.writer(out)
    extra = [spreads(grid, i) for i in range(len(grid.header))]
    writer.writerow([name for h, more in zip(grid.header, extra) for name in (h, *(f"{h} {m}" for m in more))])
    for row in grid.rows:
        writer.writerow([value for cell, more in zip(row, extra) for value in _csv_cells(cell, more)])
    return out.getvalue()


def _csv_cells(cell: Cell, more: tuple[str, ...]) -> list[object]:
    if not isinstance(cell, Estimate):
        return [cell, *("" for _ in more)]
    parts = {"low": cell.low, "high": cell.high, "se": cell.se}
    return [cell.value, *("" if math.isnan(parts[m]) else parts[m] for m in more)]


def rich_table(grid: Grid) -> RichTable:
    table = RichTable(title=Text(grid.title), caption=Text(grid.caption))  # text, not rich markup: `[low, high]`
    for i, name in enumerate(grid.header):
        table.add_column(name, justify="right" if any(isinstance(r[i], Estimate) for r in grid.rows) else "left")
    for r, row in enumerate(grid.rows):
        table.add_row(*(Text(text(cell), style="bold" if (r, c) in grid.bold else "") for c, cell in enumerate(row)))
    return table
