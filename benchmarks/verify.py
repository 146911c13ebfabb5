"""Verification time per round for every registered verifier, on random distributions.

    PYTHONPATH=platform python benchmarks/verify.py [--quick] [--threads 1] [--device cuda] [--verifiers gbv,block]
    PYTHONPATH=platform python benchmarks/verify.py --quick --threads 1 --cpu-time   # CPU time: steadier when shared
    PYTHONPATH=platform python benchmarks/verify.py --device cuda --target-ms 5.1   # + the roofline table

For every grid point (batch, K paths, draft length L, vocabulary V) the batched verifier's
time per call is printed beside two baselines measured in the same run: the scalar reference
(one prompt, only at batch 1 and a small vocabulary, ``--reference-vocab``, cut off after
``--reference-seconds``) and a straightforward NumPy transcription of the BV paper's App. A
sketch of block verification (looping over the prompts of the batch). Ratios are baseline
time over batched time. The device defaults to CUDA when available.

On CUDA (or with ``--roofline``) a second table gives, per verifier, ms per call at B = 1 and
8, K = 1..8 (multi-path verifiers), L = 4, 8, 16 and V = 128256, 151936 (``--roofline-vocabs``)
as a multiple of the time of reading p and q once at the copy bandwidth measured in the run,
beside issue 26's targets (0.25 ms at B = 1, 0.5 ms at B = 8, for K <= 4, L <= 8, V = 128256)
and, given ``--target-ms`` (a compiled 8B target pass from benchmarks/gpu_systems.py), the
verifier's share of that pass. Verifiers there are called eagerly, uniforms drawn on the CPU
generator as in the engine.
"""

from __future__ import annotations

import argparse
import itertools
import signal
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from speculab.registry import ALGORITHMS, PATH_ALGORITHMS, get_reference, get_verifier
from speculab.verify.contracts import DrawnPathVerifier, PathVerifier
from speculab.verify.decisions import generator_decisions


@dataclass
class Inputs:
    """Random verifier inputs of one grid point (the contract's tensors)."""

    paths: torch.Tensor  # [B, K, L] int64 drafted tokens, sampled from q
    p: torch.Tensor  # [B, K, L+1, V] float32 target distributions
    q: torch.Tensor  # [B, K, L, V] float32 draft distributions


def random_inputs(batch: int, paths: int, length: int, vocab: int, device: torch.device, seed: int = 0) -> Inputs:
    """Peaked random distributions (softmax of scaled normals) and paths drawn from q."""
    gen = torch.Generator(device=device).manual_seed(seed)
    p = torch.softmax(torch.randn(batch, paths, length + 1, vocab, generator=gen, device=device) * 3, -1)
    q = torch.softmax(torch.randn(batch, paths, length, vocab, generator=gen, device=device) * 3, -1)
    drafted = torch.multinomial(q.flatten(0, 2), 1, generator=gen).view(batch, paths, length)
    return Inputs(drafted, p, q)


# the clock of the per-call times (``--cpu-time``: the process's CPU time, steadier on a shared machine)
CLOCK: list[Callable[[], float]] = [time.perf_counter]


def wall_ms(run: Callable[[], object], device: torch.device, budget_s: float = 1.0) -> float:
    """Median time of ``run`` in ms on `CLOCK` (one warm-up call, then up to 5 calls within the budget)."""
    run()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < 5 and (not times or time.perf_counter() - start < budget_s):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        tick = CLOCK[0]()
        run()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append((CLOCK[0]() - tick) * 1e3)
    return statistics.median(times)


def limited_ms(run: Callable[[], object], seconds: int) -> float | None:
    """One timed call of ``run`` in ms, or None if it did not finish within ``seconds``."""

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        tick = time.perf_counter()
        run()
        return (time.perf_counter() - tick) * 1e3
    except TimeoutError:
        return None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# ps [L+1, V]; qs [L, V]; drafts [L]
