"""The verdicts of `results.verdicts` in words: the sentences a run, a sweep's console and parent run and
the report print, each naming the family it was decided in and its adjusted p-value, and each ratio with
the interval at the level its test was judged at."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from speculab.results.point import NAME_JOIN, PointResult
from speculab.results.race import Stage
from speculab.results.verdicts import Call, RatioVerdict, Standing, SweepAnswer, effect_paired, rank_key, slow_loop
from speculab.stats import MIN_CLUSTERS, ratio_text

Name = Callable[[PointResult], str]


def units_words(n: int, batch_size: int) -> str:
    """`n` units in words: prompts where a unit is one prompt (batch 1), else units and their size."""
    plural = "s" if n != 1 else ""
    return f"{n} prompt{plural}" if batch_size == 1 else f"{n} unit{plural} (batches of {batch_size} prompts)"


def too_few(verdict: RatioVerdict, batch_size: int) -> str:
    """Why a verdict was not tested: too few units, or enough but none kept to test on."""
    if verdict.ratio.n == 0 or verdict.ratio.n >= MIN_CLUSTERS:
        return "no per-unit measurements kept (a run logged before units.json)"
    return f"too few to tell: {units_words(verdict.ratio.n, batch_size)}, needs at least {MIN_CLUSTERS}"


def call_words(verdict: RatioVerdict, above: str = "faster", below: str = "slower") -> str:
    """`faster` / `slower` (or the words given) where decided, else `inconclusive` or `too few units`."""
    return {Call.ABOVE: above, Call.BELOW: below}.get(verdict.call, verdict.call.value)


def level_words(verdict: RatioVerdict) -> str:
    """The confidence of the interval beside a verdict: `97.5%` (empty without a test)."""
    return "" if math.isnan(verdict.level) else f"{100 * verdict.level:.4g}%"


def with_level(verdict: RatioVerdict) -> str:
    """A verdict's ratio with its interval and that interval's level: `1.08 [1.02, 1.15] at 97.5%` (not in
    brackets: `[a, b] (c)` reads as a link in markdown)."""
    level = level_words(verdict)
    return f"{ratio_text(verdict.ratio)}" + (f" at {level}" if level else "")


def adjusted_words(verdict: RatioVerdict) -> str:
    """`adjusted p = 0.012` (`< 0.0001` below it)."""
    return "adjusted p < 0.0001" if verdict.adjusted < 1e-4 else f"adjusted p = {verdict.adjusted:.2g}"


def evidence(verdict: RatioVerdict) -> str:
    """The test behind a verdict, in brackets: its adjusted p-value and the family it was decided in."""
    return f"({adjusted_words(verdict)}; {verdict.family})"


def baseline_sentence(key: str, verdict: RatioVerdict, baseline: str, batch_size: int) -> str:
    """One sentence on a speedup over a baseline: `speedup_vs_ar 1.23 [1.1, 1.37] (97.5%): faster than ...`."""
    if verdict.call is Call.TOO_FEW:
        return f"{key} {ratio_text(verdict.ratio)}: no verdict against {baseline}, {too_few(verdict, batch_size)}"
    if verdict.decided:
        return f"{key} {with_level(verdict)}: {call_words(verdict)} than {baseline} {evidence(verdict)}"
    return f"{key} {with_level(verdict)}: inconclusive against {baseline} {evidence(verdict)}"


def headline_note(points: Sequence[PointResult]) -> str:
    """What the run says where its autoregressive loop ran on transformers' own code (empty otherwise)."""
    if not any(p.figures.value("ar_lean") == 0 for p in points):
        return ""
    why = "this model's layers ran on transformers' own code, not speculab's lean layers"
    if not slow_loop(points):
        return f"{why}: speedup_vs_ar may read high (baseline_hf=true measures generate beside it)"
    if rank_key(points) == "speedup_vs_hf":
        return f"{why}, and generate was the faster baseline: the headline is speedup_vs_hf"
    return f"{why}; the engine's loop was still the faster baseline: the headline stays speedup_vs_ar"


