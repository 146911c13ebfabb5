"""How `speculab-report` lays out a preset's runs: `report:` in `conf/experiment/<name>.yaml` names the
paper's tables (rows, the dimension spread over the columns, the figure columns) and what the paper
gives of acceptance by depth. A run with no preset has no tables here: the report shows its default
ones. The layout says how runs are shown, not what they decode: it is neither part of a point's
identity nor one of its logged params.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import MISSING

from speculab.config.errors import choice

# A point's coordinates, in the order tables list them; a dimension a table does not lay out becomes
# a row column when it varies across the points, or the caption when it does not.
DIMENSIONS = ("Model pair", "Dataset", "Method", "K", "L", "B", "T", "Top-k", "Prompts", "New tokens", "Batch", "Seed")


@dataclass(frozen=True)
class ReportColumn:
    """A figure column: its header, the figure's key (`speculab.results.names`; the autoregressive
    baseline's with `baseline`), a factor for its unit (a share as a percentage) and which way is better
    (+1 higher, -1 lower, 0 neither: the papers set each row's best in bold)."""

    label: str
    key: str
    better: int = 0
    scale: float = 1.0
    baseline: bool = False


# The figure columns a table may name, with the papers' headers.
COLUMNS = {
    "block_efficiency": ReportColumn("Block efficiency (tokens/M_p-call)", "block_efficiency", +1),
    "tau": ReportColumn("τ", "block_efficiency", +1),  # DDTree's acceptance length counts the bonus token
    "walltime": ReportColumn("Walltime (ms/token)", "ms_per_token", -1),
    "throughput": ReportColumn("Throughput (tokens/s)", "tokens_per_s", +1),
    "speedup": ReportColumn("Speedup over autoregressive", "speedup_vs_ar", +1),
    "autoregressive": ReportColumn("Autoregressive (tokens/s)", "tokens_per_s", baseline=True),  # the same run's
    "draft_cost": ReportColumn("Draft cost (%walltime)", "share_draft", scale=100.0),
    "target_cost": ReportColumn("Target cost (%walltime)", "share_target", scale=100.0),
}


@dataclass
class ReportTable:
    name: str = MISSING  # the file stem of its CSV
    title: str = MISSING
    rows: list[str] = field(default_factory=list)  # DIMENSIONS, in the paper's order
    columns: list[str] = field(default_factory=list)  # COLUMNS
    across: str | None = None  # a dimension spread over the columns (GBV Table 1's K)


@dataclass
class ReportConfig:
    tables: list[ReportTable] = field(default_factory=list)  # the paper's; empty: the report's default tables
    acceptance_note: str | None = None  # what the paper gives of acceptance by depth, in the report's titles


def report_errors(report: ReportConfig) -> list[str]:
    """One line per table field that names no dimension or column."""
    errors: list[str] = []
    for i, table in enumerate(report.tables):
        where = f"report.tables[{i}]"
        for dimension in table.rows:
            choice(errors, f"{where}.rows", dimension, DIMENSIONS)
        if table.across is not None:
            choice(errors, f"{where}.across", table.across, DIMENSIONS)
        if not table.columns:
            errors.append(f"{where}.columns: empty; name one or more of {', '.join(COLUMNS)}")
        for column in table.columns:
            choice(errors, f"{where}.columns", column, tuple(COLUMNS))
    return errors
