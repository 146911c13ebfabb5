"""What the runtime itself costs a round: inline calls, Ray Core actor calls, a Ray Compiled Graph,
the loop beside the target; and the default demo on Ray against inline.

    PYTHONPATH=platform python benchmarks/runtime.py [--rounds 300] [--vocab 4096] [--nodes 5]
        [--round-ms 10.3] [--gpu-round-ms 6.0] [--unit-rounds 40] [--demo-runs 2]

A round of speculative decoding makes four calls between the loop and the models, each
with the tensors it really carries (B = 1): the draft proposes (paths [1, 1, L] and q
[1, 1, L, V]), the target scores the tree (p [1, N, V]), the target commits the kept nodes, the
draft commits the emitted tokens. Here the models do no work, so what is timed is only the
runtime's part of a round:

- inline: the four calls as plain method calls in one process (what `runtime=inline` pays);
- Ray Core: `ray.get(actor.method.remote(...))` for each, as `runtime.loop=driver` makes them;
- Ray Core, verify beside the target: the target verifies and commits in the call that scores
  (three calls: draft propose, target round, draft commit);
- compiled: those three calls as one Ray Compiled Graph execution (an actor takes part in one
  compiled graph at a time, so the verification has to move into the target's step to make a
  round one graph), shared-memory channels between processes on one machine;
- the loop beside the target (`runtime.loop=target`, the default): draft and target in one actor
  that runs a unit's rounds as plain calls; the driver makes one Ray Core call per unit, whose
  result carries the unit's tokens. Timed per unit of `--unit-rounds` rounds (the default demo's
  prompts take about 40), divided by that count.

Interleaved repetitions; medians with the 10th-90th percentile, in microseconds per round,
then what that adds to a measured round: `--round-ms`, the tiny pair's inline round on this
machine (the default demo: 5.1 ms per token at 2.0 tokens per round), and `--gpu-round-ms`,
an 8B-shaped round on one GPU (a compiled target pass at its memory roofline, about 5 ms,
plus a draft; an assumption, not a measurement: pass what `benchmarks/gpu_systems.py` measured).

`--demo-runs N` (0 to skip) then runs the default point (`speculab tracking=none`) N times on each
runtime, alternating, in this process, and prints each runtime's median speculative tokens/s and
`speedup_vs_hf`, and their ratios Ray / inline: the issue's "within 10% of inline", end to end.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from collections.abc import Callable

import ray
import torch
from ray.dag import InputNode
from rich.console import Console
from rich.table import Table

from speculab.results.names import interval_names, mlflow_name


class Draft:
    """The draft's side of a round, doing no work: what it returns has a round's shapes."""

    def __init__(self, vocab: int, length: int) -> None:
        self.paths = torch.zeros(1, 1, length, dtype=torch.long)  # [B, K, L]
        self.q = torch.rand(1, 1, length, vocab)  # [B, K, L, V]

    def propose(self, _: object) -> tuple[torch.Tensor, torch.Tensor]:
        return self.paths, self.q

    def commit(self, emitted: list[list[int]]) -> int:
        return len(emitted)


class Target:
    def __init__(self, vocab: int, nodes: int) -> None:
        self.p = torch.rand(1, nodes, vocab)  # [B, N, V]

    def score(self, proposal: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return self.p

    def commit(self, kept: torch.Tensor) -> list[list[int]]:
        return [kept[0].tolist()]

    def round(self, proposal: tuple[torch.Tensor, torch.Tensor]) -> list[list[int]]:
        """Score, verify (here: keep the first three nodes) and commit in one call."""
        self.score(proposal)
        return self.commit(torch.zeros(1, 3, dtype=torch.long))


class Pair:
    """Draft and target in one process, which runs a unit's rounds itself (the loop beside the target)."""

    def __init__(self, vocab: int, length: int, nodes: int) -> None:
        self.round = inline_round(Draft(vocab, length), Target(vocab, nodes))

    def unit(self, rounds: int) -> list[list[int]]:
        for _ in range(rounds):
            self.round()
        return [[0, 0, 0]] * rounds  # the unit's emitted tokens travel back with the call


def inline_round(draft: Draft, target: Target) -> Callable[[], None]:
    def run() -> None:
        target.score(draft.propose(None))
        draft.commit(target.commit(torch.zeros(1, 3, dtype=torch.long)))

    return run


