"""DFlash on the tiny pair: the parallel drafter (context only) against the target-conditioned DFlash
drafter, as a chain and as DDTree trees over a budget sweep, against autoregressive decoding.

    PYTHONPATH=platform python benchmarks/dflash.py [--prompts 16] [--max-new-tokens 128] [--reps 3]
        [--threads 1] [--L 8] [--budgets 16 32 64 128 256] [--dflash DIR]

One process, inline, batch 1, the shipped tiny target with `assets/tiny-pycode/parallel` (context
only) and `assets/tiny-pycode/dflash` (conditioned on target features); T = 0 and 1. Every
method runs once per repetition, in an order rotated from one repetition to the next (a shared
machine's slow spells spread over all). tau is accepted draft tokens + the bonus per round (as
in the DDTree paper); block efficiency is kept tokens per round. CPU tok/s: generated tokens
over this process's CPU seconds (time.process_time), median [min-max] over repetitions;
"vs AR" is the median of per-repetition CPU-rate ratios to autoregressive decoding at the same
T, "wall vs AR" the same on wall time. The phase split is the engine's clock (prefills
included); "feature" is the DFlash hand-over: bytes of target features per round and the
drafter's ms per round absorbing them (part of draft).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from pair import load_pair
from peers import Measure, speculab_measure, spread
from rich.console import Console
from rich.table import Table

from speculab.config import resolve_path
from speculab.core.autoregressive import autoregressive
from speculab.core.engine import DecodeSettings, decode
from speculab.core.records import RunResult
from speculab.drafting.ddtree import TreeDrafter, tree_builder
from speculab.drafting.sampling import SamplingParams
from speculab.models import DraftModel, LMSpec, TreeTarget
from speculab.models.dflash_layout import read_layout
from speculab.verify.ddtree_walk import ddtree_walk


@dataclass(frozen=True)
class Method:
    temperature: float
    drafter: str  # "-" (autoregressive), "parallel" or "dflash"
    budget: int  # 0: the chain (argmax per depth)


@dataclass
class Result:
    measure: Measure
    tau: float  # accepted + bonus per round
    feature_bytes: float  # per round
    feature_ms: float  # per round


def plan(budgets: list[int]) -> list[Method]:
    methods = []
    for temperature in (0.0, 1.0):
        methods += [Method(temperature, "-", 0), Method(temperature, "parallel", 0), Method(temperature, "dflash", 0)]
        methods += [Method(temperature, "dflash", b) for b in budgets]
    return methods


def result_of(run: RunResult, cpu_s: float) -> Result:
    rounds = sum(r.rows for r in run.rounds)
    return Result(
        speculab_measure(run, cpu_s),
        sum(sum(r.accepted) for r in run.rounds) / rounds + 1,
        sum(r.feature_bytes for r in run.rounds) / len(run.rounds),
        1000 * sum(r.time_feature_s for r in run.rounds) / len(run.rounds),
    )


def timed(work: Callable[[], RunResult]) -> Result:
    start = time.process_time()
    run = work()
    return result_of(run, time.process_time() - start)


def rows(results: dict[Method, list[Result]]) -> list[list[str]]:
    out = []
    for method, reps in results.items():
        base = results[Method(method.temperature, "-", 0)]
        generated = [sum(map(len, r.measure.tokens)) for r in reps]
        cpu = [n / r.measure.cpu_s for n, r in zip(generated, reps)]
        wall = [n / r.measure.wall_s for n, r in zip(generated, reps)]
        base_cpu = [sum(map(len, b.measure.tokens)) / b.measure.cpu_s for b in base]
        base_wall = [sum(map(len, b.measure.tokens)) / b.measure.wall_s for b in base]
        phases = [r.measure.phases for r in reps if r.measure.phases]
        split = "/".join(
            f"{100 * statistics.median(p[k] / sum(p.values()) for p in phases):.0f}"
            for k in ("draft", "target", "verify", "other")
        )
        same = "-"
        if method.temperature == 0:
            reference = base[0].measure.tokens
            same = f"{sum(a == b for a, b in zip(reps[0].measure.tokens, reference))}/{len(reference)}"
        out.append(
            [
                f"{method.temperature:g}",
                "autoregressive" if method.drafter == "-" else method.drafter,
                "-" if method.drafter == "-" else ("chain" if method.budget == 0 else f"B={method.budget}"),
                f"{statistics.median(r.tau for r in reps):.2f}",
                f"{statistics.median(n / r.measure.sequence_rounds for n, r in zip(generated, reps)):.2f}",
                spread(cpu),
                spread([c / b for c, b in zip(cpu, base_cpu)], "{:.2f}x"),
                spread([w / b for w, b in zip(wall, base_wall)], "{:.2f}x"),
                split,
                f"{statistics.median(r.feature_bytes for r in reps) / 1024:.1f} / "
                f"{statistics.median(r.feature_ms for r in reps):.2f}",
                same,
            ]
        )
    return out


COLUMNS = (
    "T",
    "drafter",
    "tree",
    "tau",
    "block eff.",
    "CPU tok/s",
    "vs AR (CPU)",
    "vs AR (wall)",
    "draft/target/verify/other %",
    "feature KiB / ms per round",
    "T=0 equal AR",
)


def main(argv: list[str] | None = None) -> list[list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="assets/tiny-pycode")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--L", type=int, default=8)
    parser.add_argument("--budgets", type=int, nargs="*", default=[16, 32, 64, 128, 256], help="none: chains only")
    parser.add_argument("--dflash", help="DFlash checkpoint directory (default: MODEL/dflash)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    root = resolve_path(args.model)
    pair = load_pair(args.model, args.prompts)
    dflash = resolve_path(args.dflash) if args.dflash else root / "dflash"
    layer_ids = read_layout(dflash).target_layer_ids
    # autoregressive and the parallel drafter run on the plain target; DFlash on one returning features
    featured = TreeTarget(LMSpec("hf", str(root / "target"), feature_layers=tuple(layer_ids)))
    sources = {
        "parallel": DraftModel(LMSpec("parallel", str(root / "parallel"))),
        "dflash": DraftModel(LMSpec("dflash", str(dflash), target_path=str(root / "target"))),
    }
    methods = plan(args.budgets)
    results: dict[Method, list[Result]] = {m: [] for m in methods}
    load = os.getloadavg()[0]
    for rep in range(args.reps):
        shift = rep * len(methods) // args.reps
        for method in methods[shift:] + methods[:shift]:
            s = DecodeSettings(
                1, args.L, SamplingParams(method.temperature), args.max_new_tokens, 1, 0, pair.eos_token_id
            )
            if method.drafter == "-":
                results[method].append(timed(lambda: autoregressive(pair.target, pair.prompts, s)))
                continue
            target = featured if method.drafter == "dflash" else pair.target
            build = tree_builder("chain" if method.budget == 0 else "best_first", method.budget)
            drafter = TreeDrafter(sources[method.drafter], build)
            results[method].append(timed(lambda: decode(target, drafter, ddtree_walk, pair.prompts, s)))
    table = Table(
        title=f"tiny pair, {args.prompts} HumanEval prompts, {args.max_new_tokens} new tokens, L={args.L}, batch 1, "
        f"inline, {torch.get_num_threads()} thread(s), {args.reps} repetitions, load average "
        f"{load:.2f} -> {os.getloadavg()[0]:.2f}"
    )
    for column in COLUMNS:
        table.add_column(column, justify="right")
    out = rows(results)
    for row in out:
        table.add_row(*row)
    Console(width=200).print(table)
    return out


if __name__ == "__main__":
    main()
