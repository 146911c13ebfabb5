"""DDTree: tree build time (batched builder vs the heapq reference) and end-to-end budget sweep.

    python benchmarks/ddtree.py [--threads 1] [--prompts 8] [--max-new-tokens 64] [--skip-e2e]
        [--device cuda]

Part 1 times `best_first_tree` (reachable ranks only) against `best_first_tree_reference`
(top-K per depth, K = min(B, V), then the same heap) on one prompt's seeded marginals,
softmax(4 * standard normal logits), per (B, L, V); median wall and CPU time of repeats
after a warm-up (CPU time leaves out waits for a core on a shared machine). With `--device
cuda` a column adds `best_first_tree_levels` (the level sorts the engine builds with on a GPU)
on that device, timed with CUDA events after a warm-up, marginals already there.
Part 2 decodes HumanEval prompts with the shipped tiny target, inline, at T = 0 and 1: the
autoregressive baseline and the single-chain baseline (argmax per depth, same drafter, same
walk) are measured in the same run; ratios are tokens/s over them. tau includes the bonus
token, as in the DDTree paper (tau = accepted + 1).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from rich.console import Console
from rich.table import Table
from transformers import AutoTokenizer

from speculab.config import resolve_path
from speculab.core.autoregressive import autoregressive
from speculab.core.engine import DecodeSettings, decode
from speculab.data import encode_prompt, load_prompts
from speculab.drafting.best_first import best_first_tree, best_first_tree_levels, best_first_tree_reference
from speculab.drafting.ddtree import TreeDrafter, tree_builder
from speculab.drafting.sampling import SamplingParams
from speculab.models import DraftModel, LMSpec, TreeTarget
from speculab.results.figures import run_figures, tokens_per_second
from speculab.verify.ddtree_walk import ddtree_walk

BUDGETS = (16, 32, 64, 128, 256, 512, 1024)


def median_ms(build, repeats: int) -> tuple[float, float]:
    """Median wall and CPU (process) milliseconds of `build` after a warm-up.

    On a shared machine the wall time includes waits for a core; the CPU time does not.
    """
    build()
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        build()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return 1000 * statistics.median(wall), 1000 * statistics.median(cpu)


def device_ms(build: Callable[[], object], repeats: int) -> float:
    """Median milliseconds of `build` on the GPU between CUDA events, after a warm-up."""
    build()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        build()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def build_table(repeats: int, device: str | None = None) -> Table:
    table = Table(title=f"tree build time, 1 prompt, {torch.get_num_threads()} threads (median ms, wall / CPU)")
    columns = ["V", "L", "B", "batched", "heapq reference", "reference / batched (CPU)"]
    for column in columns + ([f"level sorts on {device}"] if device else []):
        table.add_column(column, justify="right")
    gen = torch.Generator().manual_seed(0)
    root = torch.tensor([0])
    for vocab in (32_000, 150_000):
        for length in (8, 16):
            q = torch.softmax(4 * torch.randn(1, length, vocab, generator=gen), dim=-1)
            for budget in BUDGETS:
                fast = median_ms(lambda: best_first_tree(q, root, budget), repeats)
                ref = median_ms(lambda: best_first_tree_reference(q, root, budget), repeats)
                row = [
                    f"{vocab // 1000}k",
                    str(length),
                    str(budget),
                    f"{fast[0]:.2f} / {fast[1]:.2f}",
                    f"{ref[0]:.2f} / {ref[1]:.2f}",
                    f"{ref[1] / fast[1]:.1f}x",
                ]
                if device:
                    q_dev, root_dev = q.to(device), root.to(device)
                    row.append(f"{device_ms(lambda: best_first_tree_levels(q_dev, root_dev, budget), repeats):.3f}")
                table.add_row(*row)
    return table


def e2e_table(args: argparse.Namespace) -> Table:
    root = resolve_path(args.model)
    tokenizer = AutoTokenizer.from_pretrained(root / "target")
    prompts = [encode_prompt(p, tokenizer) for p in load_prompts("humaneval", args.prompts)]
    target = TreeTarget(LMSpec("hf", str(root / "target")))
    sources = {
        "parallel": DraftModel(LMSpec("parallel", str(root / "parallel"))),
        "ar_marginals": DraftModel(LMSpec("hf", str(root / "draft"))),
    }
    table = Table(
        title=f"tiny pair, {len(prompts)} HumanEval prompts, {args.max_new_tokens} new tokens, L={args.L}, batch 1, "
        f"{torch.get_num_threads()} threads"
    )
    for column in (
        "T",
        "drafter",
        "tree",
        "tau (incl. bonus)",
        "nodes",
        "build ms/round",
        "tokens/s",
        "vs AR",
        "vs chain",
    ):
        table.add_column(column, justify="right")
    for temperature in (0.0, 1.0):
        s = DecodeSettings(1, args.L, SamplingParams(temperature), args.max_new_tokens, 1, 0, tokenizer.eos_token_id)
        ar = autoregressive(target, prompts, s)
        table.add_row(
            f"{temperature:g}",
            "-",
            "autoregressive",
            "1.00",
            "1",
            "-",
            f"{tokens_per_second(ar):.1f}",
            "1.00x",
            "-",
        )
        for name, source in sources.items():
            chain = None
            for budget in (0, *args.budgets):
                drafter = TreeDrafter(source, tree_builder("chain" if budget == 0 else "best_first", budget))
                run = decode(target, drafter, ddtree_walk, prompts, s)
                m = run_figures(run)
                chain = chain or m
                build_ms = 1000 * m.value("time_tree_build_s") / m.value("target_calls")
                table.add_row(
                    f"{temperature:g}",
                    name,
                    "chain" if budget == 0 else f"B={budget}",
                    f"{m.value('accepted_mean') + 1:.2f}",
                    f"{m.value('tree_nodes_mean'):.0f}",
                    f"{build_ms:.2f}",
                    f"{m.value('tokens_per_s'):.1f}",
                    f"{tokens_per_second(run) / tokens_per_second(ar):.2f}x",
                    f"{m.value('tokens_per_s') / chain.value('tokens_per_s'):.2f}x",
                )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="assets/tiny-pycode")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--L", type=int, default=8)
    parser.add_argument("--budgets", type=int, nargs="+", default=[16, 32, 64, 128, 256])
    parser.add_argument("--skip-build", action="store_true")
    parser.add_argument("--skip-e2e", action="store_true")
    parser.add_argument("--device", help="also time the level builder there (cuda: CUDA events)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    console = Console(width=140)
    if not args.skip_build:
        console.print(build_table(args.repeats, args.device))
    if not args.skip_e2e:
        console.print(e2e_table(args))


if __name__ == "__main__":
    main()