def core_round(draft: ray.actor.ActorHandle, target: ray.actor.ActorHandle) -> Callable[[], None]:
    def run() -> None:
        proposal = ray.get(draft.propose.remote(None))
        ray.get(target.score.remote(proposal))
        emitted = ray.get(target.commit.remote(torch.zeros(1, 3, dtype=torch.long)))
        ray.get(draft.commit.remote(emitted))

    return run


def beside_round(draft: ray.actor.ActorHandle, target: ray.actor.ActorHandle) -> Callable[[], None]:
    def run() -> None:
        emitted = ray.get(target.round.remote(ray.get(draft.propose.remote(None))))
        ray.get(draft.commit.remote(emitted))

    return run


def compiled_round(draft: ray.actor.ActorHandle, target: ray.actor.ActorHandle) -> tuple[Callable[[], None], object]:
    """One compiled graph execution a round, and the graph (to tear down)."""
    with InputNode() as start:
        graph = draft.commit.bind(target.round.bind(draft.propose.bind(start))).experimental_compile()

    def run() -> None:
        ray.get(graph.execute(None))

    return run, graph


def unit_round(pair: ray.actor.ActorHandle, rounds: int) -> Callable[[], None]:
    def run() -> None:
        ray.get(pair.unit.remote(rounds))

    return run


def timed(run: Callable[[], None], rounds: int = 1) -> float:
    """Microseconds per round of one call of `run` (which makes `rounds` rounds)."""
    start = time.perf_counter()
    run()
    return (time.perf_counter() - start) * 1e6 / rounds


def points_table(title: str, rows: dict[str, list[str]], keys: tuple[str, ...], runs: int) -> Table:
    """Each row's point (`speculab` with those overrides, untracked) `runs` times, the rows in a rotating
    order, in this process: the medians of `keys` (each run's value in brackets). The Ray groups of one
    row are closed before the next loads its own (both would not fit the machine's CPUs)."""
    import contextlib
    import io

    from spread import point

    from speculab.point.experiment import logged_figures, run
    from speculab.runtime.groups import POOL

    found: dict[str, dict[str, list[float]]] = {row: {key: [] for key in keys} for row in rows}
    labels = list(rows)
    for index in range(runs):
        for row in labels[index % len(labels) :] + labels[: index % len(labels)]:
            with contextlib.redirect_stdout(io.StringIO()):  # each point prints its own summary
                metrics = logged_figures(run(point(["tracking=none", *rows[row]])).result)
            POOL.close_all()
            for key in keys:
                found[row][key].append(metrics.get(key, math.nan))
    table = Table(title=f"{title}, {runs} run(s) each, rotating order: medians (runs)")
    for column in ("point", *keys):
        table.add_column(column, justify="right" if column != "point" else "left")
    for row, values in found.items():
        table.add_row(
            row, *(f"{statistics.median(v):.3g} ({', '.join(f'{x:.3g}' for x in v)})" for v in values.values())
        )
    return table


# The default demo on each runtime, at the default threads (one per model process, as a Ray actor with one
# CPU has) and at two: how the answer moves with torch's threads on this machine.
DEMO_ROWS = {
    "ray": [],
    "inline": ["runtime=inline"],
    "ray, 2 threads": ["runtime.torch_threads=2"],
    "inline, 2 threads": ["runtime=inline", "runtime.torch_threads=2"],
}
DEMO_KEYS = ("tokens_per_s", "speedup_vs_hf", *interval_names("speedup_vs_hf"))  # MLflow names
# A TP = 2 target against one rank, with the loop in the driver, on rank 0 and inline (issue 39's table), and
# with the draft whole on rank 0 against sharded over both ranks (issue 49).
TP_COMMON = ["cluster.actor_cpus=0.5", "dataset.num_prompts=4", "sampling.max_new_tokens=32"]
TP_ROWS = {
    "TP=2, loop in the driver": ["cluster.tp_size=2", "runtime.loop=driver", *TP_COMMON],
    "TP=2, loop on rank 0": ["cluster.tp_size=2", "runtime.loop=target", *TP_COMMON],
    "TP=2, draft sharded with the target": ["cluster.tp_size=2", "cluster.draft_placement=sharded", *TP_COMMON],
    "TP=1, loop in the driver": ["runtime.loop=driver", *TP_COMMON],
    "TP=1, loop beside the target": ["runtime.loop=target", *TP_COMMON],
    "TP=1, inline": ["runtime=inline", *TP_COMMON],
}
TP_KEYS = (
    "tokens_per_s",
    "baseline_ar/tokens_per_s",
    "baseline_hf/tokens_per_s",
    "speedup_vs_ar",
    "speedup_vs_hf",
    mlflow_name("time_draft_s"),  # the draft's part of the speculative decode: whole on rank 0, or sharded
    mlflow_name("time_target_s"),
    mlflow_name("ray_calls_per_round"),
)


