"""A speculation profile another tool wrote (`speculab-report --profile FILE`), laid beside the speculab runs of
the same pair and method: acceptance length per step and per request, the per-position rates, the histogram
of accepted draft tokens and the figures by category, the runs' with the intervals they carry (a profile has
none); and a report's table by prompt category.

A run matches a profile where both models match (the checkpoints' ids, `results.profile.checkpoint_id`, or the
pair's name where the profile names it so) and so does the method: the drafter's name in the field
(`DrafterSpec.field_method`) and the verification (`longest_prefix` for a prefix-wise verifier, else
speculab's own algorithm name, as speculab writes its profiles)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from speculab.config.report import ReportColumn
from speculab.registry import ALGORITHMS, DRAFTERS
from speculab.report.layout import Cell, Grid, Table, lay_out
from speculab.report.points import Point, ReportError
from speculab.results.figures import categories_of
from speculab.results.profile import LONGEST_PREFIX, SpeculationProfile
from speculab.stats import MIN_CLUSTERS, Estimate

PROFILE_NOTE = (
    f"speculab's rows: [low, high] a 95% interval over prompts (± a standard error below {MIN_CLUSTERS} prompts); "
    "a profile's figures carry no spread; position j: P(tau >= j), its marginal_accept_rates; n: share of rounds "
    "that accepted n draft tokens"
)


def named(identity: dict[str, Any] | None) -> set[str]:
    """The names a profile gives a model: its id, and a speculab pair's name."""
    return {str(v) for k, v in (identity or {}).items() if k in ("id", "pair", "name") and v}


def matches(point: Point, profile: SpeculationProfile) -> bool:
    """Whether ``point`` measured the profile's pair with its method."""
    shape = point.result.shape
    target, draft = named(profile.target_model), named(profile.draft_checkpoint)
    same_target = point.pair[0] in target or shape.model in target
    same_draft = not draft or point.pair[1] in draft or shape.model in draft
    spec = ALGORITHMS.get(shape.algorithm)
    verification = LONGEST_PREFIX if spec is not None and spec.longest_prefix else shape.algorithm
    drafter = DRAFTERS.get(shape.drafter)
    method = drafter is not None and profile.method in (None, drafter.field_method)
    return same_target and same_draft and method and profile.verification_method == verification


def matching(points: list[Point], profile: SpeculationProfile, where: Path) -> list[Point]:
    """The points of the profile's pair and method; ReportError naming what each side holds where none is."""
    found = [p for p in points if matches(p, profile)]
    if found:
        return found
    held = sorted({f"{p.pair[0] or p.result.shape.model} + {p.pair[1]}, {p.result.shape.method}" for p in points})
    raise ReportError(
        f"--profile {where}: no run of its pair and method (target {sorted(named(profile.target_model))}, draft "
        f"{sorted(named(profile.draft_checkpoint))}, method {profile.method}, verification "
        f"{profile.verification_method}); the runs hold: {'; '.join(held)}"
    )


def profile_columns(K: int, categories: list[str]) -> list[tuple[str, str]]:
    """(header, speculab figure key) of the profile table's columns."""
    return [
        ("acceptance length", "acceptance_length"),
        ("per request", "acceptance_length_per_request"),
        *((f"position {j}", f"position_{j}") for j in range(1, K + 1)),
        *((f"n={n}", f"hist_{n}") for n in range(K + 1)),
        *((f"{c}", f"category/{c}/acceptance_length") for c in categories),
    ]


def profile_row(profile: SpeculationProfile, K: int, categories: list[str]) -> list[Cell]:
    """The profile's figures in the table's columns (None where it has none)."""
    steps = sum(profile.acceptance_length_histogram.values())
    shares = [profile.acceptance_length_histogram.get(str(n + 1), 0) / steps if steps else None for n in range(K + 1)]
    marginals = [*profile.marginal_accept_rates, *([0.0] * K)][:K]
    by_category = profile.per_category or {}
    cells = [
        profile.mean_accept_length,
        profile.mean_accept_length_per_request,
        *marginals,
        *shares,
        *(by_category.get(c, {}).get("mean_accept_length") for c in categories),
    ]
    return [None if v is None else Estimate(float(v)) for v in cells]


def profile_grid(profile: SpeculationProfile, where: Path, points: list[Point]) -> Grid:
    """The profile's row, then each matching run's, in the same columns."""
    found = matching(points, profile, where)
    K = max([profile.num_speculative_tokens, *(p.result.shape.L for p in found)])
    categories = sorted({*(profile.per_category or {}), *(c for p in found for c in categories_of(p.result.figures))})
    columns = profile_columns(K, categories)
    tool = (profile.measurement_conditions or {}).get("engine") or profile.method or "another tool"
    rows: list[list[Cell]] = [[f"profile {where.name}", str(tool)[:40], *profile_row(profile, K, categories)]]
    for p in found:
        rows.append(
            [f"speculab {p.result.shape.name_parts[0]}", p.name[:40], *(p.result.figures.get(k) for _, k in columns)]
        )
    checks = profile.checks
    said = "passes" if checks.passed else f"fails (1 + Σ marginals {checks.implied_mean_accept_length:.4f})"
    caption = (
        f"The profile {said} its schema's checks; pair {sorted(named(profile.target_model))}, method {profile.method}, "
        f"verification {profile.verification_method}, K={profile.num_speculative_tokens}. {PROFILE_NOTE}"
    )
    title = f"Speculation profile {where.name} beside speculab's runs of the same pair and method"
    return Grid(f"profile_{where.stem}", title, caption, ["source", "run", *(h for h, _ in columns)], rows, set())


CATEGORY_NOTE = f"[low, high]: a 95% interval over the category's prompts (± : a standard error below {MIN_CLUSTERS})"


def category_table(points: list[Point]) -> Table | None:
    """Acceptance length (per step, and per request) by prompt category, a row per point (None: no categories)."""
    categories = sorted({c for p in points for c in categories_of(p.result.figures)})
    if not categories:
        return None
    columns = tuple(
        ReportColumn(f"{c} · {label}", f"category/{c}/{key}")
        for c in categories
        for label, key in (("per step", "acceptance_length"), ("per request", "acceptance_length_per_request"))
    )
    return Table("by_category", "Acceptance length by prompt category", ("Method",), columns)


def category_grids(points: list[Point]) -> list[Grid]:
    table = category_table(points)
    return [] if table is None else [lay_out(table, points, CATEGORY_NOTE)]
