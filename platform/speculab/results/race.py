"""Racing: a sweep that spends its decodes where its answer is decided (`hydra/sweeper=race`).

Every point decodes the first stage's prompts; the points the first stage already rules out as the
fastest stop there; the rest decode the next stage's prompts, fresh ones (another slice of the same
seeded sample: `dataset.slice`), and so on; the sweep's answer is decided over the points left, each on
every stage's prompts together (`pooled`). Why that keeps the sweep's 5%:

- At an intermediate stage k, a point is ruled out where the leader's one-sided test over it, on the
  stage's prompts so far, passes at `stage_share / (P - 1)`, P the points the race began with (fixed,
  not the points left: the points left depend on the data). Whichever point is truly fastest is ruled
  out at stage k only if some point's test over it errs, with probability at most `stage_share`.
- At the end, the points left are compared on all the prompts they decoded, each test at the ranking
  question's share less what the stages spent (`spent`), over P - 1 again. Every point could have
  decoded every prompt (the sample was drawn before any stage ran), so each test over the truly fastest
  is valid on the whole sample whatever the stages decided; the points ruled out only take tests away.
  The fastest is then ruled out at the end with probability at most that share, by the union bound.
- Together, the stages' shares and the end's add up to the ranking question's share: the chance that
  the fastest is ruled out, or a wrong point named, is at most it, as in a flat sweep. The questions
  over the baselines count the ruled-out points' tests as never rejected (`verdicts.decide`'s unseen),
  and the leader's figure is simultaneous over the P points it was chosen from, as a flat sweep's is
  (`SweepAnswer.chosen_from`): pooling keeps the prompts that chose it, so its value is a selected one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from speculab.results.figures import totals_figures
from speculab.results.names import Figures
from speculab.results.point import NAME_JOIN, PointResult, PointUnits
from speculab.results.verdicts import ALPHA, Call, Family, comparisons_with_best, rank_key, ranked
from speculab.stats import Estimate, Totals, ratio_of_totals

RACE_FILE = "race.json"  # the stages, in the sweep's directory: what the parent run shows of them
# Of the ranking question's share, what the stages before the last spend: at most half a flat sweep's tokens
# with the most power left for the end (benchmarks/verdicts.py; 0.5 sat at half, 0.75 lost power).
SPENT = 0.6


@dataclass(frozen=True)
class Out:
    """A point a stage ruled out: its name, the leader's ratio over it with its interval at the stage's
    level, and the test's adjusted p-value."""

    point: str
    value: float
    low: float
    high: float
    level: float
    adjusted: float

    @property
    def ratio(self) -> Estimate:
        return Estimate(self.value, self.low, self.high)


@dataclass(frozen=True)
class Stage:
    """One stage of a race: its prompts (positions [start, stop) of the seeded sample), the points that
    decoded them, and those it ruled out (none at the last: the sweep's answer says the rest)."""

    number: int
    start: int
    stop: int
    points: list[str]
    leader: str = ""
    out: list[Out] = field(default_factory=list)


def stage_share(stages: int, points: int, baselines: bool) -> float:
    """What each intermediate stage of `stages` spends of ALPHA: SPENT of the ranking question's share
    (half the family's where the sweep also judges baselines, as `verdicts.allotted` splits it), spread
    evenly over the stages before the last."""
    ranking = ALPHA / (2 if baselines else 1) if points > 1 else 0.0
    return SPENT * ranking / (stages - 1) if stages > 1 else 0.0


RACE_FAMILY = "the race's intermediate stages"


def ruled_out(
    points: Sequence[PointResult], first: int, share: float
) -> tuple[PointResult, list[tuple[PointResult, Out]]]:
    """The stage's leader and the points it rules out: Hsu's comparisons with the best at `share`, each
    against share / (first - 1), `first` the points the race began with."""
    key = rank_key(points)
    order = ranked(points, key)
    family = Family(RACE_FAMILY, first - 1)
    verdicts = comparisons_with_best(order, key, 1, family, share, tests=first - 1)
    out = [
        (p, Out(race_name(p), v.ratio.value, v.ratio.low, v.ratio.high, v.level, v.adjusted))
        for p, v in zip(order[1:], verdicts)
        if v.call is Call.ABOVE
    ]
    return order[0], out


def pooled(stages: Sequence[PointResult], figure: Callable[[Totals], Estimate] = ratio_of_totals) -> PointResult:
    """A point as the race's answer sees it: its results at every stage it decoded (in order), one point over
    their prompts together, its units joined and its speed figures from them (``figure``: how each is
    estimated, `figures.totals_figures`); its other figures (acceptance, its baselines' own), from one
    stage's records, its last stage's. A typical unit's speedup, one stage's median, is left out."""
    last = stages[-1]
    if len(stages) == 1 or any(s.units is None for s in stages):
        return last
    units = PointUnits.joined([s.units for s in stages if s.units is not None])
    baselines = {key: t for key, t in (("ar", units.autoregressive), ("hf", units.generate)) if t is not None}
    kept = {k: v for k, v in last.figures.items() if not k.startswith("typical_")}
    shape = replace(last.shape, prompts=len(units.prompt_ids), part=None)  # the whole sample: every stage's
    figures = Figures(kept) | totals_figures(units.speculative, baselines, figure)
    return replace(last, shape=shape, figures=figures, units=units)


def race_name(point: PointResult) -> str:
    """A point's name in its race, the same at every stage: its name without its prompts (each stage
    decodes its own slice of them)."""
    verifier, drafter, _, model = point.shape.name_parts
    return NAME_JOIN.join((verifier, drafter, model))


def write_race(sweep_dir: Path, stages: list[Stage]) -> None:
    (sweep_dir / RACE_FILE).write_text(json.dumps([asdict(stage) for stage in stages], indent=1))


def read_race(sweep_dir: Path) -> list[Stage]:
    """The race's stages from its directory (none: a flat sweep)."""
    path = sweep_dir / RACE_FILE
    if not path.is_file():
        return []
    return [Stage(**{**s, "out": [Out(**o) for o in s["out"]]}) for s in json.loads(path.read_text())]
