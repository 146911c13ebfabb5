"""A point's figures, computed once from what it measured: the records of a decode
(`speculab.core.records`) and the interleaved timings of its methods (`speculab.core.measure`).

Acceptance figures come from the speculative decode's first repetition (every repetition decodes
the same tokens); speed figures from every repetition, paired turn by turn. Every figure that is a
ratio (throughput, a speedup, block efficiency, acceptance by depth) is a ratio of totals over units
(`stats.ratio_of_totals`): sums over prompts (or units), then divided. Nothing here reads a clock or a
model: the same records give the same figures.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from speculab.config.algorithm import BUDGETS
from speculab.core.measure import Sample, Timings, UnitTotals, paired_ratios
from speculab.core.paired import PromptSums
from speculab.core.records import PromptRecord, RoundRecord, RunResult, concat_runs
from speculab.results.names import BASELINE_AR, Figures, compare_key
from speculab.results.names_acceptance import CATEGORY
from speculab.results.ratios import speedup, throughput
from speculab.results.requests import mean_over_requests, requests_of
from speculab.stats import Estimate, Totals, median_estimate, ratio_of_totals

PHASES = ("draft", "target", "verify", "other")  # the wall time's split: `time_<phase>_s`, `share_<phase>`


def tokens_per_second(run: RunResult) -> float:
    return sum(len(p.tokens) for p in run.prompts) / run.wall_s


def run_figures(run: RunResult) -> Figures:
    """What one decode shows by itself: acceptance, costs and its own tokens per second (a point's
    speed figures are `speed_figures`', from repeated interleaved decodes, and replace these)."""
    generated = sum(len(p.tokens) for p in run.prompts)
    sequence_rounds = sum(r.rows for r in run.rounds)
    spent = {
        "draft": run.prefill_draft_s + sum(r.time_draft_s for r in run.rounds),
        "target": run.prefill_target_s + sum(r.time_target_s for r in run.rounds),
        "verify": sum(r.time_verify_s for r in run.rounds),
    }
    spent["other"] = max(0.0, run.wall_s - sum(spent.values()))
    rate = tokens_per_second(run)
    figures: dict[str, Estimate | float] = {
        "block_efficiency": per_round(run, lambda p: len(p.tokens)),
        "tokens_per_s": rate,
        "ms_per_token": 1000.0 / rate,
        "accepted_mean": per_round(run, lambda p: sum(p.accepted)),
        # the field's figure (vLLM, SGLang): 1 + accepted drafts per round, before eos or the budget cut a round
        "acceptance_length": per_round(run, lambda p: sum(p.accepted) + len(p.accepted)),
        **per_request(run),
        **first_position(run),
        **drafted_ahead(run),
        **adaptive_figures(run),
        **draft_actor_time(run),
        **{f"time_{phase}_s": spent[phase] for phase in PHASES},
        **{f"share_{phase}": spent[phase] / run.wall_s for phase in PHASES},
        "time_tree_build_s": sum(r.time_tree_build_s for r in run.rounds),
        "time_feature_s": sum(r.time_feature_s for r in run.rounds),
        "feature_bytes_per_round": sum(r.feature_bytes for r in run.rounds) / len(run.rounds),
        "kv_peak_mb_target": max(r.kv_target_bytes for r in run.rounds) / 2**20,
        "kv_peak_mb_draft": max(r.kv_draft_bytes for r in run.rounds) / 2**20,
        "tree_nodes_mean": sum(sum(r.tree_nodes) for r in run.rounds) / sequence_rounds,
        "target_calls": float(len(run.rounds)),
        "generated_tokens": float(generated),
        "prompts": float(len(run.prompts)),
    }
    return Figures(figures) | acceptance_by_depth(run)


def per_prompt_ratio(numerators: list[float], denominators: list[float], most: float = math.inf) -> Estimate:
    """An acceptance figure: a ratio of sums over prompts, with its interval over prompts (within
    [0, most]: a probability's `most` is 1) from MIN_CLUSTERS prompts on and the ratio estimator's
    standard error below."""
    return ratio_of_totals(Totals.of((1, numerators), (-1, denominators)), se_below=True, most=most)


def per_round(run: RunResult, count: Callable[[PromptRecord], int]) -> Estimate:
    """A count per sequence-round (kept tokens: block efficiency; accepted tokens), as a ratio of sums
    over prompts. ``count``: a prompt's total of the count."""
    prompts = [p for p in run.prompts if p.accepted]
    return per_prompt_ratio([float(count(p)) for p in prompts], [float(len(p.accepted)) for p in prompts])


def per_request(run: RunResult) -> dict[str, Estimate]:
    """The mean of the prompts' own acceptance lengths (none for a run that drafted nothing)."""
    requests = requests_of(run) if run.length else []
    return {"acceptance_length_per_request": mean_over_requests(requests)} if requests else {}


def category_figures(run: RunResult, categories: list[str | None]) -> Figures:
    """`category/<category>/...` for each category the prompts carry (none where no prompt has one): the
    acceptance length both ways and block efficiency over the category's prompts alone. ``categories``
    [prompt], in the run's prompt order."""
    grouped: dict[str, list[PromptRecord]] = {}
    for record, category in zip(run.prompts, categories, strict=True):
        if category is not None and record.accepted:
            grouped.setdefault(category, []).append(record)
    figures: dict[str, Estimate | float] = {}
    for category, prompts in sorted(grouped.items()):
        own, stem = replace(run, prompts=prompts), f"{CATEGORY}{category}/"
        figures |= {
            f"{stem}acceptance_length": per_round(own, lambda p: sum(p.accepted) + len(p.accepted)),
            f"{stem}acceptance_length_per_request": mean_over_requests(requests_of(own)),
            f"{stem}block_efficiency": per_round(own, lambda p: len(p.tokens)),
            f"{stem}prompts": float(len(prompts)),
        }
    return Figures(figures)


def categories_of(figures: Figures) -> list[str]:
    """The categories a point's figures hold, in the table's order."""
    return list(dict.fromkeys(key.split("/")[1] for key in figures if key.startswith(CATEGORY)))


def first_position(run: RunResult) -> dict[str, float]:
    """Means over the sequence-rounds that drafted (the `first_*` figures; none for a baseline)."""
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


def drafted_ahead(run: RunResult) -> dict[str, float]:
    """Drafting ahead's figures over the rounds a round before drafted (`drafting.ahead`; none without):
    the share that took the cached draft, the kept tokens per sequence-round on a hit and on a miss, and
    the drafts made ahead per round. None of them depends on the hardware."""
    rounds = [r for r in run.rounds if r.ahead_hit is not None]
    if not rounds:
        return {}
    hit, miss = [r for r in rounds if r.ahead_hit], [r for r in rounds if not r.ahead_hit]

    def kept(of: list[RoundRecord]) -> float:
        return sum(map(sum, (r.kept for r in of))) / sum(r.rows for r in of) if of else math.nan

    return {
        "ahead_hit_rate": len(hit) / len(rounds),
        "ahead_tokens_hit": kept(hit),
        "ahead_tokens_miss": kept(miss),
        "ahead_drafts_per_round": sum(r.ahead_drafts for r in rounds) / len(rounds),
    }


def adaptive_figures(run: RunResult) -> dict[str, float]:
    """What an adaptive shape did, where the rounds' lengths varied (`algorithm.L=auto`, a confidence stop;
    none where every round drafted L) or their trees' budgets did (`algorithm.budget=auto`): the share of
    rounds at each length (or budget) and their mean; and for a policy, the tokens a sequence-round it
    predicted and those realised over the same rounds (1 + accepted, before eos or the budget cut a round),
    their ratio, and its own milliseconds a round."""
    rounds = run.rounds
    chosen = [r for r in rounds if not math.isnan(r.predicted_tokens)]
    if not chosen and all(r.length == run.length for r in rounds):
        return {}
    if any(r.budget for r in rounds):
        lengths = _shares("budget", [r.budget for r in rounds], BUDGETS)
    else:
        lengths = _shares("length", [r.length for r in rounds], range(run.length + 1))
    if not chosen:
        return lengths
    sequence_rounds = sum(r.rows for r in chosen)
    predicted = sum(r.predicted_tokens * r.rows for r in chosen) / sequence_rounds
    realised = sum(tau + 1 for r in chosen for tau in r.accepted) / sequence_rounds
    return {
        **lengths,
        "adaptive_predicted_tokens": predicted,
        "adaptive_realised_tokens": realised,
        "adaptive_calibration": realised / predicted,
        "adaptive_policy_ms": 1000.0 * sum(r.time_policy_s for r in chosen) / len(chosen),
    }


def _shares(shape: str, chosen: list[int], values: Iterable[int]) -> dict[str, float]:
    """The mean of a shape the rounds `chosen` (`adaptive_<shape>_mean`), and the share of rounds at each of
    `values` (`adaptive_<shape>_<value>`)."""
    shares = {f"adaptive_{shape}_{value}": chosen.count(value) / len(chosen) for value in values}
    return {f"adaptive_{shape}_mean": sum(chosen) / len(chosen), **shares}


def draft_actor_time(run: RunResult) -> dict[str, float]:
    """A draft in an actor of its own served over a socket (`runtime.draft_channel`): its model seconds
    over the rounds, and the share of the decode's rounds it waited for the loop (none otherwise)."""
    busy = sum(r.draft_busy_s for r in run.rounds)
    if not busy:
        return {}
    rounds = run.wall_s - run.prefill_target_s - run.prefill_draft_s
    return {"time_draft_busy_s": busy, "share_draft_idle": max(0.0, 1.0 - busy / rounds) if rounds > 0 else math.nan}


def acceptance_by_depth(run: RunResult) -> Figures:
    """alpha_j, the per-position rate position_j and overlap_j (j = 1..L) with their standard errors over
    prompts, the accepted-length histogram and, for a deterministic tree, the share of rounds off its
    chain; none when nothing was drafted.
    From each prompt's taus and overlaps per round: no model pass."""
    L, prompts = run.length, [p for p in run.prompts if p.accepted]
    if not L or not prompts:
        return Figures()
    # reached[j][i]: prompt i's sequence-rounds that accepted at least j draft tokens, j = 0..L+1
    reached = [[float(sum(tau >= j for tau in p.accepted)) for p in prompts] for j in range(L + 2)]
    # drafted[j][i]: those that reached depth j (tau >= j - 1) and drafted it: all that reached it where every
    # round drafts L tokens; an adaptive run's shorter rounds (`algorithm.L=auto`) are no trial of depth j, and
    # a depth no round drafted has no figure (one no round reached has NaN)
    drafted = [
        [float(sum(tau >= j - 1 and n >= j for tau, n in zip(p.accepted, p.drafted))) for p in prompts]
        for j in range(L + 1)
    ]
    rounds = sum(reached[0])
    figures: dict[str, Estimate | float] = {}
    for j in (j for j in range(1, L + 1) if any(n >= j for p in prompts for n in p.drafted)):
        # a round holds the overlap at depth j iff it reached and drafted it: the rounds of drafted[j]
        overlap = [sum(o[j - 1] for o in p.overlap if len(o) >= j) for p in prompts]
        figures[f"alpha_{j}"] = per_prompt_ratio(reached[j], drafted[j], most=1.0)
        figures[f"position_{j}"] = per_prompt_ratio(
            reached[j], reached[0], most=1.0
        )  # over every round, as vLLM counts
        figures[f"overlap_{j}"] = per_prompt_ratio(overlap, drafted[j], most=1.0)
    figures |= {f"hist_{n}": (sum(reached[n]) - sum(reached[n + 1])) / rounds for n in range(L + 1)}
    if any(p.left_chain for p in prompts):
        figures["left_chain"] = sum(sum(p.left_chain) for p in prompts) / rounds
    return Figures(figures)


def speed_figures(timings: Timings, spec: str, ar: str | None, hf: str | None) -> Figures:
    """The point's speed from interleaved timings of the speculative method `spec` and its baselines
    (None: not run): `totals_figures` over each unit's sums, and a typical unit's speedup (the median of
    per-unit paired ratios) beside each speedup."""
    baselines = {key: UnitTotals.of(timings[b]) for key, b in (("ar", ar), ("hf", hf)) if b is not None}
    figures = totals_figures(UnitTotals.of(timings[spec]), baselines)
    for key, baseline in (("ar", ar), ("hf", hf)):
        if baseline is not None:
            figures[f"typical_speedup_vs_{key}"] = median_estimate(paired_ratios(timings[spec], timings[baseline]))
    return Figures(figures)


def totals_figures(
    own: UnitTotals, baselines: Mapping[str, UnitTotals], figure: Callable[[Totals], Estimate] = ratio_of_totals
) -> dict[str, Estimate | float]:
    """A point's throughput and its speedups over each baseline (`ar`, `hf`: their sums on the same units),
    total tokens over total seconds, paired by unit (the field's figure), with the CPU-time speedup;
    ``figure``: how each is estimated (a simulated sweep, that decides from units alone, takes values)."""
    rate = figure(throughput(own))
    figures: dict[str, Estimate | float] = {"tokens_per_s": rate, "ms_per_token": 1000.0 / rate.value}
    figures["units"] = float(len(own.tokens))
    for key, other in baselines.items():
        figures[f"speedup_vs_{key}"] = figure(speedup(own, other))
        if key == "ar":
            figures["speedup_vs_ar_cpu"] = figure(speedup(own, other, cpu=True)).value
    return figures


def baseline_speed(samples: list[list[Sample]]) -> Figures:
    """A baseline's tokens_per_s (total tokens over total seconds, as the point's own) and ms_per_token;
    its interval is the point's speedup's, which pairs it with the point's own decodes."""
    rate = ratio_of_totals(throughput(UnitTotals.of(samples))).value
    return Figures({"tokens_per_s": rate, "ms_per_token": 1000.0 / rate})


def autoregressive_figures(runs: list[RunResult], samples: list[list[Sample]]) -> Figures:
    """The engine's autoregressive loop as a baseline: its costs from its records, its speed from its timings."""
    return run_figures(concat_runs(runs)).only(BASELINE_AR) | baseline_speed(samples)


def generate_figures(tokens: list[list[int]], timings: Timings, paired_with_ar: bool) -> Figures:
    """transformers' generate as a baseline: what it generated, its speed and, beside the engine's loop,
    its own speedup over it (the sweep plot's reference line)."""
    figures = Figures({"generated_tokens": float(sum(map(len, tokens)))}) | baseline_speed(timings["generate"])
    if paired_with_ar:
        own, ar = UnitTotals.of(timings["generate"]), UnitTotals.of(timings["autoregressive"])
        figures |= {"speedup_vs_ar": ratio_of_totals(speedup(own, ar)).value}
    return figures


def prompt_figures(record: PromptRecord) -> Figures:
    """Live figures of one finished prompt (logged while the point decodes, step = prompts done)."""
    rounds = max(len(record.accepted), 1)
    return Figures(
        {
            "prompt/generated_tokens": float(len(record.tokens)),
            "prompt/block_efficiency": len(record.tokens) / rounds,
            "prompt/accepted_mean": sum(record.accepted) / rounds,
        }
    )


def acceptance_histogram(run: RunResult) -> dict[int, int]:
    """tau -> number of sequence-rounds that accepted exactly tau draft tokens."""
    return tau_counts(run.rounds)


def tau_counts(rounds: list[RoundRecord]) -> dict[int, int]:
    """tau -> sequence-rounds of `rounds` that accepted exactly tau draft tokens, by tau."""
    return dict(sorted(Counter(tau for record in rounds for tau in record.accepted).items()))


def histogram_by_draft_length(run: RunResult) -> dict[int, dict[int, int]]:
    """Draft length -> `acceptance_histogram` of the rounds that drafted it (vLLM's histogram per draft
    length), by each round's own L: a fixed L gives one, `algorithm.L=auto` one per length it chose. Its
    rounds of L = 0 (one autoregressive step, tau = 0 by construction) are left out."""
    lengths = sorted({record.length for record in run.rounds} - {0})
    return {length: tau_counts([r for r in run.rounds if r.length == length]) for length in lengths}


def paired_figures(sums: PromptSums, configured: str) -> Figures:
    """`compare/<verifier>/...` figures, ratios of sums over prompts (`per_prompt_ratio`): the mean
    accepted length, the acceptance length (1 + accepted: the untruncated tokens a round) and, against
    ``configured``, the ratio of its acceptance length to the configured verifier's on the same drafts,
    paired prompt by prompt (`results.verdicts.compared` says which differ)."""
    rounds = sums.rounds.tolist()
    figures: dict[str, Estimate] = {}
    for name, accepted in sums.accepted.items():
        figures[compare_key(name, "accepted_mean")] = per_prompt_ratio(accepted.tolist(), rounds)
        figures[compare_key(name, "acceptance_length")] = per_prompt_ratio((accepted + sums.rounds).tolist(), rounds)
        if name != configured:
            figures[compare_key(name, "relative")] = ratio_of_totals(relative(sums, name, configured), se_below=True)
    return Figures(figures)


def relative(sums: PromptSums, name: str, configured: str) -> Totals:
    """`name`'s acceptance length over `configured`'s, on the same drafts: sums paired by prompt."""
    return Totals.of(
        (1, (sums.accepted[name] + sums.rounds).numpy()), (-1, (sums.accepted[configured] + sums.rounds).numpy())
    )