def block_verification_appendix_a(
    ps: np.ndarray, qs: np.ndarray, drafts: np.ndarray, rng: np.random.Generator
) -> list[int]:
    """BV paper App. A sketch of block verification (Alg. 2), its typos fixed, nothing optimised."""
    vocab_size = qs.shape[1]
    qs = np.concatenate([qs, np.zeros((1, vocab_size), qs.dtype)])  # append a zero vector
    token_sequence: list[int] = []
    accept_probability = 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        probability_ratios = ps / qs
    vocab_plus_one = np.arange(vocab_size + 1)
    sampling_weights = np.zeros(vocab_size + 1)
    for token_index, token_value in enumerate(list(drafts) + [None]):
        sampling_weights[:vocab_size] = np.maximum(0, ps[token_index] * accept_probability - qs[token_index])
        sampling_weights[vocab_size] = 1 - accept_probability
        sampling_weights /= np.sum(sampling_weights)
        chosen_token = rng.choice(vocab_plus_one, p=sampling_weights)
        if chosen_token < vocab_size:
            token_sequence = [int(x) for x in drafts[:token_index]] + [int(chosen_token)]
        if token_value is not None:
            accept_probability = min(1.0, probability_ratios[token_index, token_value] * accept_probability)
    return token_sequence


# inputs: the grid point's tensors (path 0 of every prompt is verified)
def numpy_baseline(inputs: Inputs) -> Callable[[], object]:
    """The App. A sketch over the prompts of the batch, on host float64 arrays."""
    ps = inputs.p[:, 0].double().cpu().numpy()
    qs = inputs.q[:, 0].double().cpu().numpy()
    drafts = inputs.paths[:, 0].cpu().numpy()
    rng = np.random.default_rng(0)
    return lambda: [block_verification_appendix_a(ps[b], qs[b], drafts[b], rng) for b in range(len(ps))]


def batched_call(
    name: str, inputs: Inputs, replay: Callable[[DrawnPathVerifier], PathVerifier] | None = None
) -> Callable[[], object]:
    """One round per call; a verifier's carry goes into its next call (greedy_block is timed with
    the modification the previous round left pending, as in decoding, not as a first round).
    replay: as `get_verifier`'s (`verify.captured.replayed`: the decision replayed from CUDA graphs)."""
    rng = torch.Generator().manual_seed(0)  # on the CPU, as the engine's: its uniforms move to p's device
    verifier = get_verifier(name, replay=replay)
    pending: list[object] = [None]

    def run() -> None:
        pending[0] = verifier(inputs.paths, inputs.p, inputs.q, rng=rng, carry=pending[0]).carry

    return run


def reference_call(name: str, inputs: Inputs) -> Callable[[], object]:
    reference = get_reference(name)
    paths, p, q = inputs.paths[0].cpu(), inputs.p[0].cpu(), inputs.q[0].cpu()
    decisions = generator_decisions(torch.Generator().manual_seed(0))
    return lambda: reference(paths, p, q, decisions, None)


