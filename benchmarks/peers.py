"""speculab's decoding against transformers' own loop: generate and assisted generation.

    PYTHONPATH=platform python benchmarks/peers.py [--prompts 16] [--max-new-tokens 64] [--reps 3]
        [--threads 1] [--lengths 4 8] [--batch-sizes 1 4 16] [--csv outputs/peers.csv] [--quick]

One process, the same model objects for both libraries (speculab's TreeTarget / DraftModel
wrap the transformers models that generate runs), the same HumanEval prompts, sampling,
budget, eos and thread count. Every method runs once per repetition, in an order rotated
from one repetition to the next, so slow spells of a shared machine spread over all of them.
Speeds are generated tokens over CPU seconds of this process (time.process_time) and over
wall seconds: median [min-max] over repetitions; ratios are medians of per-repetition ratios
against transformers' generate (same T, same batch size) and against assisted generation
at the same L (batch 1: transformers assists batch 1 only). Assisted generation is run at a
fixed L (the assistant's generation_config, checked with a forward hook: no target call but
the prefills carries more than L+1 tokens, and most carry exactly L+1). Block
efficiency is tokens per target call per sequence (transformers: every target forward, its
first carrying the prompt; speculab: rounds, its prefill apart). The phase split is
speculab's own clock (prefills included). "T=0 equal" counts prompts whose tokens equal
generate's at the same batch size. The CSV holds one line per method and repetition.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from pair import load_pair
from rich.console import Console
from rich.table import Table

from speculab.core.autoregressive import autoregressive
from speculab.core.engine import DecodeSettings, decode
from speculab.core.records import RunResult
from speculab.drafting.sampling import SamplingParams
from speculab.models import DraftModel, TreeTarget
from speculab.models.generate import check_assisted_widths, generate
from speculab.registry import get_verifier

HF = ("generate", "assisted")
SPECULAB_SD = ("token", "block", "gbv")


@dataclass(frozen=True)
class Method:
    name: str  # generate, assisted, autoregressive, or a speculab verifier
    batch: int
    temperature: float
    length: int  # L; 0 for the autoregressive loops


@dataclass
class Measure:
    tokens: list[list[int]]
    cpu_s: float
    wall_s: float
    sequence_rounds: int  # target calls summed over the sequences taking part
    rounds: int  # target calls (one per batch step)
    phases: dict[str, float] | None  # speculab's wall seconds per phase


def methods(batch_sizes: list[int], lengths: list[int]) -> list[Method]:
    """Batch 1: every method at every L; larger batches: the loops transformers can batch."""
    out = []
    for batch in batch_sizes:
        for temperature in (0.0, 1.0):
            out += [Method("generate", batch, temperature, 0), Method("autoregressive", batch, temperature, 0)]
            for length in lengths if batch == 1 else lengths[:1]:
                names = ("assisted", *SPECULAB_SD) if batch == 1 else ("token", "block")
                out += [Method(name, batch, temperature, length) for name in names]
    return out


def speculab_measure(run: RunResult, cpu_s: float) -> Measure:
    phases = {
        "draft": run.prefill_draft_s + sum(r.time_draft_s for r in run.rounds),
        "target": run.prefill_target_s + sum(r.time_target_s for r in run.rounds),
        "verify": sum(r.time_verify_s for r in run.rounds),
    }
    phases["other"] = max(0.0, run.wall_s - sum(phases.values()))
    return Measure(
        [p.tokens for p in run.prompts],
        cpu_s,
        run.wall_s,
        sum(r.rows for r in run.rounds),
        len(run.rounds),
        phases,
    )


def run(method: Method, target: TreeTarget, drafter: DraftModel, prompts: list[list[int]], args, eos) -> Measure:
    settings = DecodeSettings(
        1, method.length, SamplingParams(method.temperature), args.max_new_tokens, method.batch, 0, eos
    )
    if method.name in HF:
        assistant = drafter.lm.model if method.name == "assisted" else None
        result = generate(target.lm.model, prompts, settings, assistant)
        if assistant is not None:
            check_assisted_widths(result.call_widths, method.length, len(prompts))
        calls = len(result.call_widths)
        sequence_rounds = sum(len(p) for p in result.tokens) if assistant is None else calls
        return Measure(result.tokens, result.cpu_s, result.wall_s, sequence_rounds, calls, None)
    start = time.process_time()
    if method.name == "autoregressive":
        out = autoregressive(target, prompts, settings)
    else:
        out = decode(target, drafter, get_verifier(method.name), prompts, settings)
    return speculab_measure(out, time.process_time() - start)


def spread(values: list[float], fmt: str = "{:.1f}") -> str:
    """median [min-max]"""
    med = fmt.format(statistics.median(values))
    return med if len(values) == 1 else f"{med} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def summary_rows(measures: dict[Method, list[Measure]]) -> list[list[str]]:
    rows = []
    for method, reps in measures.items():
        generated = [sum(map(len, m.tokens)) for m in reps]
        cpu_rate = [n / m.cpu_s for n, m in zip(generated, reps)]
        peers = {
            name: measures.get(
                Method(name, method.batch, method.temperature, method.length if name == "assisted" else 0)
            )
            for name in HF
        }

        def ratio(name: str) -> str:
            base = peers[name]
            if base is None or method.name == name:
                return "-"
            return spread([r / (sum(map(len, b.tokens)) / b.cpu_s) for r, b in zip(cpu_rate, base)], "{:.2f}x")

        phases = reps[0].phases
        split = "-"
        if phases is not None:
            total = [sum(m.phases.values()) for m in reps if m.phases]
            shares = [
                statistics.median(m.phases[k] / t for m, t in zip(reps, total) if m.phases)
                for k in ("draft", "target", "verify", "other")
            ]
            split = "/".join(f"{100 * s:.0f}" for s in shares)
        equal = "-"
        if method.temperature == 0 and method.name != "generate" and peers["generate"]:
            reference = peers["generate"][0].tokens
            equal = f"{sum(a == b for a, b in zip(reps[0].tokens, reference))}/{len(reference)}"
        rows.append(
            [
                str(method.batch),
                f"{method.temperature:g}",
                method.name if method.name in HF else f"speculab {method.name}",
                str(method.length) if method.length else "-",
                spread(cpu_rate),
                spread([n / m.wall_s for n, m in zip(generated, reps)]),
                f"{statistics.median(n / m.sequence_rounds for n, m in zip(generated, reps)):.2f}",
                f"{statistics.median(1000 * m.cpu_s / m.rounds for m in reps):.2f}",
                split,
                ratio("generate"),
                ratio("assisted") if method.batch == 1 and method.length else "-",
                equal,
            ]
        )
    return rows


COLUMNS = (
    "B",
    "T",
    "method",
    "L",
    "CPU tok/s",
    "wall tok/s",
    "block eff.",
    "CPU ms/round",
    "draft/target/verify/other %",
    "vs generate",
    "vs assisted",
    "T=0 equal",
)


def main(argv: list[str] | None = None) -> list[list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="assets/tiny-pycode")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lengths", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--csv", type=Path, default=Path("outputs/peers.csv"))
    parser.add_argument("--quick", action="store_true", help="2 prompts, 12 tokens, 1 repetition, L 2, batch 1 and 2")
    args = parser.parse_args(argv)
    if args.quick:
        args.prompts, args.max_new_tokens, args.reps, args.lengths, args.batch_sizes = 2, 12, 1, [2], [1, 2]
    torch.set_num_threads(args.threads)
    pair = load_pair(args.model, args.prompts)
    prompts, target, drafter = pair.prompts, pair.target, pair.drafter
    plan = methods(args.batch_sizes, args.lengths)
    measures: dict[Method, list[Measure]] = {m: [] for m in plan}
    load = os.getloadavg()[0]
    args.csv.parent.mkdir(parents=True, exist_ok=True)
    with args.csv.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["rep", "batch", "T", "method", "L", "tokens", "cpu_s", "wall_s", "target_calls", "seq_rounds"])
        for rep in range(args.reps):
            shift = rep * len(plan) // max(args.reps, 1)
            for method in plan[shift:] + plan[:shift]:
                m = run(method, target, drafter, prompts, args, pair.eos_token_id)
                measures[method].append(m)
                out.writerow(
                    [rep, method.batch, method.temperature, method.name, method.length, sum(map(len, m.tokens))]
                    + [f"{m.cpu_s:.4f}", f"{m.wall_s:.4f}", m.rounds, m.sequence_rounds]
                )
    rows = summary_rows(measures)
    table = Table(
        title=f"tiny pair, {len(prompts)} HumanEval prompts, {args.max_new_tokens} new tokens, "
        f"{torch.get_num_threads()} torch thread(s), {args.reps} repetitions, load average "
        f"{load:.2f} -> {os.getloadavg()[0]:.2f}"
    )
    for column in COLUMNS:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(*row)
    Console(width=200).print(table)
    print(f"per-run CSV: {args.csv}")
    return rows


if __name__ == "__main__":
    main()
