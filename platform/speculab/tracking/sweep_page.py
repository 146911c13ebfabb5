"""What a sweep's parent run shows of its answer (`results.verdicts.sweep_answer`): one row per
finished point, ranked, as markdown, CSV and a console table (with the leader's ratio over each
point and its verdict), a chart of the points, and a description that opens with the verdict. A
point that a resumed sweep (`resume=true`) skipped returns the figures its
earlier run logged, so the parent of the resumed launch still reports every point of the sweep,
those rows marked `resumed`.
"""

from __future__ import annotations

import csv
import io
import math
from typing import Any

from speculab.process.jobs import ReplicaLost
from speculab.results.names import AHEAD_TABLED, HEADLINE, HF_PREFIX
from speculab.results.point import FailedPoint, PointResult
from speculab.results.sweep import cell, labels, ranking_line, shared_name
from speculab.results.verdicts import OVER, SweepAnswer, ranked
from speculab.show.answers import baselines_sentence, headline_note, leader_cell, leader_detail, leader_headline
from speculab.show.requests import FILE as REQUESTS_FIGURE
from speculab.show.sweep import LEADER_OVER, contrast_markdown
from speculab.stats import ratio_text
from speculab.tracking.run_page import REPLICA_LOST_TAG

# the figures of the sweep's table, where any point has them: the headline, the acceptance length both ways (a
# person sorts the MLflow table `sweep_points.json` by either), drafting ahead's, and algorithm.L=auto's (what
# the policy chose, how well it predicted, what it cost), and algorithm.budget=auto's mean budget
ACCEPTANCE_TABLED = ("acceptance_length", "acceptance_length_per_request")
ADAPTIVE_TABLED = (
    "adaptive_length_mean", "adaptive_length_0", "adaptive_budget_mean", "adaptive_calibration", "adaptive_policy_ms"
)  # fmt: skip
TABLED = (*HEADLINE, *ACCEPTANCE_TABLED, *AHEAD_TABLED, *ADAPTIVE_TABLED)

RESUMED = "resumed"  # the table's column of points finished in an earlier launch (`resume=true`)
HF_SPEEDUP = f"{HF_PREFIX}speedup_vs_ar"  # the table's column of generate's own paired speedup over the engine's loop


def cells(point: PointResult, key: str) -> dict[str, float]:
    return point.figures[key].cells(key)


def point_row(point: PointResult) -> dict[str, Any]:
    """A point's row as numbers: its name and shape, then its headline figures (and, drafted ahead, its
    hit rate and what it cost), each with the ends of its interval where it has one (`Estimate.cells`),
    generate's speedup over the engine's loop and, for a point finished in an earlier launch, `resumed: yes`."""
    figures = {name: value for key in TABLED if key in point.figures for name, value in cells(point, key).items()}
    reference = {} if math.isnan(point.generate_vs_ar) else {HF_SPEEDUP: round(point.generate_vs_ar, 4)}
    resumed = {RESUMED: "yes"} if point.resumed else {}
    return {"point": point.shape.name, **point.shape.columns(), **figures, **reference, **resumed}


def table_rows(points: list[PointResult]) -> list[dict[str, Any]]:
    """Rows with the same columns, in ranking order; a column no point has a value in is left out
    (`budget` in a sweep without a best-first tree)."""
    rows = [point_row(point) for point in ranked(points)]
    columns = list(dict.fromkeys(column for row in rows for column in row))
    return [{column: row.get(column, "") for column in columns} for row in rows]