def copy_bandwidth_gbs(device: torch.device) -> float:
    """GB/s of a device-to-device copy (bytes read plus bytes written): 1 GiB on a GPU, 64 MiB on the CPU."""
    source = torch.empty(2**30 if device.type == "cuda" else 2**26, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    return 2 * source.nbytes / wall_ms(lambda: target.copy_(source), device) / 1e6


# issue 26's targets in ms per call by batch, for K <= 4, L <= 8 at the first preset vocabulary
TARGET_MS = {1: 0.25, 8: 0.5}
TARGET_VOCAB = 128256


def target_cell(point: tuple[int, int, int, int], batched: float) -> str:
    """``ok``/``over`` against the issue's target where it sets one, else ``-``."""
    batch, paths, length, vocab = point
    if batch not in TARGET_MS or paths > 4 or length > 8 or vocab != TARGET_VOCAB:
        return "-"
    return f"{'ok' if batched <= TARGET_MS[batch] else 'over'} ({TARGET_MS[batch]})"


def roofline_grid(name: str, vocabs: list[int], quick: bool) -> list[tuple[int, int, int, int]]:
    """(B, K, L, V) points of the roofline table; K > 1 only for verifiers that take several paths."""
    paths = (1, 4) if quick else tuple(range(1, 9))
    batches, lengths = ((1,), (8,)) if quick else ((1, 8), (4, 8, 16))
    if not ALGORITHMS[name].multi_path:
        paths = (1,)
    return list(itertools.product(batches, paths, lengths, vocabs))


def roofline_table(
    names: list[str], vocabs: list[int], device: torch.device, quick: bool, target_ms: float | None
) -> Table:
    """ms per call against reading p and q once at the measured bandwidth (and a target pass)."""
    bandwidth = copy_bandwidth_gbs(device)
    title = f"verification against reading p and q once on {device} ({bandwidth:.0f} GB/s copy bandwidth)"
    table = Table("verifier", "B", "K", "L", "V", "ms / call", "p+q read ms", "ratio", "target ms", title=title)
    if target_ms is not None:
        table.add_column(f"share of a {target_ms} ms target pass", justify="right")
    for name in names:
        for point in roofline_grid(name, vocabs, quick):
            inputs = random_inputs(*point, device)
            batched = wall_ms(batched_call(name, inputs), device)
            read_ms = (inputs.p.nbytes + inputs.q.nbytes) / bandwidth / 1e6
            share = [] if target_ms is None else [f"{batched / target_ms:.1%}"]
            cells = (ms(batched), f"{read_ms:.4f}", f"{batched / read_ms:.1f}x", target_cell(point, batched), *share)
            table.add_row(name, *map(str, point), *cells)
            del inputs
    return table


def ratio(baseline: float | None, batched: float) -> str:
    return "-" if baseline is None else f"{baseline / batched:.1f}x"


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small grid")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--verifiers", default=",".join(PATH_ALGORITHMS))
    parser.add_argument(
        "--roofline",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the table against reading p and q once (default: on CUDA only)",
    )
    parser.add_argument("--roofline-vocabs", default="128256,151936")
    parser.add_argument("--target-ms", type=float, help="ms of a compiled 8B target pass (benchmarks/gpu_systems.py)")
    parser.add_argument("--reference-vocab", type=int, default=4096)
    parser.add_argument("--reference-seconds", type=int, default=20)
    parser.add_argument(
        "--threads", type=int, default=0, help="torch CPU threads (on a shared machine 1 avoids stalls at every op)"
    )
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="time calls by the process's CPU time, not wall time (CPU only: a busy machine's stalls do not count)",
    )
    args = parser.parse_args()
    if args.cpu_time:
        if args.device != "cpu":
            parser.error("--cpu-time times the CPU only (on CUDA the host's CPU time is not the kernels' time)")
        CLOCK[0] = time.process_time
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    names = args.verifiers.split(",")
    if args.quick:
        grid = [(1, 1, 8, 32768), (1, 4, 8, 131072), (8, 2, 4, 32768)]
        reference_grid = [(1, 2, 4, args.reference_vocab)]
    else:
        grid = list(itertools.product((1, 8, 64), (1, 2, 4), (4, 8), (32768, 131072)))
        reference_grid = list(itertools.product((1,), (1, 2, 4), (4, 8), (args.reference_vocab,)))
    clock = "CPU" if args.cpu_time else "wall"
    table = Table(title=f"verification ms per round on {device} ({torch.get_num_threads()} threads, {clock} time)")
    for column in (
        "verifier",
        "B",
        "K",
        "L",
        "V",
        "batched ms",
        "reference ms",
        "ref/batched",
        "numpy BV ms",
        "numpy/batched",
    ):
        table.add_column(column, justify="left" if column == "verifier" else "right")
    for point in reference_grid + grid:
        batch, paths, length, vocab = point
        inputs = random_inputs(batch, paths, length, vocab, device)
        baseline = wall_ms(numpy_baseline(inputs), torch.device("cpu"))
        for name in names:
            batched = wall_ms(batched_call(name, inputs), device)
            reference = (
                limited_ms(reference_call(name, inputs), args.reference_seconds) if point in reference_grid else None
            )
            table.add_row(
                name,
                *map(str, point),
                ms(batched),
                ms(reference),
                ratio(reference, batched),
                ms(baseline),
                ratio(baseline, batched),
            )
        del inputs
    console = Console(width=160)
    console.print(table)
    if args.roofline or (args.roofline is None and device.type == "cuda"):
        vocabs = [int(v) for v in args.roofline_vocabs.split(",")]
        console.print(roofline_table(names, vocabs, device, args.quick, args.target_ms))


if __name__ == "__main__":
    main()
