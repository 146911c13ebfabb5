"""Which tables a report shows: a preset's paper tables (`report:` in `conf/experiment/<name>.yaml`,
`config.report`), or the default ones, then acceptance by depth where the runs drafted, and the
paired comparison where they compared verifiers."""

from __future__ import annotations

from speculab.config.report import COLUMNS, ReportColumn, ReportConfig
from speculab.report.layout import Grid, Table, lay_out
from speculab.report.points import Point
from speculab.report.profiles import category_grids
from speculab.results.names import COMPARED, compare_key, compared_verifiers
from speculab.show.acceptance import reached_depth
from speculab.stats import MIN_CLUSTERS, MIN_UNITS

DEFAULT_LAYOUT = (
    Table(
        "block_efficiency",
        "Block efficiency (tokens/M_p-call) by K",
        ("Method", "L", "T"),
        (COLUMNS["block_efficiency"],),
        "K",
    ),
    Table("walltime", "Walltime (ms/token) by K", ("Method", "L", "T"), (COLUMNS["walltime"],), "K"),
    Table(
        "points",
        "Every point",
        ("Method", "K", "L", "T"),
        tuple(COLUMNS[name] for name in ("block_efficiency", "throughput", "walltime", "speedup")),
    ),
)


def layout_of(report: ReportConfig) -> tuple[Table, ...]:
    """A preset's tables (`report.tables`), or the default ones where it names none."""
    return (
        tuple(
            Table(t.name, t.title, tuple(t.rows), tuple(COLUMNS[name] for name in t.columns), t.across)
            for t in report.tables
        )
        or DEFAULT_LAYOUT
    )


CI_NOTE = (
    f"[low, high]: a 95% interval over units (bootstrap-t of a ratio of totals, from {MIN_CLUSTERS} units; a typical "
    f"unit's speedup: order statistics, from {MIN_UNITS}); ± : an acceptance figure's standard error below "
    f"{MIN_CLUSTERS} prompts; the time split is one measurement a run; bold: the best of its row or group where "
    "every other point of it is ruled out (Hsu's comparisons with the best, paired over shared prompts, 5% "
    "family-wise over the tables' contests)"
)
SE_NOTE = (
    f"[low, high]: a 95% interval over prompts (± : a standard error below {MIN_CLUSTERS}); relative: the verifier's "
    "acceptance length over the run's own verifier's on the same drafts, paired by prompt"
)
LABELS = {"acceptance_length": "acceptance length", "accepted_mean": "accepted", "relative": "relative"}


def acceptance_tables(points: list[Point], paper: str) -> tuple[Table, ...]:
    """alpha_j and the overlap per depth, and the accepted-length histogram, up to the deepest depth a
    point's rounds reached (none when no point drafted); ``paper``: what the preset's paper shows of them."""
    L = max((reached_depth(p.result.figures) for p in points), default=0)
    if not L:
        return ()
    depths = range(1, L + 1)
    where = f" ({paper})" if paper else ""
    return (
        Table(
            "acceptance_alpha",
            f"Acceptance by depth: α_j = P(depth j accepted | depths 1..j-1 accepted){where}",
            ("Method",),
            tuple(ReportColumn(f"α_{j}", f"alpha_{j}") for j in depths),
        ),
        Table(
            "acceptance_overlap",
            "Overlap by depth: mean Σ_x min(p_j, q_j) over the rounds that reached depth j (α_j under token "
            "verification of one path; ov_j)",
            ("Method",),
            tuple(ReportColumn(f"ov_{j}", f"overlap_{j}") for j in depths),
        ),
        Table(
            "accepted_length",
            f"Accepted-length histogram: share of rounds that accepted n draft tokens{where}",
            ("Method",),
            tuple(ReportColumn(f"n={n}", f"hist_{n}") for n in range(L + 1)),
        ),
    )


def compare_columns(points: list[Point]) -> tuple[ReportColumn, ...]:
    """Per verifier found under `compare/<verifier>/`: its acceptance length, accepted tokens and its ratio
    to the run's own verifier, each with its interval (or standard error)."""
    verifiers = sorted({v for p in points for v in compared_verifiers(p.result.figures)})
    return tuple(
        ReportColumn(f"{verifier} · {LABELS[figure]}", compare_key(verifier, figure))
        for verifier in verifiers
        for figure in COMPARED
    )


def grids(layout: tuple[Table, ...], points: list[Point], paper: str = "") -> list[Grid]:
    """The layout's tables, acceptance by depth (``paper``: what the layout's paper shows of it) when runs
    logged it, acceptance by prompt category when their prompts carried one, and the paired comparison when
    runs logged `compare/` figures."""
    laid = [lay_out(table, points, CI_NOTE) for table in (*layout, *acceptance_tables(points, paper))]
    laid += category_grids(points)
    if columns := compare_columns(points):
        laid.append(lay_out(Table("paired_comparison", "Paired comparison", ("Method",), columns), points, SE_NOTE))
    return laid
