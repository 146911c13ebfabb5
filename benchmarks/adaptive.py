"""The adaptive draft length (`algorithm.L=auto`) against every fixed L and the autoregressive loop, or with
`--budgets` the adaptive tree budget (`algorithm.budget=auto`) against every fixed budget B, on the same units
in one run, with the platform's paired verdicts.

    PYTHONPATH=platform python benchmarks/adaptive.py [--lengths 1 2 3 4 6 8 | --budgets 16 32 64 128 256]
        [--batch-sizes 1 4 16] [--prompts 12] [--max-new-tokens 48] [--repeats 2] [--target-layers N] [--mix]
        [--stops 0.3 ...] [--overrides algorithm=block ...]

Each point (the tiny pair, block verification, K = 1, T = 1 by default; one per L and `auto`) decodes with
one pair of models, started by the platform for `auto` (`point.experiment.prepare`, runtime=inline, one
torch thread). Every unit (a batch of prompts) is decoded by every point and by the autoregressive loop back
to back in rotating order, `--repeats` times, after one untimed warm-up of the first unit each (where
`auto` spends its warm-up rounds, as a point's own warm-up does). `--target-layers N` deepens the tiny
target with identity layers (`benchmarks/ahead.py`: the same tokens, a costlier pass); `--mix` decodes
HumanEval and chat prompts alternately (half each), where code accepts long drafts and chat short ones;
else HumanEval's first `--prompts` (cycled past its 164: a 16-row batch needs 192 for 12 units, the fewest
a paired verdict takes). `--stops c ...` adds a point per threshold: the longest fixed L with the confidence
stop at c (`algorithm.confidence_stop`), compared with the best fixed L and the autoregressive loop too.
`--budgets b ...`: the points are DDTree's fixed budgets and `auto` (the tiny pair's DFlash drafter at T = 0
unless `--overrides` says otherwise; auto chooses from the whole ladder, 16..1024), in place of the lengths.

Per batch size: each point's tokens/s and speedup over the autoregressive loop (ratios of totals over units,
95% bootstrap-t intervals), `auto`'s chosen lengths and calibration, and the verdicts of `auto` against the
best fixed L (the one with the highest tokens/s here: chosen after the fact, so it reads high, against
`auto`) and of each against the autoregressive loop, Holm-corrected over every comparison of the run
(`results.verdicts.decide`). With `--mix`: each category's best fixed L, and what choosing it by category
(an oracle no online policy has) would gain over the best single L.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from ahead import TINY_TARGET, deepened
from rich.console import Console
from rich.table import Table

from speculab.config import resolve
from speculab.config.algorithm import BUDGETS
from speculab.config.prompts import point_prompts
from speculab.config.schema import job_config
from speculab.core.measure import Sample, UnitTotals
from speculab.core.records import RunResult, concat_runs
from speculab.data.prompts import load_prompts
from speculab.launch.cli import composed_config
from speculab.point.experiment import prepare
from speculab.results.figures import adaptive_figures, run_figures
from speculab.results.ratios import speedup, throughput
from speculab.results.verdicts import Family, RatioVerdict, decide, tested
from speculab.runtime.loop import PointLoop
from speculab.stats import ratio_of_totals, ratio_text

AUTO = "auto"
AR = "autoregressive"
CHAT = (  # instructions unlike the tiny pair's Python training text: short drafts pay there
    "Write a short letter to a friend about your holiday by the sea.",
    "What are three good reasons to learn a second language?",
    "Describe the weather in your city today, and what you will wear.",
    "Give me a recipe for a simple tomato soup.",
    "Why do cats like to sleep in boxes? Answer in two sentences.",
    "Summarise the plot of a film you like without naming it.",
    "How should I prepare for a job interview next week?",
    "Tell me a story about a lighthouse keeper and a storm.",
    "What is the difference between weather and climate?",
    "Plan a three-day trip to a mountain village for a family.",
    "Explain to a child why the sky is blue.",
    "List some ways to save energy at home in winter.",
)


@dataclass
class Measured:
    """A method's samples [unit][repetition] and, for a point, its decodes of repetition 0."""

    samples: list[list[Sample]]
    runs: list[RunResult]


