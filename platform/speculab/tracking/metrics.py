"""Run metrics with the names docs/architecture.md defines, computed from engine records.

Definitions (the README repeats them):
- block_efficiency: tokens kept per target call per sequence (sum of kept tokens over the
  sum of rows taking part in each round); accepted_mean: mean tau per sequence-round.
- tokens_per_s, ms_per_token: all kept tokens over the decoding wall time (prefill
  included); speedup_vs_ar: tokens_per_s over the autoregressive baseline's, same prompts.
- time_*_s: wall time per phase (prefills count to target and draft); time_other_s is the
  rest of the wall time, so the four shares add up to 1.
- time_tree_build_s: building DDTree trees from marginals (part of time_draft_s).
- kv_peak_mb_*: largest KV cache held at any point (MiB), trees and drafted paths included.
"""

from __future__ import annotations

from speculab.engine import PromptRecord, RunResult

METRIC_KEYS = (
    "block_efficiency",
    "tokens_per_s",
    "ms_per_token",
    "speedup_vs_ar",
    "time_draft_s",
    "time_target_s",
    "time_verify_s",
    "time_other_s",
    "time_tree_build_s",
    "share_draft",
    "share_target",
    "share_verify",
    "share_other",
    "kv_peak_mb_target",
    "kv_peak_mb_draft",
    "tree_nodes_mean",
    "accepted_mean",
    "target_calls",
    "generated_tokens",
)


def tokens_per_second(run: RunResult) -> float:
    return sum(len(p.tokens) for p in run.prompts) / run.wall_s


def summarize(run: RunResult, baseline: RunResult | None = None) -> dict[str, float]:
    """Every metric of METRIC_KEYS; speedup_vs_ar is NaN without a baseline run."""
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
        "kv_peak_mb_target": max(r.kv_target_bytes for r in run.rounds) / 2**20,
        "kv_peak_mb_draft": max(r.kv_draft_bytes for r in run.rounds) / 2**20,
        "time_tree_build_s": sum(r.time_tree_build_s for r in run.rounds),
        "tree_nodes_mean": sum(sum(r.tree_nodes) for r in run.rounds) / sequence_rounds,
        "accepted_mean": sum(sum(r.accepted) for r in run.rounds) / sequence_rounds,
        "target_calls": float(len(run.rounds)),
        "generated_tokens": float(generated),
    }
    for phase, spent in times.items():
        metrics[f"time_{phase}_s"] = spent
        metrics[f"share_{phase}"] = spent / run.wall_s
    return {key: metrics[key] for key in METRIC_KEYS}


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
