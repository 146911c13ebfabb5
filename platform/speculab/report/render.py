"""A laid-out table (`report.layout.Grid`) as markdown, CSV and a console table.

Markdown and the console write each estimate with the one formatter (`format(estimate, spec)`),
the CSV with the one tabular form (`Estimate.cells`): a figure column, then the ends of its
interval or its standard error in columns of their own where any of its cells has them.
"""

from __future__ import annotations

import csv
import io

from rich import box
from rich.console import Console, RenderableType
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


def rich_table(grid: Grid, values_only: bool = False, caption: str = "") -> RichTable:
    """The grid as a console table; ``values_only``: each estimate's value alone, in a borderless
    table (what fits 80 columns where a value with its spread does not), ``caption`` after the grid's."""
    table = RichTable(
        title=Text(grid.title),
        caption=Text(". ".join(filter(None, (grid.caption, caption)))),  # text, not rich markup: `[low, high]`
        box=box.SIMPLE_HEAD if values_only else box.HEAVY_HEAD,
        collapse_padding=values_only,
        show_edge=not values_only,
    )
    for i, name in enumerate(grid.header):
        numeric = any(isinstance(r[i], Estimate) for r in grid.rows)
        table.add_column(name, justify="right" if numeric else "left")
    for r, row in enumerate(grid.rows):
        cells = [f"{cell.value:{DIGITS}}" if values_only and isinstance(cell, Estimate) else text(cell) for cell in row]
        table.add_row(*(Text(cell, style="bold" if (r, c) in grid.bold else "") for c, cell in enumerate(cells)))
    return table


def console_table(grid: Grid, console: Console, full: str) -> RenderableType:
    """The grid as wide as ``console``: whole where it fits unwrapped; else its values alone (headers
    and labels may wrap at spaces, a value never does), saying that ``full`` (a file) has each with its
    spread; else a line saying where it is. A cell cut short shows nothing a person could read."""
    unbounded = console.options.update(max_width=10**6)  # a table's natural width, not the console's
    whole = rich_table(grid)
    if console.measure(whole, options=unbounded).maximum <= console.width:
        return whole
    compact = rich_table(grid, values_only=True, caption=f"Values only at this width: {full} has each with its spread.")
    if console.measure(compact, options=unbounded).minimum <= console.width:
        return compact
    return Text(f"{grid.title}: wider than this console ({console.width} columns); it is in {full}.")