def prompt_file(count: int, chat: bool, into: Path) -> Path:
    """A JSONL of `count` prompts: HumanEval's (cycled past its 164, each again a unit of its own seed), or
    with `chat` HumanEval's and CHAT's alternately (ids `code/...`, `chat/...`)."""
    code = load_prompts("humaneval")
    rows = []
    for i in range(count):
        own = chat and i % 2 == 1
        text = CHAT[(i // 2) % len(CHAT)] if own else code[(i // 2 if chat else i) % len(code)].text
        rows.append({"id": f"{'chat' if own else 'code'}/{i}", "prompt": text, "chat": False})
    into.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return into


def fixed_budget(adaptive: PointLoop, budget: int) -> PointLoop:
    """A loop building every tree of `budget` nodes on the adaptive point's models."""
    settings = replace(adaptive.work.settings, tree_nodes=budget + 1)
    return PointLoop(
        adaptive.target, adaptive.draft_model, replace(adaptive.work, budget=budget, budgets=(), settings=settings)
    )


def fixed(adaptive: PointLoop, length: int, stop: float = 0.0) -> PointLoop:
    """A loop decoding with the fixed `length` (and the confidence stop at `stop`, 0: none) on the adaptive
    point's models (loaded once: the same weights and caches, the points' decodes taking turns)."""
    sampling = replace(adaptive.work.settings.sampling, confidence_stop=stop)
    settings = replace(adaptive.work.settings, length=length, adaptive=False, tree_nodes=length + 1, sampling=sampling)
    return PointLoop(adaptive.target, adaptive.draft_model, replace(adaptive.work, settings=settings))


def measured(loops: dict[str, PointLoop], units: int, repeats: int) -> dict[str, Measured]:
    """Every unit by every point back to back, the order rotating, and the autoregressive loop on the first
    point's loop, after one untimed warm-up of the first unit each."""
    methods = {name: (loop, "speculative") for name, loop in loops.items()}
    methods[AR] = (next(iter(loops.values())), "autoregressive")
    found = {name: Measured([[] for _ in range(units)], []) for name in methods}
    for loop, method in methods.values():
        loop.decode_unit(method, 0, -1)
    for unit in range(units):
        for repeat in range(repeats):
            turn = (unit + repeat) % len(methods)
            for name in [*list(methods)[turn:], *list(methods)[:turn]]:
                loop, method = methods[name]
                done = loop.decode_unit(method, unit, repeat)
                found[name].samples[unit].append(done.sample)
                if isinstance(done.result, RunResult):
                    found[name].runs.append(done.result)
    return found


def totals(m: Measured, units: list[int] | None = None) -> UnitTotals:
    return UnitTotals.of([m.samples[u] for u in units] if units is not None else m.samples)


def stop_name(length: str, stop: float) -> str:
    """A stop point's name: `8 stop=0.3` (a table shows it as L=8 stop=0.3)."""
    return f"{length} stop={stop:g}"


def best_fixed(found: dict[str, Measured], units: list[int] | None = None) -> str:
    """The fixed L (no stop) with the highest tokens/s over `units` (all: None)."""
    fixed = [name for name in found if name not in (AUTO, AR) and "stop" not in name]
    return max(fixed, key=lambda name: ratio_of_totals(throughput(totals(found[name], units))).value)


def comparisons(found: dict[str, Measured]) -> list[tuple[str, str]]:
    """(point, against) pairs: auto and each stop point against the best fixed L, and each against the
    autoregressive loop."""
    best = best_fixed(found)
    stops = [name for name in found if "stop" in name]
    return [(AUTO, best), (AUTO, AR), (best, AR), *((name, other) for name in stops for other in (best, AR))]


def chosen_shares(figures: dict[str, float], shape: str, values: Iterable[int]) -> str:
    """The shares of rounds at each of `values` of a shape ("length" or "budget") a run chose, of 0.5% or more."""
    shares = {n: figures.get(f"adaptive_{shape}_{n}", 0.0) for n in values}
    return " ".join(f"{n}:{share:.2f}" for n, share in shares.items() if share >= 0.005)


def speed_table(title: str, found: dict[str, Measured], axis: str) -> Table:
    """Each point's figures; `axis` names its shape: "L" (draft lengths) or "B" (tree budgets)."""
    table = Table(title=title)
    chosen_column = f"{'lengths' if axis == 'L' else 'budgets'} chosen (share of rounds)"
    for column in ("point", "tokens/s", "speedup_vs_ar", "block eff.", chosen_column, "calib."):
        table.add_column(column)
    ar = totals(found[AR])
    for name, m in found.items():
        rate = ratio_of_totals(throughput(totals(m)))
        versus = ratio_text(ratio_of_totals(speedup(totals(m), ar))) if name != AR else ""
        chosen, calibration, efficiency = "", "", ""
        if m.runs:
            run = concat_runs(m.runs)
            efficiency = f"{run_figures(run)['block_efficiency'].value:.2f}"
            figures = adaptive_figures(run)
            shape, values = ("length", range(run.length + 1)) if axis == "L" else ("budget", BUDGETS)
            chosen = chosen_shares(figures, shape, values)
            if "adaptive_calibration" in figures:
                calibration = f"{figures['adaptive_calibration']:.2f} ({figures['adaptive_policy_ms']:.2f} ms)"
        table.add_row(
            f"{axis}={name}" if name not in (AR,) else name, ratio_text(rate), versus, efficiency, chosen, calibration
        )
    return table


def by_category(found: dict[str, Measured], ids: list[str]) -> Table:
    """Mixed prompts, batch 1 (a unit a prompt): each category's best fixed L, and the tokens/s of choosing
    it per category against the best single L over every prompt."""
    categories = sorted({i.split("/")[0] for i in ids})
    units = {c: [u for u, i in enumerate(ids) if i.startswith(f"{c}/")] for c in categories}
    table = Table(title="mixed prompts: the best fixed L by category (an oracle), against the best single L")
    for column in ("prompts", "best fixed L", "its tokens/s", "auto's tokens/s"):
        table.add_column(column)
    oracle_tokens, oracle_seconds = 0.0, 0.0
    for c in categories:
        best = best_fixed(found, units[c])
        own = totals(found[best], units[c])
        oracle_tokens, oracle_seconds = oracle_tokens + sum(own.tokens), oracle_seconds + sum(own.wall_s)
        auto = ratio_of_totals(throughput(totals(found[AUTO], units[c])))
        table.add_row(c, best, ratio_text(ratio_of_totals(throughput(own))), ratio_text(auto))
    single = best_fixed(found)
    whole = totals(found[single])
    gain = (oracle_tokens / oracle_seconds) / (sum(whole.tokens) / sum(whole.wall_s))
    table.add_row("all", f"{single} (by category: {gain:.3f}x it)", ratio_text(ratio_of_totals(throughput(whole))), "")
    return table


def verdict_table(verdicts: dict[tuple[int, str, str], RatioVerdict], axis: str) -> Table:
    table = Table(title="throughput ratios paired by unit, each interval at the level Holm judged it, verdicts")
    for column in ("batch", "ratio", "value", "adjusted p", "verdict"):
        table.add_column(column)
    for (batch, a, b), verdict in verdicts.items():
        label = f"{axis}={a} / " + (b if b == AR else f"{axis}={b}")
        table.add_row(str(batch), label, ratio_text(verdict.ratio), f"{verdict.adjusted:.3g}", verdict.call.value)
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    shapes = parser.add_mutually_exclusive_group()
    shapes.add_argument("--lengths", nargs="+", default=["1", "2", "3", "4", "6", "8"])
    shapes.add_argument("--budgets", nargs="+", help="DDTree's fixed budgets against algorithm.budget=auto")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--prompts", type=int, default=12)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--target-layers", type=int, help="the tiny target deepened to N layers (default: as shipped)")
    parser.add_argument("--mix", action="store_true", help="HumanEval and chat prompts, half each")
    parser.add_argument("--stops", type=float, nargs="*", default=[], help="confidence stops on the longest L")
    parser.add_argument("--overrides", nargs="*", help="default: algorithm=block (or DDTree's, with --budgets)")
    args = parser.parse_args(argv)
    axis = "B" if args.budgets else "L"
    trees = ["model=tiny-pycode_dflash", "drafter=dflash", "algorithm=ddtree", "sampling.temperature=0"]
    overrides = args.overrides if args.overrides is not None else trees if args.budgets else ["algorithm=block"]
    console = Console(width=200)
    scratch = Path(tempfile.mkdtemp(prefix="speculab-adaptive-"))
    layers = args.target_layers
    target = [] if layers is None else [f"model.target_path={deepened(TINY_TARGET, layers, scratch / 'target')}"]
    dataset = ["dataset=jsonl", f"dataset.path={prompt_file(args.prompts, args.mix, scratch / 'prompts.jsonl')}"]
    results: dict[int, dict[str, Measured]] = {}
    ids: list[str] = []
    for batch in args.batch_sizes:
        common = [
            *target,
            *dataset,
            *overrides,
            f"dataset.num_prompts={args.prompts}",
            f"sampling.max_new_tokens={args.max_new_tokens}",
            f"sampling.batch_size={batch}",
            "runtime=inline",
            "runtime.torch_threads=1",
            "tracking=none",
        ]
        auto = f"algorithm.budget={AUTO}" if args.budgets else f"algorithm.L={AUTO}"
        plan = resolve(job_config(composed_config([*common, auto])))
        prepared = prepare(plan, point_prompts(plan))
        ids = [p.id for p in prepared.prompts]
        (adaptive,) = prepared.loops
        if args.budgets:
            loops = {budget: fixed_budget(adaptive, int(budget)) for budget in args.budgets} | {AUTO: adaptive}
        else:
            loops = {length: fixed(adaptive, int(length)) for length in args.lengths} | {AUTO: adaptive}
            longest = max(args.lengths, key=int)
            loops |= {stop_name(longest, stop): fixed(adaptive, int(longest), stop) for stop in args.stops}
        results[batch] = measured(loops, -(-args.prompts // batch), args.repeats)
    ordered = [(batch, a, b) for batch, found in results.items() for a, b in comparisons(found)]
    ratios = [tested((speedup(totals(results[batch][a]), totals(results[batch][b])),)) for batch, a, b in ordered]
    verdicts = dict(zip(ordered, decide(ratios, Family("this benchmark", len(ordered)))))
    for batch, found in results.items():
        console.print(speed_table(f"batch {batch}: each point over the same units (ratios of totals)", found, axis))
        if args.mix and batch == 1:
            console.print(by_category(found, ids))
    console.print(verdict_table(verdicts, axis))
    console.print(
        f"{len(ordered)} comparisons in one Holm family, 5% family-wise; {args.prompts} prompts x "
        f"{args.max_new_tokens} new tokens, {args.repeats} repetitions a point; target: {layers or 7} layers; "
        f"{'mixed code and chat' if args.mix else 'HumanEval'} prompts; {' '.join(overrides)}"
    )
    shutil.rmtree(scratch)


if __name__ == "__main__":
    main()
