"""Which tables a report shows: a preset's paper tables (`conf/experiment/<name>.yaml`, `report:`),
or the default ones, then acceptance by depth where the runs drafted, and the paired comparison
where they compared verifiers."""

from __future__ import annotations

from speculab.paired import PREFIX as COMPARE_PREFIX
from speculab.report.layout import Column, Grid, Table, lay_out
from speculab.report.points import Point
from speculab.tracking.acceptance import reached_depth

# The figure columns a table may name, with the papers' headers.
COLUMNS = {
    "block_efficiency": Column("Block efficiency (tokens/M_p-call)", "block_efficiency", +1),
    "tau": Column("τ", "block_efficiency", +1),  # DDTree's acceptance length counts the bonus token
    "walltime": Column("Walltime (ms/token)", "ms_per_token", -1),
    "throughput": Column("Throughput (tokens/s)", "tokens_per_s", +1),
    "speedup": Column("Speedup over autoregressive", "speedup_vs_ar", +1),
    "autoregressive": Column("Autoregressive (tokens/s)", "tokens_per_s", baseline=True),  # the same run's
    "draft_cost": Column("Draft cost (%walltime)", "share_draft", scale=100.0),
    "target_cost": Column("Target cost (%walltime)", "share_target", scale=100.0),
}


def named(name: str, title: str, rows: tuple[str, ...], columns: tuple[str, ...], across: str | None = None) -> Table:
    """A table whose figure columns are COLUMNS' names."""
    return Table(name, title, rows, tuple(COLUMNS[column] for column in columns), across)


DEFAULT_LAYOUT = (
    named(
        "block_efficiency", "Block efficiency (tokens/M_p-call) by K", ("Method", "L", "T"), ("block_efficiency",), "K"
    ),
    named("walltime", "Walltime (ms/token) by K", ("Method", "L", "T"), ("walltime",), "K"),
    named(
        "points", "Every point", ("Method", "K", "L", "T"), ("block_efficiency", "throughput", "walltime", "speedup")
    ),
)
DDTREE_TABLE1 = (
    named(
        "table1",
        "DDTree Table 1: speedup over autoregressive decoding and τ, every budget B (the paper shows the best)",
        ("Dataset", "T", "Method", "B"),
        ("speedup", "tau", "throughput", "autoregressive"),
    ),
)
SPECTR_GBV_TABLE1 = (
    named(
        "table1",
        "SpecTr-GBV Table 1: block efficiency (BE) and speedup ratio (SR); SpecTr-GBV at K >= 2 is not lossless",
        ("Dataset", "Method", "K"),
        ("block_efficiency", "speedup", "walltime"),
    ),
)
LAYOUTS: dict[str, tuple[Table, ...]] = {
    "gbv_table1": (
        named(
            "table1",
            "GBV Table 1: block efficiency (tokens/M_p-call)",
            ("Model pair", "Dataset", "L"),
            ("block_efficiency",),
            "K",
        ),
        named("table2", "GBV Table 2: walltime (ms/token)", ("Model pair", "Dataset", "L"), ("walltime",), "K"),
        named(
            "table6",
            "GBV Table 6: draft length ablation",
            ("L", "K"),
            ("block_efficiency", "walltime", "draft_cost", "target_cost"),
        ),
    ),
    "gbv_table7": (
        named(
            "table7",
            "GBV Table 7: multi-path comparison",
            ("T", "K", "Method"),
            ("block_efficiency", "throughput", "walltime"),
        ),
    ),
    "bv_table4": (
        named("table4", "BV Table 4: block efficiency", ("Dataset", "L"), ("block_efficiency",), "Method"),
        named(
            "speedup",
            "BV Tables 1, 6-7: wall clock time speedup over autoregressive",
            ("Dataset", "L"),
            ("speedup",),
            "Method",
        ),
    ),
    "ddtree_table1": DDTREE_TABLE1,
    "ddtree_chain": DDTREE_TABLE1,
    "spectr_gbv_table1": SPECTR_GBV_TABLE1,
    "spectr_gbv_table1_single": SPECTR_GBV_TABLE1,
    "global_resolution_table4": (
        named(
            "table4",
            "Global Resolution Table 4: SpecTr per-node rules",
            ("K", "Method"),
            ("block_efficiency", "speedup"),
        ),
    ),
}
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
# compare/<verifier>/<figure>, as the paired comparison logs them (each with its standard error)
COMPARE_FIGURES = (
    ("block_efficiency", "block efficiency"),
    ("accepted_mean", "accepted tokens"),
    ("diff_block_efficiency", "Δ block efficiency"),
)
CI_NOTE = "[low, high]: 95% interval over prompts (times are measured per run: no interval)"
SE_NOTE = "± : one standard error, paired over the same prompts and drafts; Δ is against the run's own verifier"


def acceptance_tables(points: list[Point], paper: str) -> tuple[Table, ...]:
    """alpha_j and the overlap per depth, and the accepted-length histogram, up to the deepest depth a
    point's rounds reached (none when no point drafted); ``paper``: what the preset's paper shows of them."""
    L = max((reached_depth(p.figures) for p in points), default=0)
    if not L:
        return ()
    depths = range(1, L + 1)
    where = f" ({paper})" if paper else ""
    return (
        Table(
            "acceptance_alpha",
            f"Acceptance by depth: α_j = P(depth j accepted | depths 1..j-1 accepted){where}",
            ("Method",),
            tuple(Column(f"α_{j}", f"alpha_{j}") for j in depths),
        ),
        Table(
            "acceptance_overlap",
            "Overlap by depth: mean Σ_x min(p_j, q_j) over the rounds that reached depth j (α_j under token "
            "verification of one path)",
            ("Method",),
            tuple(Column(f"overlap_{j}", f"overlap_{j}") for j in depths),
        ),
        Table(
            "accepted_length",
            f"Accepted-length histogram: share of rounds that accepted n draft tokens{where}",
            ("Method",),
            tuple(Column(f"n={n}", f"hist_{n}") for n in range(L + 1)),
        ),
    )


def compare_columns(points: list[Point]) -> tuple[Column, ...]:
    """Per verifier found under `compare/<verifier>/`: its block efficiency, accepted tokens and its
    difference to the run's own verifier, each ± its standard error."""
    verifiers = sorted(
        {
            key.removeprefix(COMPARE_PREFIX).split("/")[0]
            for p in points
            for key in p.figures
            if key.startswith(COMPARE_PREFIX)
        }
    )
    return tuple(
        Column(f"{verifier} · {label}", f"{COMPARE_PREFIX}{verifier}/{figure}")
        for verifier in verifiers
        for figure, label in COMPARE_FIGURES
    )


def grids(layout: tuple[Table, ...], points: list[Point], paper: str = "") -> list[Grid]:
    """The layout's tables, acceptance by depth (``paper``: what the layout's paper shows of it) when runs
    logged it, and the paired comparison when runs logged `compare/` figures."""
    laid = [lay_out(table, points, CI_NOTE) for table in (*layout, *acceptance_tables(points, paper))]
    if columns := compare_columns(points):
        laid.append(lay_out(Table("paired_comparison", "Paired comparison", ("Method",), columns), points, SE_NOTE))
    return laid
