"""Drafting ahead on a draft actor of its own (`drafter.ahead=ssd`) against the synchronous loop with the
same placement and against the draft beside the target, interleaved in one run.

    PYTHONPATH=platform python benchmarks/ahead.py [--prompts 8] [--max-new-tokens 64] [--repeats 3]
        [--temperatures 0 1] [--budgets 8] [--fan-outs geometric] [--target-layers N]
        [--overrides algorithm=block ...]

Three placements of one point (the tiny pair, block verification, K = 1, L = 4, batch 1, by default),
each started by the platform (`point.experiment.prepare`) on the embedded Ray cluster, one torch thread an
actor:

- beside: the draft in the target actor's process, the loop on its rank 0 (the default placement);
- own: the draft in an actor of its own, which the loop on the target's rank 0 drives over a socket
  (`runtime.draft_channel`), one call after the other;
- ahead (one per budget and fan-out): the same placement, the draft drafting each next round for its
  guesses of the verdict while the target verifies (`drafting.ahead`).

The gain drafting ahead can make is bounded by the share of a synchronous round the draft takes: on the
tiny pair a round's L + 1 draft steps cost nearly what its target pass does. `--target-layers N` (N > 7)
deepens the tiny target to N layers with identity layers (copies of its layers whose output projections
are zero, so each adds exactly nothing to the residual stream): the same distribution, so the same
tokens and acceptance, and a target pass that costs more against the same draft (`deepened`).

Each unit (one prompt) is decoded by every placement back to back in rotating order, `--repeats` times
after a warm-up; a placement's throughput is its tokens over its seconds totalled over units and
repetitions, and each comparison a ratio of two throughputs paired by unit (`results.ratios.speedup`),
with its bootstrap-t interval and a verdict, Holm-corrected over every comparison of the run
(`results.verdicts.decide`). Printed per temperature: each placement's tokens/s and time split, the
ahead figures (hit rate, tokens a round on a hit and on a miss, drafts made ahead a round, the draft's
idle share), and the comparisons.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table
from safetensors.torch import load_file, save_file

from speculab.config import resolve
from speculab.config.prompts import point_prompts
from speculab.config.schema import job_config
from speculab.core.measure import Sample, UnitTotals
from speculab.core.records import RunResult, concat_runs
from speculab.launch.cli import composed_config
from speculab.point.experiment import prepare
from speculab.results.figures import run_figures
from speculab.results.names import AHEAD_TABLED
from speculab.results.ratios import speedup, throughput
from speculab.results.verdicts import Family, RatioVerdict, decide, tested
from speculab.stats import ratio_of_totals, ratio_text

TINY_TARGET = Path(__file__).resolve().parents[1] / "assets" / "tiny-pycode" / "target"
IDENTITY_ZEROED = ("self_attn.o_proj.weight", "mlp.down_proj.weight")  # what a layer adds to the residual
PLACEMENTS = {
    "beside": ["cluster.draft_placement=beside"],
    "own": ["cluster.draft_placement=own", "runtime.loop=target"],
}


@dataclass
class Measured:
    """A placement's samples [unit][repetition] and its decodes of repetition 0."""

    samples: list[list[Sample]]
    runs: list[RunResult]


def deepened(source: Path, layers: int, into: Path) -> Path:
    """A copy of the Llama checkpoint `source` with `layers` decoder layers: its own, then identity layers
    (copies of its layers in turn, attention and MLP output projections zero). Each identity layer still
    runs every matmul, and adds exactly 0 to the residual stream, so the logits are the source's."""
    config = json.loads((source / "config.json").read_text())
    own = config["num_hidden_layers"]
    if layers < own:
        raise ValueError(f"--target-layers must be at least the target's own {own}; got {layers}")
    weights = load_file(source / "model.safetensors")
    for extra in range(own, layers):
        copied = f"model.layers.{(extra - own) % own}."
        for name in [n for n in weights if n.startswith(copied)]:
            tensor = weights[name]
            zeroed = name.endswith(IDENTITY_ZEROED)
            layer = torch.zeros_like(tensor) if zeroed else tensor.clone()
            weights[f"model.layers.{extra}." + name[len(copied) :]] = layer
    into.mkdir(parents=True, exist_ok=True)
    for extra_file in source.iterdir():
        if extra_file.name not in ("config.json", "model.safetensors"):
            shutil.copy(extra_file, into / extra_file.name)
    save_file(weights, into / "model.safetensors", metadata={"format": "pt"})
    (into / "config.json").write_text(json.dumps(config | {"num_hidden_layers": layers}, indent=2))
    return into


def placements(budgets: list[int], fan_outs: list[str]) -> dict[str, list[str]]:
    ahead = {
        f"ahead B={b}" + (f" {f}" if len(fan_outs) > 1 else ""): [
            *PLACEMENTS["own"],
            "drafter.ahead=ssd",
            f"drafter.ahead_budget={b}",
            f"drafter.ahead_fan_out={f}",
        ]
        for b in budgets
        for f in fan_outs
    }
    return PLACEMENTS | ahead


