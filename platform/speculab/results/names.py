"""The one table of a point's figures: each figure's key, its MLflow name and what it means, and
the two crossings between them (`flatten` writes `Figures` as MLflow metrics, `parse` reads them
back), the only place that knows how an interval or a standard error is spelled in MLflow.

A key is what the code and the console use (`tokens_per_s`, `alpha_3`); the MLflow name groups
figures in MLflow's chart view by the prefix before "/": the headline figures carry none and come
first, the rest sit under `time/`, `memory/`, `tree/`, `count/`, `runtime/`, `first/`, `ahead/`,
`adaptive/`, `accept/` and `category/`. A family (`alpha_<j>`: one figure per draft depth) is one row whose
placeholder a
number or a name fills. A baseline's figures are logged under `baseline_ar/<key>` and
`baseline_hf/<key>`. `python -m speculab.results.names_table` prints the table of docs/architecture.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from functools import cache

from speculab.results.metric import PER_PROMPT, PER_UNIT, TYPICAL, Metric
from speculab.results.names_acceptance import ACCEPTANCE_METRICS, CATEGORY_METRICS, REQUEST_METRICS
from speculab.stats import RATIO, Estimate

LOW, HIGH, SE = "_ci_low", "_ci_high", "_se"  # an interval's ends and a standard error, after the MLflow name
METRICS: tuple[Metric, ...] = (
    Metric(
        "block_efficiency",
        "block_efficiency",
        "kept tokens per sequence-round (per target call per sequence): kept tokens over sequence-rounds, summed "
        "over prompts",
        **PER_PROMPT,
    ),
    Metric(
        "tokens_per_s",
        "tokens_per_s",
        "throughput: kept tokens over wall seconds, prefill included, totalled over every unit and measure.repeats "
        "interleaved repetition",
        **PER_UNIT,
    ),
    Metric(
        "speedup_vs_ar",
        "speedup_vs_ar",
        "the throughput speedup over the engine's own autoregressive loop (the field's figure): the point's "
        "tokens_per_s over the loop's, both totalled over the same units and repetitions, each unit's two decodes "
        "run back to back (docs/measuring.md)",
        **PER_UNIT,
    ),
    Metric(
        "typical_speedup_vs_ar",
        "typical/speedup_vs_ar",
        "a typical unit's speedup over the engine's autoregressive loop: the median over units of each unit's "
        "paired throughput ratio (its median over repetitions); differs from speedup_vs_ar where units differ",
        **TYPICAL,
    ),
    Metric(
        "speedup_vs_ar_cpu",
        "speedup_vs_ar_cpu",
        "speedup_vs_ar in tokens per CPU second (this process and the model actors): what a busy machine moves least",
    ),
    Metric(
        "speedup_vs_hf",
        "speedup_vs_hf",
        "the throughput speedup over transformers' generate on the same target, totalled like speedup_vs_ar",
        **PER_UNIT,
    ),
    Metric(
        "typical_speedup_vs_hf",
        "typical/speedup_vs_hf",
        "a typical unit's speedup over transformers' generate: the median of per-unit paired ratios",
        **TYPICAL,
    ),
    Metric("accepted_mean", "accepted_mean", "mean accepted draft tokens (tau) per sequence-round", **PER_PROMPT),
    Metric(
        "acceptance_length",
        "acceptance_length",
        "mean acceptance length with the bonus token, 1 + accepted_mean (vLLM's mean acceptance length, "
        "SGLang's accept length): block_efficiency before eos or max-new-tokens cut a round",
        **PER_PROMPT,
    ),
    *REQUEST_METRICS,  # beside it: the same length, the prompts' own averaged
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
    Metric("time_other_s", "time/other_s", "the rest of the wall time (the loop's bookkeeping)"),
    *(
        Metric(f"share_{phase}", f"time/share_{phase}", f"time_{phase}_s over the wall time (the four add up to 1)")
        for phase in ("draft", "target", "verify", "other")
    ),
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
    Metric("prompts", "count/prompts", "prompts decoded: what the acceptance figures' standard errors are over"),
    Metric("units", "count/units", "units timed (the prompts one batch decodes): what the speed figures are over"),
)
RUNTIME_METRICS: tuple[Metric, ...] = (
    Metric("time_ray_s", "time/ray_s", "Ray: the driver's time in Ray calls beyond the actors' own compute"),
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
        "ar_lean",
        "runtime/ar_lean",
        "1 where the target's layers ran as speculab's lean functions (`models.runs_lean`), 0 where on "
        "transformers' own code: its autoregressive loop may then trail generate, so the headline speedup is "
        "over the faster of the two baselines (docs/measuring.md)",
    ),
    Metric(
        "units_finished",
        "runtime/units_finished",
        "a point that failed (a lost node, restarts used up): units whose speculative decode finished and is "
        "logged with the point; absent when the point finished",
    ),
    Metric("mem_peak_mb_<what>", "memory/peak_mb_<what>", "CUDA only: peak memory per role and call kind"),
)
AHEAD_METRICS: tuple[Metric, ...] = (  # drafter.ahead=ssd, and a draft actor driven over a socket
    Metric("ahead_hit_rate", "ahead/hit_rate", "drafter.ahead=ssd: share of rounds drafted ahead that hit"),
    Metric("ahead_tokens_hit", "ahead/tokens_hit", "drafted ahead: kept tokens per sequence-round of the hits"),
    Metric("ahead_tokens_miss", "ahead/tokens_miss", "drafted ahead: kept tokens per sequence-round of the misses"),
    Metric("ahead_drafts_per_round", "ahead/drafts_per_round", "drafted ahead: drafts made ahead a round (work)"),
    Metric("time_draft_busy_s", "time/draft_busy_s", "a draft actor driven over a socket: its model seconds"),
    Metric("share_draft_idle", "time/share_draft_idle", "that draft actor: share of the rounds it waited"),
)
# A sweep's tables show these beside the headline where a point drafted ahead: why its speed is what it is
AHEAD_TABLED = ("ahead_hit_rate", "ahead_tokens_hit", "ahead_tokens_miss", "ahead_drafts_per_round", "share_draft_idle")
LENGTHS_VARY = "algorithm.L=auto or a confidence stop"
AUTO_B, POLICY = "algorithm.budget=auto", "algorithm.L=auto or algorithm.budget=auto"
# algorithm.L=auto (`core.adaptive`), algorithm.budget=auto (`core.adaptive_budget`), algorithm.confidence_stop
ADAPTIVE_METRICS: tuple[Metric, ...] = tuple(
    Metric(f"adaptive_{key}", f"adaptive/{key}", f"{where}: {meaning}") for key, where, meaning in (
        ("length_<n>", LENGTHS_VARY, "share of rounds that drafted n tokens"),
        ("length_mean", LENGTHS_VARY, "mean draft length a round"),
        ("budget_<b>", AUTO_B, "share of rounds whose tree had a budget of b nodes"),
        ("budget_mean", AUTO_B, "mean tree budget a round"),
        ("predicted_tokens", POLICY, "tokens a sequence-round (1 + accepted) the policy expected"),
        ("policy_ms", POLICY, "ms a round"), ("realised_tokens", POLICY, "the tokens those rounds realised"),
        ("calibration", POLICY, "realised over predicted"),
    )
)  # fmt: skip
COMPARE = "compare/"  # algorithm.compare: a compared verifier's figures, `compare/<verifier>/<figure>`
PAIRED_METRICS: tuple[Metric, ...] = (
    Metric("time_paired_s", "time/paired_s", "algorithm.compare: the paired verifications, outside the wall time"),
    Metric(
        "compare/<verifier>/acceptance_length",
        "compare/<verifier>/acceptance_length",
        "algorithm.compare: the verifier's acceptance length (1 + its accepted_mean, before eos or max-new-tokens "
        "cut a round) on the run's own drafts, averaged over compare_repeats verifications of each",
        **PER_PROMPT,
    ),
    Metric(
        "compare/<verifier>/accepted_mean",
        "compare/<verifier>/accepted_mean",
        "algorithm.compare: the verifier's mean accepted draft tokens a round on the run's own drafts",
        **PER_PROMPT,
    ),
    Metric(
        "compare/<verifier>/relative",
        "compare/<verifier>/relative",
        "algorithm.compare: its acceptance_length over the configured verifier's on the same drafts, paired prompt "
        "by prompt (docs/algorithms.md, Paired comparison)",
        **PER_PROMPT,
    ),
)
COMPARED = tuple(m.key.rsplit("/", 1)[1] for m in PAIRED_METRICS if m.key.startswith(COMPARE))  # per verifier
LIVE_METRICS: tuple[Metric, ...] = tuple(
    Metric(f"prompt/{key}", f"prompt/{key}", f"each finished prompt's {key}, step = prompts done")
    for key in ("generated_tokens", "block_efficiency", "accepted_mean")
)
EVERY = (
    *METRICS,
    *ACCEPTANCE_METRICS,
    *CATEGORY_METRICS,
    *RUNTIME_METRICS,
    *AHEAD_METRICS,
    *ADAPTIVE_METRICS,
    *PAIRED_METRICS,
    *LIVE_METRICS,
)

# The headline figures, in the order every table, description and view shows them (the ranking figure first),
# each with a few words for the console's last screen, where a newcomer meets its name first.
BRIEF = {
    "speedup_vs_ar": "tokens/s over the AR loop's",
    "typical_speedup_vs_ar": "the median prompt's speedup_vs_ar",
    "speedup_vs_hf": "the same, over generate's",
    "tokens_per_s": "kept tokens over wall seconds",
    "block_efficiency": "tokens kept per target call",
    "accepted_mean": "draft tokens accepted a round",
}
HEADLINE = tuple(BRIEF)
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
# What a baseline logs (`baseline_ar/<key>`, `baseline_hf/<key>`): the rest are constants for it (block
# efficiency 1, no draft, no tree); fewer charts stand before the headline ones on a run's page.
BASELINE_AR = ("tokens_per_s", "ms_per_token", "time_target_s", "kv_peak_mb_target", "target_calls", "generated_tokens")
BASELINE_HF = ("tokens_per_s", "ms_per_token", "generated_tokens", "speedup_vs_ar")
AR_PREFIX, HF_PREFIX = "baseline_ar/", "baseline_hf/"
_HOLE = re.compile(r"<(j|n|b|verifier|category|what)>")
_FILL = {
    "j": r"\d+",
    "n": r"\d+",
    "b": r"\d+",
    "verifier": r"[A-Za-z0-9_]+",
    "category": r"[A-Za-z0-9_.-]+",
    "what": r"[A-Za-z0-9_]+",
}


def _regex(pattern: str) -> re.Pattern[str]:
    """A table name with its placeholder as a capturing group (`alpha_<j>` matches `alpha_3`)."""
    parts = _HOLE.split(pattern)  # text, hole, text, ...
    return re.compile("".join(re.escape(p) if i % 2 == 0 else f"({_FILL[p]})" for i, p in enumerate(parts)))


def _fill(pattern: str, value: str) -> str:
    return _HOLE.sub(value, pattern)


@cache
def lookup(key: str) -> tuple[Metric, str]:
    """The table's row of a key and what fills its placeholder (`alpha_3` -> (alpha_<j>, "3")); KeyError
    for a key no row names."""
    for metric in EVERY:
        if found := _regex(metric.key).fullmatch(key):
            return metric, found.group(1) if found.groups() else ""
    raise KeyError(f"{key!r} is not a figure of speculab.results.names")


@cache
def key_of(name: str) -> str | None:
    """The key of an MLflow name (None: not a figure of the table, or an interval's end)."""
    for metric in EVERY:
        if found := _regex(metric.mlflow).fullmatch(name):
            return _fill(metric.key, found.group(1)) if found.groups() else metric.key
    return None


def mlflow_name(key: str) -> str:
    metric, hole = lookup(key)
    return _fill(metric.mlflow, hole)


def compare_key(verifier: str, figure: str) -> str:
    """The key of a compared verifier's figure (COMPARED): `compare/gbv/block_efficiency`."""
    return f"{COMPARE}{verifier}/{figure}"


def compared_verifiers(keys: Iterable[str]) -> list[str]:
    """The verifiers that figures of these keys compare, in the order they first appear."""
    return list(dict.fromkeys(key.split("/")[1] for key in keys if key.startswith(COMPARE)))


def interval_names(key: str) -> tuple[str, str]:
    """The MLflow names of the ends of a figure's interval (the figure's row must have one)."""
    name = mlflow_name(key)
    return name + LOW, name + HIGH


def is_acceptance(key: str) -> bool:
    """A key of ACCEPTANCE_METRICS with its number filled in (`alpha_3`)."""
    try:
        return lookup(key)[0] in ACCEPTANCE_METRICS
    except KeyError:
        return False


def _place(key: str) -> tuple[int, int, str]:
    """Where a key stands in the table (KeyError for a key no row names): its row, then its number."""
    metric, hole = lookup(key)
    return EVERY.index(metric), int(hole) if hole.isdigit() else 0, hole


class Figures(Mapping[str, Estimate]):
    """A point's (or a baseline's) figures by key, in the table's order (a family by its number); every
    key is the table's, so a misspelt one fails where it is built, not where it is read."""

    def __init__(self, figures: Mapping[str, Estimate | float] | None = None) -> None:
        given = {key: v if isinstance(v, Estimate) else Estimate(float(v)) for key, v in (figures or {}).items()}
        self._figures = dict(sorted(given.items(), key=lambda item: _place(item[0])))

    def __getitem__(self, key: str) -> Estimate:
        return self._figures[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._figures)

    def __len__(self) -> int:
        return len(self._figures)

    def __or__(self, other: Mapping[str, Estimate | float]) -> Figures:
        return Figures({**self._figures, **other})

    def __repr__(self) -> str:
        return f"Figures({self._figures!r})"

    def value(self, key: str) -> float:
        """The figure's value, NaN where the point has none."""
        return self._figures[key].value if key in self._figures else math.nan

    def only(self, keys: tuple[str, ...]) -> Figures:
        return Figures({key: self._figures[key] for key in keys if key in self._figures})

    def series(self, stem: str, first: int = 1) -> list[Estimate]:
        """`<stem>_<first>`, `<stem>_<first + 1>`, ... as long as the point has them (`alpha`: depths 1..L)."""
        found: list[Estimate] = []
        while (key := f"{stem}_{first + len(found)}") in self._figures:
            found.append(self._figures[key])
        return found


FIGURES_ARTIFACT = "figures.json"  # every figure a point logged, its spreads included (`split_spreads`)
# The one spread also logged as MLflow metrics: the ranking figure's interval, which the runs-table view shows
# as columns beside it (`tracking.ui`); every other spread lives in FIGURES_ARTIFACT, so that the Model metrics
# tab charts figures, not a single-bar chart per interval end.
TABLE_SPREAD = "speedup_vs_ar"


def split_spreads(flat: Mapping[str, float]) -> dict[str, float]:
    """What of `flatten`'s output a run logs as MLflow metrics: every value, and TABLE_SPREAD's interval;
    the rest of the spreads go with the whole in FIGURES_ARTIFACT."""
    kept = set(interval_names(TABLE_SPREAD))
    return {name: value for name, value in flat.items() if not name.endswith((LOW, HIGH, SE)) or name in kept}


def _logged(value: float) -> float:
    return float(f"{value:.5g}")  # what MLflow's runs table shows


def flatten(figures: Mapping[str, Estimate], prefix: str = "") -> dict[str, float]:
    """Figures as MLflow metrics, at 5 significant digits: each under its MLflow name (a baseline's
    under `prefix` + its key), its interval's ends and its standard error beside it where it has them;
    a baseline's NaN figures (a speedup over itself) are left out."""
    metrics: dict[str, float] = {}
    for key, estimate in figures.items():
        if prefix and math.isnan(estimate.value):
            continue
        name = prefix + key if prefix else mlflow_name(key)
        metrics[name] = _logged(estimate.value)
        if estimate.has_interval:
            metrics |= {name + LOW: _logged(estimate.low), name + HIGH: _logged(estimate.high)}
        if estimate.has_se:
            metrics[name + SE] = _logged(estimate.se)
    return metrics


def parse(logged: Mapping[str, float], prefix: str = "") -> Figures:
    """What `flatten` wrote, read back from a run's metrics: the figures under their MLflow names
    (with ``prefix``, a baseline's under `prefix` + key), with their intervals and standard errors."""
    figures: dict[str, Estimate] = {}
    for name, value in logged.items():
        if prefix:
            key = name.removeprefix(prefix) if name.startswith(prefix) else None
            key = key if key is not None and not key.endswith((LOW, HIGH, SE)) and _known(key) else None
        else:
            key = key_of(name)
        if key is None or lookup(key)[0] in LIVE_METRICS:  # a live figure's last step is not the point's
            continue
        metric = lookup(key)[0]
        low, high = logged.get(name + LOW, math.nan), logged.get(name + HIGH, math.nan)
        se = logged.get(name + SE, math.nan)
        method = metric.spread if not math.isnan(low + high) else RATIO if not math.isnan(se) else ""
        figures[key] = Estimate(value, low, high, _units(logged, metric, prefix), method, se)
    return Figures(figures)


def _units(logged: Mapping[str, float], metric: Metric, prefix: str) -> int:
    """What a read-back estimate is over, from the counts the run logged beside it: the units timed for a
    speed figure, the prompts for an acceptance figure (0: not known)."""
    count = metric.over
    name = (prefix + count if prefix else mlflow_name(count)) if count else ""
    return int(logged.get(name, 0))


def _known(key: str) -> bool:
    try:
        lookup(key)
    except KeyError:
        return False
    return True