def standing_words(answer: SweepAnswer, point: PointResult) -> str:
    """A point's place on "which point is fastest": `fastest`, `in the running`, `out`, `too few units`."""
    return answer.standing(point).value


def leader_cell(answer: SweepAnswer, at: int) -> str:
    """The leader's ratio over ranked[at] (at >= 1) with its interval and where the point stands:
    `1.08 [1.03, 1.13] out`."""
    verdict = answer.versus[at - 1]
    return f"{ratio_text(verdict.ratio)} {standing_words(answer, answer.ranked[at])}"


def leader_sentence(answer: SweepAnswer, name: Name) -> str:
    """The sweep's answer: `leader_headline`, then `leader_detail`."""
    return " ".join(filter(None, (leader_headline(answer, name), leader_detail(answer, name))))


def leader_headline(answer: SweepAnswer, name: Name) -> str:
    """The sweep's answer in a few words: the fastest point, or how many points are still in the running
    with the leader, or why there is no verdict; points named by `name`."""
    if len(answer.ranked) == 1:
        return f"One point ({name(answer.leader)}): nothing to compare it with."
    if all(v.call is Call.TOO_FEW for v in answer.versus):
        why = too_few(answer.versus[0], answer.leader.shape.batch_size)
        return f"No verdict on {answer.key}: {why}; the points are ranked by their figures alone."
    leader = f"**{name(answer.leader)}**"
    if answer.best is not None:
        chosen = answer.leader_figure
        simultaneous = f" (simultaneous over {chosen.of} points)" if chosen.figure.has_interval else ""
        return f"Fastest: {leader}, {answer.key} {ratio_text(chosen.figure)}{simultaneous}."
    others = len(answer.running()) - 1
    return f"No single fastest point: {leader} ranks first, and {others} other point(s) are still in the running."


def leader_detail(answer: SweepAnswer, name: Name) -> str:
    """What the verdict rests on: every other point out (the runner-up's margin), or the points still in
    the running with the leader's ratio over each; the units, the test and the family; and how the
    leader's figure was selected (empty without a test)."""
    if len(answer.ranked) == 1 or all(v.call is Call.TOO_FEW for v in answer.versus):
        return ""
    runner, margin = answer.ranked[1], answer.versus[0]
    paired = "paired" if effect_paired(answer.leader, runner) else "unpaired (the points decoded different prompts)"
    units = units_words(margin.ratio.n, answer.leader.shape.batch_size)
    tests = len(answer.versus)
    how = (
        f"{units}, {paired}; the leader against each other point one-sided at {level_words(margin)} "
        f"(Hsu's comparisons with the best, {tests} of them); {answer.family}"
    )
    if answer.best is not None:
        said = f"Every other point is out, the runner-up {name(runner)} by {ratio_text(margin.ratio)}: {how}."
    else:
        close = [(p, v) for p, v in zip(answer.ranked[1:], answer.versus) if answer.standing(p) is Standing.RUNNING]
        listed = "; ".join(f"{name(p)} {ratio_text(v.ratio)}" for p, v in close)
        out = sum(answer.standing(p) is Standing.OUT for p in answer.ranked[1:])
        said = f"Still in the running, with the leader's ratio over each: {listed}; out: {out} point(s). Over {how}."
    return f"{said} {selection_words(answer)}".strip()


def selection_words(answer: SweepAnswer) -> str:
    """How the leader's figure was selected: the highest of P reads high, by how much where all are equal,
    and its interval is simultaneous over the P points so that it still covers."""
    chosen = answer.leader_figure
    if chosen.of < 2 or math.isnan(chosen.overstates) or not chosen.figure.has_interval:
        return ""
    return (
        f"The leader's {answer.key} {ratio_text(chosen.figure)} is the highest of {chosen.of} figures, so it reads "
        f"high (by about {chosen.overstates:.1%} where all points are equal); its interval is simultaneous over the "
        f"{chosen.of} points, which holds every point's true value at once with 95%."
    )


