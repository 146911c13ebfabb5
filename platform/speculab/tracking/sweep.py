"""A sweep's answer: its name, its points ranked, and the best point or the points that tie for it.

Points are ranked by `speedup_vs_ar`, a median of paired ratios (`speculab.measure`), which a
busy machine moves far less than raw tokens/s; a sweep without the autoregressive baseline
ranks by tokens/s. The leader is named the best only when its 95% interval lies wholly above
every other point's; otherwise every point whose interval reaches the leader's lower end ties.
Points come from their own results in this process (`MlflowSweepCallback`), so the answer is
written (or spooled) even when MLflow was down during the sweep. What the parent run shows of it
is `tracking.sweep_page`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from speculab.results.names import HEADLINE, mlflow_name
from speculab.results.point import PointResult, PointShape
from speculab.stats import MIN_UNITS, Estimate


@dataclass(frozen=True)
class SweepVerdict:
    """The sweep's answer: its best point, or the points tied for first."""

    key: str  # what the points are ranked by
    tied: list[PointResult]  # the best point alone, or every point tied with the leader

    @property
    def best(self) -> PointResult | None:
        return self.tied[0] if len(self.tied) == 1 else None


def swept_keys(overrides: list[str]) -> list[str]:
    """The keys (or config groups) an override list sweeps: those given several values."""
    return [o.split("=", 1)[0].lstrip("+~") for o in overrides if "," in o]


def sweep_name(shape: PointShape, overrides: list[str]) -> str:
    """The parent run's name: what is swept, then the settings every point shares (algorithm, K or the
    tree, L, T, drafter, dataset, model: those no swept key or group touches), from a point's shape."""
    swept = swept_keys(overrides)

    def held(*keys: str) -> bool:
        return not any(k == s or k.startswith(f"{s}.") for k in keys for s in swept)

    draft = ("algorithm.K",) if shape.tree is None else ("algorithm.tree", "algorithm.budget")
    parts = [
        *([shape.algorithm] if held("algorithm.name") else []),
        *([shape.draft] if held(*draft) else []),
        *([f"L={shape.L}"] if held("algorithm.L") else []),
        *([f"T={shape.temperature}"] if held("sampling.temperature") else []),
    ]
    fixed = [" ".join(parts)] if parts else []
    if held("drafter.name"):
        fixed.append(shape.drafter)
    if held("dataset.name", "dataset.num_prompts"):
        fixed.append(f"{shape.dataset}×{shape.prompt_count}")
    if held("model.name"):
        fixed.append(shape.model)
    varied = " ".join(o for o in overrides if "," in o) or " ".join(overrides)
    return " · ".join([f"sweep {varied}".strip(), *fixed])


def figure(point: PointResult, key: str) -> Estimate:
    """A point's figure, NaN where it has none (a sweep without a baseline has no speedups)."""
    return point.figures.get(key, Estimate(math.nan))


def rank_key(points: list[PointResult]) -> str:
    """speedup_vs_ar where every point has it, else tokens_per_s."""
    return "speedup_vs_ar" if all(not math.isnan(figure(p, "speedup_vs_ar").value) for p in points) else "tokens_per_s"


def ranked(points: list[PointResult], key: str | None = None) -> list[PointResult]:
    """Highest first by ``key`` (the ranking figure, `rank_key`), points without it last."""
    key = key or rank_key(points)
    return sorted(points, key=lambda p: -v if not math.isnan(v := figure(p, key).value) else math.inf)


def verdict(points: list[PointResult]) -> SweepVerdict:
    """The leader alone when its interval lies above every other point's; else the leader and every point
    whose upper end reaches its lower end (a point without an interval cannot be told apart, so it ties)."""
    key = rank_key(points)
    leader, *rest = ranked(points)
    low = figure(leader, key).low

    def reaches(point: PointResult) -> bool:
        return not figure(point, key).high < low  # NaN on either side: not clear

    return SweepVerdict(key, [leader, *(p for p in rest if reaches(p))])


