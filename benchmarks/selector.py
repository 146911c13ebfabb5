"""DFlash2's candidate selector against its block pass: what choosing among the top K costs.

    PYTHONPATH=platform python benchmarks/selector.py [--draft assets/tiny-pycode/dflash2]
        [--target assets/tiny-pycode/target] [--device cpu] [--dtype float32] [--context 512]
        [--batches 1 8] [--reps 20]

One process. The drafter absorbs `--context` random feature rows a sequence; then, per batch size,
the block pass runs `--reps` times two ways on the same inputs: to the softmax of the draft logits
(`DFlash2LM.block_marginals`, DFlash's draft on these weights) and through the selector (the top K
of the logits, the K x K scores, their conditionals: `block_law`). The selector's time is the
difference of the medians (the two called in turn); its share is that over the whole DFlash2
draft. On CUDA the clock stops
after a synchronisation; the passes are eager (no captured graph), so the work is what is timed.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from rich.console import Console
from rich.table import Table

from speculab.config import resolve_path
from speculab.models.dflash import DFlash2LM, load_dflash_lm


def seconds(run: Callable[[], object], device: torch.device) -> float:
    start = time.perf_counter()
    run()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def paired_medians(runs: tuple[Callable[[], object], ...], device: torch.device, reps: int) -> list[float]:
    """Median seconds of each run over `reps` rounds that call them in turn (a shared machine's slow
    spells fall on both), after two rounds to warm up."""
    times: list[list[float]] = [[] for _ in runs]
    for rep in range(reps + 2):
        for run, kept in zip(runs, times):
            elapsed = seconds(run, device)
            if rep >= 2:
                kept.append(elapsed)
    return [statistics.median(kept) for kept in times]


def measure(lm: DFlash2LM, batch: int, context: int, reps: int, length: int | None = None) -> tuple[float, float]:
    """(seconds to the draft logits' softmax, seconds through the selector) at `batch` rows, L = `length`
    (default: the block's, block - 1)."""
    width, length = lm.model.fc.in_features, length or lm.block_size - 1
    lm.reset(batch, context + lm.block_size)
    features = torch.randn(batch, context, width, generator=torch.Generator().manual_seed(0))
    lm.absorb(features, torch.ones(batch, context, dtype=torch.bool))
    pending = [[7]] * batch
    marginals, law = paired_medians(
        (lambda: lm.block_marginals(pending, length, 1.0), lambda: lm.block_law(pending, length, 1.0)), lm.device, reps
    )
    return marginals, law


def main(argv: list[str] | None = None) -> list[list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draft", default="assets/tiny-pycode/dflash2")
    parser.add_argument("--target", default="assets/tiny-pycode/target")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    lm = load_dflash_lm(resolve_path(args.draft), resolve_path(args.target), args.dtype, args.device)
    if not isinstance(lm, DFlash2LM):
        raise SystemExit(f"--draft {args.draft}: not a DFlash2 drafter (its dflash_config names no selector)")
    table = Table(
        title=f"DFlash2 selector, K = {lm.top_k}, L = {lm.block_size - 1}, context {args.context}, {args.device}"
    )
    rows = []
    for column in ("batch", "block pass to logits ms", "with the selector ms", "selector ms", "selector share"):
        table.add_column(column, justify="right")
    for batch in args.batches:
        marginals, law = measure(lm, batch, args.context, args.reps)
        row = [str(batch), f"{marginals * 1e3:.2f}", f"{law * 1e3:.2f}", f"{(law - marginals) * 1e3:.2f}"]
        row.append(f"{(law - marginals) / law:.0%}")
        table.add_row(*row)
        rows.append(row)
    Console().print(table)
    return rows


if __name__ == "__main__":
    main()