def baselines_sentence(answer: SweepAnswer, over: dict[str, str]) -> str:
    """How many points are faster, slower and inconclusive against each baseline (and how many could not
    be tested), under the sweep's one family; ``over``: each speedup's baseline in words."""
    parts = []
    for key, verdicts in answer.against.items():
        counts: dict[str, int] = {}
        for verdict in verdicts:
            if not math.isnan(verdict.ratio.value):
                counts[call_words(verdict)] = counts.get(call_words(verdict), 0) + 1
        words = ", ".join(
            f"{counts[w]} {w}" for w in ("faster", "slower", "inconclusive", "too few units") if w in counts
        )
        parts.append(f"against {over[key]}, {words}")
    return ("Of the points: " + "; ".join(parts) + f" (Holm; {answer.family}).") if parts else ""


BASELINE = {"speedup_vs_ar": "AR", "speedup_vs_hf": "generate"}  # a baseline in a short line
CELL = {Call.ABOVE: "faster", Call.BELOW: "slower", Call.INCONCLUSIVE: "open", Call.TOO_FEW: "too few"}


def run_verdict_words(verdicts: dict[str, RatioVerdict]) -> str:
    """A run's own verdict in a runs-table cell, a few words wide: against the engine's autoregressive
    loop where it ran (`AR: faster`; `open`: inconclusive), else against generate; the rest is on its page."""
    for key, name in BASELINE.items():
        if key in verdicts:
            return f"{name}: {CELL[verdicts[key].call]}"
    return ""


def sweep_verdict_words(answer: SweepAnswer, point: PointResult) -> str:
    """A sweep point's verdict in a runs-table cell, as its sweep decided it: where it stands on the
    fastest (`fastest`, `in the running`, `out`); its verdicts against the baselines are on its page."""
    return standing_words(answer, point)


def sweep_section(answer: SweepAnswer, point: PointResult, name: Name) -> str:
    """What a point's page says of its sweep's verdicts on it, in a line or two (its page shows a
    description's first three lines): where it stands on the fastest, with the leader's ratio over it,
    the family, and its speedup over each baseline as the sweep decided it."""
    at = answer.place(point)
    standing = answer.standing(point)
    if at == 0:
        said = f"**{standing.value}**, first of {len(answer.ranked)}"
    else:
        said = f"**{standing.value}**, {name(answer.leader)} over it {with_level(answer.versus[at - 1])}"
    over = ", ".join(f"vs {BASELINE[key]} {call_words(vs[at])}" for key, vs in answer.against.items())
    return f"In the sweep: {said} ({answer.family})" + (f"; {over}." if over else ".")


def race_lines(stages: list[Stage]) -> list[str]:
    """A race's stages in words, one line each: the prompts, how many points decoded them, which the stage
    ruled out and on what evidence (the leader's ratio over each at the stage's level, adjusted p), and
    that the sweep's answer is on the last stage's points, over every stage's prompts; points named by
    what sets them apart."""
    everyone = stages[0].points if stages else []
    parts = [name.split(NAME_JOIN) for name in everyone]
    shared = {i for i in range(min(map(len, parts), default=0)) if len({p[i] for p in parts}) == 1}

    def short(name: str) -> str:
        return NAME_JOIN.join(x for i, x in enumerate(name.split(NAME_JOIN)) if i not in shared) or name

    lines = []
    for stage in stages:
        said = f"stage {stage.number}, prompts {stage.start}-{stage.stop} of the sample: {len(stage.points)} points"
        if stage.out:
            evidence = "; ".join(
                f"{short(o.point)} ({short(stage.leader)} over it {ratio_text(o.ratio)} at {100 * o.level:.4g}%, "
                f"adjusted p = {o.adjusted:.2g})"
                for o in stage.out
            )
            said += f", {len(stage.out)} out: {evidence}"
        elif stage is not stages[-1]:
            said += ", none out"
        if stage is stages[-1]:
            said += "; the sweep's answer is on these points, over every stage's prompts"
        lines.append(said)
    return lines