def summary(samples: list[float]) -> tuple[float, float, float]:
    """(median, 10th, 90th percentile)."""
    deciles = statistics.quantiles(samples, n=10)
    return statistics.median(samples), deciles[0], deciles[-1]


def rounds_table(args: argparse.Namespace) -> Table:
    """The runtime's own part of a round, per path, interleaved (models that do no work)."""
    length = args.nodes - 1
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        remote_draft = ray.remote(num_cpus=0)(Draft).remote(args.vocab, length)
        remote_target = ray.remote(num_cpus=0)(Target).remote(args.vocab, args.nodes)
        # the compiled graph gets actors of its own: an actor serves one compiled graph and nothing else
        graph_draft = ray.remote(num_cpus=0)(Draft).remote(args.vocab, length)
        graph_target = ray.remote(num_cpus=0)(Target).remote(args.vocab, args.nodes)
        compiled, graph = compiled_round(graph_draft, graph_target)
        pair = ray.remote(num_cpus=0)(Pair).remote(args.vocab, length, args.nodes)
        # path -> (one call, the rounds it makes)
        methods: dict[str, tuple[Callable[[], None], int]] = {
            "inline (4 calls)": (inline_round(Draft(args.vocab, length), Target(args.vocab, args.nodes)), 1),
            "Ray Core, loop in the driver (4 calls)": (core_round(remote_draft, remote_target), 1),
            "Ray Core, verify beside the target (3 calls)": (beside_round(remote_draft, remote_target), 1),
            "Ray Compiled Graph (1 execution)": (compiled, 1),
            f"loop beside the target (1 call / {args.unit_rounds} rounds)": (
                unit_round(pair, args.unit_rounds),
                args.unit_rounds,
            ),
        }
        for run, _ in methods.values():  # warm-up: actors started, graphs compiled, channels sized
            for _ in range(20):
                run()
        samples: dict[str, list[float]] = {name: [] for name in methods}
        names = list(methods)
        for index in range(args.rounds):  # interleaved, rotating order
            shift = index % len(names)
            for name in names[shift:] + names[:shift]:
                samples[name].append(timed(*methods[name]))
        graph.teardown()
    finally:
        ray.shutdown()
    table = Table(
        title=f"runtime cost of a round, V = {args.vocab}, N = {args.nodes} nodes, "
        f"{args.rounds} interleaved rounds, {os.cpu_count()} cores"
    )
    for column in ("path", "us / round (median)", "p10 - p90", "+ tiny round", "+ 8B GPU round (assumed)"):
        table.add_column(column, justify="right" if column != "path" else "left")
    for name, values in samples.items():
        median, low, high = summary(values)
        table.add_row(
            name,
            f"{median:,.0f}",
            f"{low:,.0f} - {high:,.0f}",
            f"{median / 1e3 / args.round_ms:.1%}",
            f"{median / 1e3 / args.gpu_round_ms:.1%}",
        )
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--vocab", type=int, default=4096, help="the tiny pair's; an 8B target's is 128256")
    parser.add_argument("--nodes", type=int, default=5, help="tree nodes scored a round (K L + 1)")
    parser.add_argument("--round-ms", type=float, default=10.3, help="a tiny-pair round inline on this machine")
    parser.add_argument("--gpu-round-ms", type=float, default=6.0, help="an 8B round on one GPU (assumed)")
    parser.add_argument("--unit-rounds", type=int, default=40, help="rounds per unit with the loop beside the target")
    parser.add_argument("--demo-runs", type=int, default=2, help="default-demo runs per row (0: skip)")
    parser.add_argument("--tp-runs", type=int, default=1, help="TP = 2 point runs per row (0: skip)")
    parser.add_argument("--skip-rounds", action="store_true", help="only the end-to-end tables")
    args = parser.parse_args(argv)
    threads = torch.get_num_threads()
    if not args.skip_rounds:
        torch.set_num_threads(1)
        Console().print(rounds_table(args))
    torch.set_num_threads(threads)  # the points set their models' threads themselves (runtime.torch_threads)
    if args.demo_runs:
        Console().print(points_table("the default demo", DEMO_ROWS, DEMO_KEYS, args.demo_runs))
    if args.tp_runs:
        Console().print(points_table("a TP = 2 target, 4 prompts x 32 tokens", TP_ROWS, TP_KEYS, args.tp_runs))


if __name__ == "__main__":
    main()