def _parts(points: list[PointResult]) -> tuple[list[list[str]], set[int]]:
    """Each point name's ` · `-separated parts, and the positions where every point has the same part."""
    parts = [p.shape.name.split(" · ") for p in points]
    return parts, {i for i in range(min(map(len, parts))) if len({p[i] for p in parts}) == 1}


def labels(points: list[PointResult]) -> dict[str, str]:
    """Point name -> the parts of it that not every point shares."""
    parts, shared = _parts(points)
    kept = [" · ".join(x for i, x in enumerate(p) if i not in shared) for p in parts]
    return {p.shape.name: label or p.shape.name for p, label in zip(points, kept)}


def shared_name(points: list[PointResult]) -> str:
    """The parts of the point names that every point shares (` · `-joined)."""
    parts, shared = _parts(points)
    return " · ".join(parts[0][i] for i in sorted(shared))


def cell(point: PointResult, key: str) -> str:
    return f"{figure(point, key):.3g}"


def verdict_line(found: SweepVerdict, short: dict[str, str] | None = None) -> str:
    """One sentence: the best point, or which points tie (named by `short` where given)."""

    def name(point: PointResult) -> str:
        return (short or {}).get(point.shape.name, point.shape.name)

    leader = found.tied[0]
    if found.best is not None:
        shown = f"{found.key} {cell(found.best, found.key)}"
        return f"Best: **{name(found.best)}**, {shown}: its 95% interval lies above every other point's."
    if not figure(leader, found.key).has_interval:
        n = figure(leader, found.key).n
        return (
            f"No verdict: too few prompts to tell the points apart on {found.key} (n = {n}, needs at least "
            f"{MIN_UNITS}); they are ranked by their medians alone."
        )
    return (
        f"No single best: {len(found.tied)} points tie on {found.key} (another point's 95% interval reaches "
        f"the leader's lower end, or it has none): {'; '.join(map(name, found.tied))}."
    )


# What a speedup is over, in words: the sweep counts its points faster, slower and indistinguishable.
OVER = {"speedup_vs_ar": "autoregressive decoding", "speedup_vs_hf": "transformers' generate"}


def against_baselines(points: list[PointResult]) -> str:
    """How many points are faster, slower and not distinguishable from each baseline (their speedup's
    interval above, below or around 1), and how many have too few prompts to tell."""
    parts = []
    for key, baseline in OVER.items():
        shown = [figure(p, key) for p in points if key in p.figures]
        if not shown:
            continue
        faster = sum(e.has_interval and e.low > 1 for e in shown)
        slower = sum(e.has_interval and e.high < 1 for e in shown)
        unknown = sum(not e.has_interval for e in shown)
        counts = {
            "faster": faster,
            "slower": slower,
            "not distinguishable": len(shown) - faster - slower - unknown,
            "with too few prompts to tell": unknown,
        }
        parts.append(f"against {baseline}, " + ", ".join(f"{n} {what}" for what, n in counts.items() if n))
    return ("Of the points: " + "; ".join(parts) + ".") if parts else ""


def best_metrics(found: SweepVerdict) -> dict[str, float]:
    """The best point's headline figures as `best/<name>` (none when points tie), and how many tie."""
    metrics = {"sweep/tied_points": float(len(found.tied))}
    if found.best is not None:
        best = found.best.figures
        metrics |= {f"best/{mlflow_name(key)}": best[key].value for key in HEADLINE if key in best}
    return metrics


def ranking_line(points: list[PointResult], key: str | None = None) -> str:
    """Every point in ranking order by ``key`` (the ranking figure) on one line, each with its spread."""
    key, short = key or rank_key(points), labels(points)
    return f"Ranked by {key}: " + "; ".join(
        f"{place}. {short[p.shape.name]} {cell(p, key)}" for place, p in enumerate(ranked(points, key), start=1)
    )
