"""A sweep as its parent run names it: its name, the labels that tell its points apart, and the
figures of its answer (`results.verdicts.sweep_answer`: the points ranked, the leader named only
where the rule separates it from every other point).

Points come from their own results in this process (`MlflowSweepCallback`), so the answer is
written (or spooled) even when MLflow was down during the sweep. What the parent run shows of it
is `tracking.sweep_page`'s.
"""

from __future__ import annotations

import math

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override

from speculab.results.names import HEADLINE, mlflow_name
from speculab.results.point import NAME_JOIN, PointResult, PointShape
from speculab.results.verdicts import ContrastCell, SweepAnswer, rank_key, ranked
from speculab.stats import Estimate, ratio_text


def swept(overrides: list[str]) -> list[Override]:
    """The overrides of a list that Hydra sweeps (`a=1,2`, `range(...)`, `choice(...)`), not a list value
    (`algorithm.compare=[gbv,spectr]`)."""
    return [o for o in OverridesParser.create().parse_overrides(overrides) if o.is_sweep_override()]


def swept_keys(overrides: list[str]) -> list[str]:
    """The keys (or config groups) an override list sweeps."""
    return [o.key_or_group for o in swept(overrides)]


def sweep_name(shape: PointShape, overrides: list[str]) -> str:
    """The parent run's name: what is swept, then the settings every point shares (algorithm, K or the
    tree, L, T, drafter, dataset, model: those no swept key or group touches), from a point's shape."""
    varied_keys = swept_keys(overrides)

    def held(*keys: str) -> bool:
        return not any(k == s or k.startswith(f"{s}.") for k in keys for s in varied_keys)

    draft = ("algorithm.K",) if shape.tree is None else ("algorithm.tree", "algorithm.budget")
    parts = [
        *([shape.algorithm] if held("algorithm.name") else []),
        *([shape.draft] if held(*draft) else []),
        *([f"L={shape.length}"] if held("algorithm.L") else []),
        *([shape.stopped.strip()] if shape.stopped and held("algorithm.confidence_stop") else []),
        *([f"T={shape.temperature}"] if held("sampling.temperature") else []),
    ]
    fixed = [" ".join(parts)] if parts else []
    if held("drafter.name"):
        fixed.append(shape.drafter)
    if held("dataset.name", "dataset.num_prompts"):
        fixed.append(f"{shape.dataset}×{shape.prompt_count}")
    if held("model.name"):
        fixed.append(shape.model)
    varied = " ".join(o.input_line or "" for o in swept(overrides)) or " ".join(overrides)
    return NAME_JOIN.join([f"sweep {varied}".strip(), *fixed])


def figure(point: PointResult, key: str) -> Estimate:
    """A point's figure, NaN where it has none (a sweep without a baseline has no speedups)."""
    return point.figures.get(key, Estimate(math.nan))


def _parts(points: list[PointResult]) -> tuple[list[tuple[str, str, str, str]], set[int]]:
    """Each point's name parts, and the positions where every point has the same part."""
    parts = [p.shape.name_parts for p in points]
    return parts, {i for i in range(min(map(len, parts))) if len({p[i] for p in parts}) == 1}


def labels(points: list[PointResult]) -> dict[str, str]:
    """Point name -> the parts of it that not every point shares."""
    parts, shared = _parts(points)
    kept = [NAME_JOIN.join(x for i, x in enumerate(p) if i not in shared) for p in parts]
    return {p.shape.name: label or p.shape.name for p, label in zip(points, kept)}


def shared_name(points: list[PointResult]) -> str:
    """The parts of the point names that every point shares, joined as in a name."""
    parts, shared = _parts(points)
    return NAME_JOIN.join(parts[0][i] for i in sorted(shared))


def cell(point: PointResult, key: str) -> str:
    """A figure of a point's row (`figure_text`)."""
    return figure_text(key, figure(point, key))


def figure_text(key: str, found: Estimate) -> str:
    """A figure as a table shows it: a ratio (a speedup) with enough digits to show its interval's side of 1."""
    return ratio_text(found) if key.startswith(("speedup", "typical")) else f"{found:.3g}"


IN_THE_RUNNING = "sweep/points_in_the_running"  # the leader and the points not ruled out as the fastest


def best_metrics(answer: SweepAnswer) -> dict[str, float]:
    """The best point's headline figures as `best/<name>` (none without one), and how many points are in
    the running (the leader and those not ruled out as the fastest)."""
    metrics = {IN_THE_RUNNING: float(len(answer.running()))}
    if answer.best is not None:
        best = answer.best.figures
        metrics |= {f"best/{mlflow_name(key)}": best[key].value for key in HEADLINE if key in best}
    return metrics


def ranking_line(points: list[PointResult], key: str | None = None) -> str:
    """Every point in ranking order by ``key`` (the ranking figure) on one line, each with its spread."""
    key, short = key or rank_key(points), labels(points)
    return f"Ranked by {key}: " + "; ".join(
        f"{place}. {short[p.shape.name]} {cell(p, key)}" for place, p in enumerate(ranked(points, key), start=1)
    )


def contrast_cells(overrides: list[list[str]], contrast: str) -> tuple[list[ContrastCell], list[str]]:
    """Each point's place in the contrast of the swept key (or group) `contrast`, from its overrides: its
    value there and the setting of the other keys the sweep varies; and the contrasted values in the
    sweep's order."""
    parsed = [dict(o.split("=", 1) for o in job if "=" in o) for job in overrides]
    varied = [k for k in dict.fromkeys(k for job in parsed for k in job) if len({job.get(k) for job in parsed}) > 1]
    cells = [
        ContrastCell(job.get(contrast, ""), tuple(f"{k}={job.get(k, '')}" for k in varied if k != contrast))
        for job in parsed
    ]
    return cells, list(dict.fromkeys(cell.value for cell in cells))