def sweep_markdown(points: list[PointResult]) -> str:
    """Every point in ranking order: its name and shape, each headline figure with its interval,
    generate's speedup over the engine's loop and which points an earlier launch finished."""
    rows = table_rows(points)
    shape = ["point", *dict.fromkeys(column for p in points for column in p.shape.columns())]
    figures = [key for key in TABLED if any(key in p.figures for p in points)]
    columns = [*shape, *figures, *(c for c in (HF_SPEEDUP, RESUMED) if c in rows[0])]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for point, row in zip(ranked(points), rows):
        cells = [cell(point, c) if c in TABLED else str(row[c]) for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def sweep_csv(points: list[PointResult]) -> str:
    rows = table_rows(points)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def ranking_markdown(answer: SweepAnswer) -> str:
    """Every point in ranking order, named by what sets it apart, each figure with its interval, and the
    leader's ratio over it with its verdict."""
    points = answer.ranked
    short, shown = labels(points), [key for key in HEADLINE if any(key in p.figures for p in points)]
    lines = [f"| # | point | {' | '.join(shown)} | {LEADER_OVER} |", "|" + "---|" * (len(shown) + 3)]
    versus = ["", *(leader_cell(answer, at) for at in range(1, len(points)))]
    for place, (point, over) in enumerate(zip(points, versus), start=1):
        figures = " | ".join(cell(point, f) for f in shown)
        lines.append(f"| {place} | {short[point.shape.name]} | {figures} | {over} |")
    return "\n".join(lines) + "\n"


def answer_line(answer: SweepAnswer) -> str:
    """The ranking in one line, each point's figure with its interval simultaneous over the points (what
    the console's ranking and the chart show)."""
    short = labels(answer.ranked)
    listed = "; ".join(
        f"{place}. {short[p.shape.name]} {ratio_text(shown)}"
        for place, (p, shown) in enumerate(zip(answer.ranked, answer.figures), start=1)
    )
    return f"Ranked by {answer.key} (intervals simultaneous over the {len(answer.ranked)} points): {listed}"


def failure_line(failed: list[FailedPoint], total: int) -> str:
    """The sweep's failed points, first in its description: how many, which, and why."""
    which = "; ".join(f"{point.shape.name}: {point.reason}" for point in failed)
    return (
        f"**{len(failed)} of {total} points failed** (each run FAILED with the units it finished; "
        f"`resume=true` reruns them): {which}."
    )


def lost_line(lost: list[tuple[ReplicaLost, str | None]]) -> str:
    """The attempts a lost replica cut short, each with its run's link (FAILED, tagged REPLICA_LOST_TAG)."""
    said = []
    for attempt, link in lost:
        run = f"[its run]({link})" if link else "its run"
        said.append(f"replica {attempt.replica + 1} was lost during {attempt.point} ({attempt.why}); {run}")
    return (
        f"**{len(lost)} attempt(s) cut short by a lost replica**, each point run again on another replica; "
        f"the lost attempts' runs are FAILED and tagged `{REPLICA_LOST_TAG}`: {'; '.join(said)}."
    )


def sweep_description(
    overrides: str,
    answer: SweepAnswer | None,
    failed: list[FailedPoint],
    lost: list[tuple[ReplicaLost, str | None]] | None = None,
    race: list[str] | None = None,
) -> str:
    """The parent's description: failed points, the verdict in a few words and the ranking first (MLflow
    shows a description's first five lines only, until "Show more"), then what the verdict rests on, the
    contrasts asked for, the points against the baselines, the ranking by block efficiency and the table;
    the attempts of lost replicas (with their runs' links, `lost`) after the ranking. `answer`: the sweep's
    verdicts on its finished points (None: none finished); ``race``: a racing sweep's stages in words
    (`show.answers.race_lines`), after the verdict."""
    points = answer.ranked if answer is not None else []
    failures = f"{failure_line(failed, len(points) + len(failed))}\n\n" if failed else ""
    failures += f"{lost_line(lost)}\n\n" if lost and not points else ""
    if answer is None:
        return f"{failures}Sweep `{overrides}`: no point finished."
    short = labels(points)
    headline, detail = (
        said(answer, lambda point: short[point.shape.name]) for said in (leader_headline, leader_detail)
    )
    shared = f" Every point: {shared_name(points)}." if shared_name(points) else ""
    resumed = sum(point.resumed for point in points)
    earlier = (
        f" {resumed} of these points finished in an earlier launch of this sweep (`resume=true`, column `{RESUMED}`): "
        "their runs stay nested under that launch's parent and are tagged as points of this one, so this run's "
        "link and `speculab-report --run` show them."
        if resumed
        else ""
    )
    by_efficiency = ranking_line(points, "block_efficiency")
    by_acceptance = "".join(
        f"{ranking_line(points, key)}.\n\n" for key in ACCEPTANCE_TABLED if any(key in p.figures for p in points)
    )
    note = f" Note: {headline_note(points)}." if headline_note(points) else ""
    replicas = f"{lost_line(lost)}\n\n" if lost else ""
    contrasts = f"{contrast_markdown(answer)}\n" if answer.contrasts else ""
    contrasts += "".join(f"- Race, {line}.\n" for line in race or []) + ("\n" if race else "")
    counts = baselines_sentence(answer, OVER)
    return (
        f"{failures}{headline} {answer_line(answer)}\n\n{replicas}{detail}\n\n{contrasts}{counts}{note}\n\n"
        f"{by_efficiency}; block efficiency is the same on any machine.\n\n{by_acceptance}"
        f"Sweep `{overrides}`: {len(points)} finished point(s), ranked by {answer.key} (totals of paired, "
        f"interleaved measurements; intervals over units, conditional on the load during this run).{shared}{earlier} "
        "Every column: `sweep_table.md`, `sweep_table.csv`; the plot: `sweep_points.png`; acceptance by draft "
        f"depth: `acceptance_by_depth.png`, `.md`, `.csv`; per request: `{REQUESTS_FIGURE}`.\n\n"
        f"{ranking_markdown(answer)}"
    )


NOTE_LIMIT = 8000  # characters of a run's description MLflow keeps


def within_limit(text: str, artifact: str) -> str:
    """``text`` cut at its last whole line within MLflow's limit, saying where the whole of it is."""
    if len(text) <= NOTE_LIMIT:
        return text
    tail = f"\n\n… the whole description: `{artifact}`"
    return text[: text.rfind("\n", 0, NOTE_LIMIT - len(tail))] + tail
