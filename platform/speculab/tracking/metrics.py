"""Run metrics, computed from engine records, and the one table of their names.

Each metric has a short key (what `summarize` returns, the console shows and the code uses)
and the name MLflow shows. MLflow's chart view groups metrics by the prefix before "/", so the
headline metrics carry no prefix and come first, and the rest sit under `time/`, `memory/`,
`tree/`, `count/`, `runtime/` and `accept/` (acceptance by depth: one metric per depth, so their
number follows L, `ACCEPTANCE_METRICS`); the autoregressive baseline's metrics are
`baseline_ar/<key>`. `METRICS` is the rename table: `mlflow_name(key)` gives the logged name,
`read_metric` also finds runs logged before the rename under the bare key.
`python -m speculab.tracking.metrics` prints the table of docs/architecture.md.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from speculab.measure import ratio_interval
from speculab.records import PromptRecord, RunResult


@dataclass(frozen=True)
class Metric:
    key: str  # short name: summarize(), the console, experiment.run's return value
    mlflow: str  # the name logged to MLflow
    meaning: str


def interval(key: str, name: str = "", kind: str = "bootstrap") -> tuple[Metric, Metric]:
    """The two ends of a measured figure's 95% interval (`speculab.measure`), logged beside it
    (``name``: the figure's MLflow name where it is not its key)."""
    return (
        Metric(f"{key}_ci_low", f"{name or key}_ci_low", f"{key}'s 95% {kind} interval over prompts: lower end"),
        Metric(f"{key}_ci_high", f"{name or key}_ci_high", f"{key}'s 95% {kind} interval over prompts: upper end"),
    )


METRICS: tuple[Metric, ...] = (
    Metric("block_efficiency", "block_efficiency", "kept tokens per sequence-round (per target call per sequence)"),
    Metric(
        "tokens_per_s",
        "tokens_per_s",
        "kept tokens per wall second, prefill included: the median over prompts (units of a batch) of each one's "
        "median over measure.repeats interleaved repetitions",
    ),
    *interval("tokens_per_s"),
    Metric(
        "speedup_vs_ar",
        "speedup_vs_ar",
        "over the engine's own autoregressive loop: the median over prompts of paired throughput ratios, each "
        "of two decodes run back to back (docs/measuring.md)",
    ),
    *interval("speedup_vs_ar"),
    Metric(
        "speedup_vs_ar_cpu",
        "speedup_vs_ar_cpu",
        "the same paired ratio in tokens per CPU second (this process and the model actors): robust to a busy machine",
    ),
    Metric(
        "speedup_vs_hf", "speedup_vs_hf", "over transformers' generate on the same target: paired like speedup_vs_ar"
    ),
    *interval("speedup_vs_hf"),
    Metric("accepted_mean", "accepted_mean", "mean accepted draft tokens (tau) per sequence-round"),
    Metric(
        "first_accept_rate",
        "first/accept_rate",
        "share of sequence-rounds that accepted the first drafted token (tau >= 1)",
    ),
    Metric(
        "first_overlap_mean",
        "first/overlap_mean",
        "mean over sequence-rounds of sum_x min(p, q) at the first drafted position: what one token drawn from "
        "q is accepted with (equals first_accept_rate in expectation for one sampled path; below it means the "
        "verification loses, not the drafter)",
    ),
    Metric("first_entropy_target", "first/entropy_target", "mean entropy of p at the first drafted position, nats"),
    Metric("first_entropy_draft", "first/entropy_draft", "mean entropy of q at the first drafted position, nats"),
    Metric("ms_per_token", "ms_per_token", "1000 / tokens_per_s"),
    Metric("time_draft_s", "time/draft_s", "wall time drafting (draft prefill included)"),
    Metric("time_target_s", "time/target_s", "wall time in the target (prefill, tree scoring, commits)"),
    Metric("time_verify_s", "time/verify_s", "wall time verifying"),
    Metric("time_other_s", "time/other_s", "the rest of the wall time (coordinator bookkeeping)"),
    Metric("share_draft", "time/share_draft", "time_draft_s over the wall time"),
    Metric("share_target", "time/share_target", "time_target_s over the wall time"),
    Metric("share_verify", "time/share_verify", "time_verify_s over the wall time"),
    Metric("share_other", "time/share_other", "time_other_s over the wall time (the four shares add up to 1)"),
    Metric("time_tree_build_s", "time/tree_build_s", "building DDTree trees from marginals (part of time_draft_s)"),
    Metric(
        "time_feature_s",
        "time/feature_s",
        "DFlash: the drafter absorbing the target's features (part of time_draft_s; on Ray the transfer is in "
        "time_ray_s)",
    ),
    Metric(
        "feature_bytes_per_round",
        "runtime/feature_bytes_per_round",
        "DFlash: bytes of target features handed to the drafter per round (prefill's excluded)",
    ),
    Metric("kv_peak_mb_target", "memory/kv_peak_mb_target", "largest target KV cache held, MiB (trees included)"),
    Metric("kv_peak_mb_draft", "memory/kv_peak_mb_draft", "largest draft KV cache held, MiB (drafted paths included)"),
    Metric("tree_nodes_mean", "tree/nodes_mean", "mean nodes per scored tree, root included"),
    Metric("target_calls", "count/target_calls", "batched target forward passes (prefill excluded)"),
    Metric("generated_tokens", "count/generated_tokens", "kept tokens over all prompts"),
)
RUNTIME_METRICS: tuple[Metric, ...] = (
    Metric("time_ray_s", "time/ray_s", "Ray: coordinator time in Ray calls beyond the actors' own compute"),
    Metric("restarts", "runtime/restarts", "Ray: model groups recreated after losing an actor"),
    Metric(
        "ray_calls_per_round",
        "runtime/ray_calls_per_round",
        "Ray: calls the decode loop makes to model actors per round (one per rank and model step with "
        "runtime.loop=driver; 0 with the loop on the target's rank 0, whose driver calls once per rank and unit)",
    ),
    Metric(
        "host_syncs_per_round",
        "runtime/host_syncs_per_round",
        "CUDA: host synchronisations per round (reads of device values), counted on the speculative warm-up "
        "with torch's sync debug mode; absent on the CPU and when the loop runs in the driver",
    ),
    Metric("model_loads", "runtime/model_loads", "Ray: model group loads in this job so far"),
    Metric(
        "units_finished",
        "runtime/units_finished",
        "a point that failed (a lost node, restarts used up): units whose speculative decode finished and is "
        "logged with the point; absent when the point finished",
    ),
)
PAIRED_METRICS: tuple[Metric, ...] = (
    Metric("time_paired_s", "time/paired_s", "algorithm.compare: the paired verifications, outside the wall time"),
)
ACCEPT_PREFIX = "accept/"
RATIO = "ratio-estimator (Student t, clipped to [0, 1])"
# Acceptance by depth (docs/measuring.md): one metric per draft depth j = 1..L or accepted length
# n = 0..L, so how many a run logs follows its L; the key's MLflow name is ACCEPT_PREFIX + key.
ACCEPTANCE_METRICS: tuple[Metric, ...] = (
    Metric(
        "alpha_<j>",
        "accept/alpha_<j>",
        "conditional acceptance at depth j: sequence-rounds with tau >= j over those with tau >= j - 1 (the "
        "depth-j draft token accepted, given depths 1..j-1 were; tau before eos / max-new-tokens truncation)",
    ),
    *interval("alpha_<j>", "accept/alpha_<j>", RATIO),
    Metric(
        "overlap_<j>",
        "accept/overlap_<j>",
        "mean over the sequence-rounds that reached depth j (tau >= j - 1) of sum_x min(p_j, q_j) along the "
        "accepted path: what token verification accepts the depth-j token with (alpha_<j> in expectation for "
        "one sampled path; a DDTree's q_j is its depth-j marginal)",
    ),
    *interval("overlap_<j>", "accept/overlap_<j>", RATIO),
    Metric("hist_<n>", "accept/hist_<n>", "share of sequence-rounds that accepted exactly n draft tokens, n = 0..L"),
    Metric(
        "left_chain",
        "accept/left_chain",
        "deterministic trees (DDTree): share of sequence-rounds whose accepted path left the tree's "
        "first-ranked chain (the drafter's most probable token at every depth)",
    ),
)
_ACCEPTANCE_KEY = re.compile(
    "|".join(re.escape(m.key).replace("<j>", r"\d+").replace("<n>", r"\d+") for m in ACCEPTANCE_METRICS)
)
METRIC_KEYS = tuple(m.key for m in METRICS)
# What a pass shows without timing it: a failed point logs these for the units it finished.
UNTIMED = (
    "block_efficiency",
    "accepted_mean",
    "tree_nodes_mean",
    "kv_peak_mb_target",
    "kv_peak_mb_draft",
    "target_calls",
    "generated_tokens",
)
HEADLINE = ("block_efficiency", "tokens_per_s", "speedup_vs_hf", "speedup_vs_ar", "accepted_mean")
INTERVALS = ("tokens_per_s", "speedup_vs_ar", "speedup_vs_hf")  # headline figures measured with an interval
ENDS = ("ci_low", "ci_high")  # an interval's metrics: `<key>_ci_low`, `<key>_ci_high`
# What the autoregressive baseline logs of its metrics (the rest are constants for it: block efficiency 1,
# no draft, no tree); fewer charts stand before the headline ones on a run's page.
BASELINE_KEYS = (
    "tokens_per_s",
    "ms_per_token",
    "time_target_s",
    "kv_peak_mb_target",
    "target_calls",
    "generated_tokens",
)
BASELINE_PREFIX = "baseline_ar/"
HF_PREFIX = "baseline_hf/"
_MLFLOW = {m.key: m.mlflow for m in (*METRICS, *RUNTIME_METRICS, *PAIRED_METRICS)}


def is_acceptance(key: str) -> bool:
    """A key of ACCEPTANCE_METRICS with its number filled in (`alpha_3`, `hist_0_ci_low` is not one)."""
    return _ACCEPTANCE_KEY.fullmatch(key) is not None


def mlflow_name(key: str) -> str:
    """The MLflow name of a metric key; CUDA peaks (`mem_peak_mb_<role>_<call>`) go under memory/,
    acceptance by depth under accept/."""
    if key.startswith("mem_peak_mb_"):
        return f"memory/{key.removeprefix('mem_')}"
    if is_acceptance(key):
        return ACCEPT_PREFIX + key
    return _MLFLOW.get(key, key)


def acceptance_logged(logged: dict[str, float]) -> dict[str, float]:
    """The acceptance-by-depth metrics of a logged run (MLflow names) under their keys."""
    return {
        name.removeprefix(ACCEPT_PREFIX): value
        for name, value in logged.items()
        if name.startswith(ACCEPT_PREFIX) and is_acceptance(name.removeprefix(ACCEPT_PREFIX))
    }


def depth_series(metrics: dict[str, float], stem: str, first: int = 1, end: str = "") -> list[float]:
    """`<stem>_<first><end>`, `<stem>_<first + 1><end>`, ... as long as they are there (`alpha` gives
    alpha_1..alpha_L, with ``end`` `_ci_low` the lower ends of their intervals)."""
    values: list[float] = []
    while (key := f"{stem}_{first + len(values)}{end}") in metrics:
        values.append(metrics[key])
    return values


def mlflow_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """Metrics under their MLflow names, at 5 significant digits (what the UI's table shows)."""
    return {mlflow_name(key): float(f"{value:.5g}") for key, value in metrics.items()}


def baseline_metrics(baseline: dict[str, float], prefix: str = BASELINE_PREFIX) -> dict[str, float]:
    """A baseline's metrics under `<prefix><key>`, those it has (a speedup over itself is NaN)."""
    return {f"{prefix}{key}": float(f"{value:.5g}") for key, value in baseline.items() if not math.isnan(value)}


def hf_metrics(tokens: list[list[int]]) -> dict[str, float]:
    """transformers' generate as a baseline: what it generated on the run's prompts (its speed is
    `speculab.measure.baseline_speed`'s)."""
    return {"generated_tokens": float(sum(map(len, tokens)))}


def read_metric(logged: dict[str, float], key: str) -> float | None:
    """A metric of a logged run by key: its MLflow name, or the bare key of runs logged before the rename."""
    return logged.get(mlflow_name(key), logged.get(key))


def metrics_markdown() -> str:
    lines = ["| key | MLflow name | meaning |", "|---|---|---|"]
    every = (*METRICS, *ACCEPTANCE_METRICS, *RUNTIME_METRICS, *PAIRED_METRICS)
    lines += [f"| `{m.key}` | `{m.mlflow}` | {m.meaning} |" for m in every]
    lines += [
        "| `mem_peak_mb_<role>_<call>` | `memory/peak_mb_<role>_<call>` | CUDA only: peak memory per call kind |",
        f"| (baseline) | `baseline_ar/<key>` | the engine's autoregressive loop's {', '.join(BASELINE_KEYS)} |",
        "| (baseline) | `baseline_hf/tokens_per_s`, `ms_per_token`, `generated_tokens`, `speedup_vs_ar` | "
        "transformers' `generate` on the same target and prompts; its own paired speedup over the engine's loop |",
        "| (paired) | `compare/<verifier>/block_efficiency`, `accepted_mean`, their `_se`, "
        "`diff_block_efficiency`, `diff_block_efficiency_se` | `algorithm.compare`: each verifier on the run's own "
        "drafts, and its paired difference from the configured one (docs/algorithms.md) |",
        "| (live) | `prompt/block_efficiency`, `prompt/accepted_mean`, `prompt/generated_tokens` | "
        "each finished prompt, step = prompts done |",
    ]
    return "\n".join(lines)


def tokens_per_second(run: RunResult) -> float:
    return sum(len(p.tokens) for p in run.prompts) / run.wall_s


def summarize(
    run: RunResult, baseline: RunResult | None = None, hf_tokens_per_s: float | None = None
) -> dict[str, float]:
    """Every metric of METRIC_KEYS from one pass (a point's speeds are `speculab.measure`'s, from
    repeated interleaved passes); a speedup is NaN without its baseline, an interval always."""
    generated = sum(len(p.tokens) for p in run.prompts)
    sequence_rounds = sum(r.rows for r in run.rounds)
    times = {
        "draft": run.prefill_draft_s + sum(r.time_draft_s for r in run.rounds),
        "target": run.prefill_target_s + sum(r.time_target_s for r in run.rounds),
        "verify": sum(r.time_verify_s for r in run.rounds),
    }
    times["other"] = max(0.0, run.wall_s - sum(times.values()))
    rate = tokens_per_second(run)
    metrics = {
        "block_efficiency": generated / sequence_rounds,
        "tokens_per_s": rate,
        "ms_per_token": 1000.0 / rate,
        "speedup_vs_ar": rate / tokens_per_second(baseline) if baseline else float("nan"),
        "speedup_vs_hf": rate / hf_tokens_per_s if hf_tokens_per_s else float("nan"),
        "kv_peak_mb_target": max(r.kv_target_bytes for r in run.rounds) / 2**20,
        "kv_peak_mb_draft": max(r.kv_draft_bytes for r in run.rounds) / 2**20,
        "time_tree_build_s": sum(r.time_tree_build_s for r in run.rounds),
        "time_feature_s": sum(r.time_feature_s for r in run.rounds),
        "feature_bytes_per_round": sum(r.feature_bytes for r in run.rounds) / len(run.rounds),
        "tree_nodes_mean": sum(sum(r.tree_nodes) for r in run.rounds) / sequence_rounds,
        "accepted_mean": sum(sum(r.accepted) for r in run.rounds) / sequence_rounds,
        **first_position_metrics(run),
        "target_calls": float(len(run.rounds)),
        "generated_tokens": float(generated),
    }
    for phase, spent in times.items():
        metrics[f"time_{phase}_s"] = spent
        metrics[f"share_{phase}"] = spent / run.wall_s
    return {key: metrics.get(key, math.nan) for key in METRIC_KEYS} | acceptance_metrics(run)


def first_position_metrics(run: RunResult) -> dict[str, float]:
    """Means over the sequence-rounds that drafted (the `first_*` metrics; none for a baseline)."""
    rounds = [r for r in run.rounds if r.first_overlap]
    if not rounds:
        return {}
    count = sum(len(r.first_overlap) for r in rounds)

    def mean(values: list[list[float]]) -> float:
        return sum(map(sum, values)) / count

    return {
        "first_accept_rate": sum(tau >= 1 for r in rounds for tau in r.accepted) / count,
        "first_overlap_mean": mean([r.first_overlap for r in rounds]),
        "first_entropy_target": mean([r.first_entropy_target for r in rounds]),
        "first_entropy_draft": mean([r.first_entropy_draft for r in rounds]),
    }


def acceptance_metrics(run: RunResult) -> dict[str, float]:
    """ACCEPTANCE_METRICS: alpha_j and overlap_j (j = 1..L) with their intervals over prompts, the
    accepted-length histogram and, for a deterministic tree, the share of rounds off its chain; none
    when nothing was drafted. From each prompt's taus and overlaps per round: no model pass."""
    L, prompts = run.length, [p for p in run.prompts if p.accepted]
    if not L or not prompts:
        return {}
    # reached[j][i]: prompt i's sequence-rounds that accepted at least j draft tokens, j = 0..L+1
    reached = [[float(sum(tau >= j for tau in p.accepted)) for p in prompts] for j in range(L + 2)]
    rounds = sum(reached[0])
    metrics: dict[str, float] = {}
    for j in range(1, L + 1):
        # a round holds the overlap at depth j iff it reached it (tau >= j - 1): the same rounds as reached[j - 1]
        overlap = [sum(o[j - 1] for o in p.overlap if len(o) >= j) for p in prompts]
        metrics |= share_metrics(f"alpha_{j}", reached[j], reached[j - 1])
        metrics |= share_metrics(f"overlap_{j}", overlap, reached[j - 1])
    metrics |= {f"hist_{n}": (sum(reached[n]) - sum(reached[n + 1])) / rounds for n in range(L + 1)}
    if any(p.left_chain for p in prompts):
        metrics["left_chain"] = sum(sum(p.left_chain) for p in prompts) / rounds
    return metrics


def share_metrics(key: str, numerators: list[float], denominators: list[float]) -> dict[str, float]:
    """`key` = sum(numerators) / sum(denominators) over prompts, a probability, and its interval
    (`measure.ratio_interval`) clipped to [0, 1]; NaN where the denominators are all 0 (no round reached it)."""
    total = sum(denominators)
    value = sum(numerators) / total if total else math.nan
    half = ratio_interval(numerators, denominators)
    low, high = (math.nan, math.nan) if half is None else (max(value - half, 0.0), min(value + half, 1.0))
    return {key: value, f"{key}_ci_low": low, f"{key}_ci_high": high}


def prompt_metrics(record: PromptRecord) -> dict[str, float]:
    """Live metrics of one finished prompt (logged while the run decodes, step = prompts done)."""
    rounds = max(len(record.accepted), 1)
    return {
        "prompt/generated_tokens": float(len(record.tokens)),
        "prompt/block_efficiency": len(record.tokens) / rounds,
        "prompt/accepted_mean": sum(record.accepted) / rounds,
    }


def acceptance_histogram(run: RunResult) -> dict[int, int]:
    """tau -> number of sequence-rounds that accepted exactly tau draft tokens."""
    counts: dict[int, int] = {}
    for record in run.rounds:
        for tau in record.accepted:
            counts[tau] = counts.get(tau, 0) + 1
    return dict(sorted(counts.items()))


if __name__ == "__main__":
    print(metrics_markdown())