def measured(loops: dict[str, object], units: int, repeats: int) -> dict[str, Measured]:
    """Every unit by every placement back to back, the order rotating, after one warm-up each."""
    found = {name: Measured([[] for _ in range(units)], []) for name in loops}
    for unit in range(units):
        for loop in loops.values():
            loop.decode_unit("speculative", unit, -1)  # type: ignore[attr-defined]
        for repeat in range(repeats):
            turn = (unit + repeat) % len(loops)
            for name in [*list(loops)[turn:], *list(loops)[:turn]]:
                done = loops[name].decode_unit("speculative", unit, repeat)  # type: ignore[attr-defined]
                found[name].samples[unit].append(done.sample)
                if done.result is not None:
                    found[name].runs.append(done.result)
    return found


def comparisons(names: list[str]) -> list[tuple[str, str]]:
    """(faster, slower) pairs: each ahead placement against own and beside, and own against beside."""
    ahead = [n for n in names if n.startswith("ahead")]
    return [(a, b) for a in ahead for b in ("own", "beside")] + [("own", "beside")]


def tables(
    temperature: float, found: dict[str, Measured], verdicts: dict[tuple[str, str], RatioVerdict]
) -> list[Table]:
    speed = Table(title=f"T = {temperature:g}: each placement over the same units (ratios of totals)")
    for column in ("placement", "tokens/s", "share draft", "share target", "share verify", *AHEAD_TABLED):
        speed.add_column(column)
    for name, m in found.items():
        figures = run_figures(concat_runs(m.runs))
        rate = ratio_of_totals(throughput(UnitTotals.of(m.samples)))
        shares = [f"{figures[f'share_{p}'].value:.2f}" for p in ("draft", "target", "verify")]
        extra = [f"{figures[k].value:.3g}" if k in figures else "" for k in AHEAD_TABLED]
        speed.add_row(name, ratio_text(rate), *shares, *extra)
    compared = Table(title=f"T = {temperature:g}: throughput ratios paired by unit, 95% intervals, Holm verdicts")
    for column in ("ratio", "value", "verdict"):
        compared.add_column(column)
    for (a, b), verdict in verdicts.items():
        compared.add_row(f"{a} / {b}", ratio_text(verdict.ratio), verdict.call.value)
    return [speed, compared]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 1.0])
    parser.add_argument("--budgets", type=int, nargs="+", default=[8])
    parser.add_argument("--fan-outs", nargs="+", default=["geometric"], choices=["geometric", "uniform"])
    parser.add_argument("--target-layers", type=int, help="the tiny target deepened to N layers (default: as shipped)")
    parser.add_argument("--overrides", nargs="*", default=["algorithm=block", "algorithm.L=4"])
    args = parser.parse_args(argv)
    console = Console(width=200)
    scratch = Path(tempfile.mkdtemp(prefix="speculab-ahead-"))
    layers = args.target_layers
    target = [] if layers is None else [f"model.target_path={deepened(TINY_TARGET, layers, scratch)}"]
    results: dict[float, dict[str, Measured]] = {}
    for temperature in args.temperatures:
        common = [
            *target,
            *args.overrides,
            f"sampling.temperature={temperature}",
            f"dataset.num_prompts={args.prompts}",
            f"sampling.max_new_tokens={args.max_new_tokens}",
            "sampling.batch_size=1",
            "runtime=ray",
            "runtime.torch_threads=1",
            "cluster.num_cpus=3",  # the beside loop, the own loop and the draft actor: one runs at a time
            "tracking=none",
        ]
        loops = {}
        for name, overrides in placements(args.budgets, args.fan_outs).items():
            plan = resolve(job_config(composed_config([*common, *overrides])))
            (loops[name],) = prepare(plan, point_prompts(plan)).loops
        results[temperature] = measured(loops, args.prompts, args.repeats)
    pairs = {(t, a, b) for t in results for a, b in comparisons(list(results[t]))}
    ordered = sorted(pairs)
    ratios = [
        tested([speedup(UnitTotals.of(results[t][a].samples), UnitTotals.of(results[t][b].samples))])
        for t, a, b in ordered
    ]
    verdicts = dict(zip(ordered, decide(ratios, Family("the placements' comparisons", len(ordered)))))
    for temperature, found in results.items():
        own = {(a, b): v for (t, a, b), v in verdicts.items() if t == temperature}
        for table in tables(temperature, found, own):
            console.print(table)
    console.print(
        f"{len(ordered)} comparisons in one Holm family, 5% family-wise; {args.prompts} units x "
        f"{args.repeats} repetitions per placement; target: {layers or 7} layers"
    )
    shutil.rmtree(scratch)


if __name__ == "__main__":
    main()
