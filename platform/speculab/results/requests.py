"""Acceptance request by request: each prompt's own acceptance length, the run's mean of them beside the
per-step figure (`results.figures` logs both, and the figures of each prompt category), and the per-request
records a run writes (`requests.jsonl`, one line per prompt and repetition, AIPerf's `profile_export.jsonl` in
form: docs/measuring.md, "Per-request records").

The two means differ wherever prompts differ: `acceptance_length` pools every round (a prompt weighs by its
rounds), `acceptance_length_per_request` averages the prompts' own (each prompt weighs alike), as vLLM's
per-request metrics and specdec_bench's `mean_accept_length_per_request` do. All from the decode's records
(`core.records`) and its timings (`core.measure`): no model pass, no clock.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields

from speculab.core.measure import Sample
from speculab.core.records import PhaseSeconds, PromptRecord, RunResult
from speculab.results.names_acceptance import PER_REQUEST_FLOOR
from speculab.stats import RATIO, Estimate, Totals, log_ratio


@dataclass(frozen=True)
class RequestAcceptance:
    """One prompt's acceptance, from its records."""

    rounds: int  # sequence-rounds it took part in
    accepted: int  # draft tokens accepted over them (tau summed, before eos / max-new-tokens cut a round)
    kept: int  # tokens it kept

    @classmethod
    def of(cls, record: PromptRecord) -> RequestAcceptance:
        return cls(len(record.accepted), sum(record.accepted), len(record.tokens))

    @property
    def acceptance_length(self) -> float:
        """1 + accepted draft tokens per round: the tokens a round emits before truncation (vLLM's)."""
        return 1.0 + self.accepted / self.rounds


def requests_of(run: RunResult) -> list[RequestAcceptance]:
    """Every prompt that took part in a round (a prompt done at prefill has none), in the run's order."""
    return [RequestAcceptance.of(p) for p in run.prompts if p.accepted]


def mean_over_requests(requests: Sequence[RequestAcceptance]) -> Estimate:
    """The mean of the prompts' own acceptance lengths (the lengths' total over the prompts' count), with the
    bootstrap-t interval over prompts of `stats` from PER_REQUEST_FLOOR prompts on, its standard error below:
    simulated (`tests/test_coverage.py`), it covers 95% from 16 prompts on prompts as mixed as code and prose,
    and only 91% at 12, where a few prompts far from the rest pull a mean of per-prompt figures further than
    they pull a ratio of pooled sums."""
    lengths = [r.acceptance_length for r in requests]
    found = log_ratio(Totals.of((1, lengths), (-1, [1.0] * len(lengths))))
    if len(lengths) < PER_REQUEST_FLOOR and found.n >= 2:
        return Estimate(found.value, n=found.n, method=RATIO, se=found.value * found.se)
    return found.estimate(se_below=True)


REQUESTS_ARTIFACT = "requests.jsonl"  # one `RequestRecord` a line, every prompt and repetition


@dataclass(frozen=True)
class Metered:
    """A measured value with its unit, as AIPerf's records write one (`{"value": 3, "unit": "tokens"}`)."""

    value: float | int | None
    unit: str


@dataclass(frozen=True)
class RequestRecord:
    """One prompt in one repetition, AIPerf-style: who it is (`metadata`), what it measured (`metrics`), and
    `error` (always None: a prompt that failed fails its point). Every repetition decodes the same tokens, so
    its counts are repetition 0's (whose rounds the engine records) and only its seconds are its own."""

    metadata: dict[str, str | int | None]
    metrics: dict[str, Metered]
    error: None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))


def request_records(
    units: Sequence[RunResult],
    ids: Sequence[str],
    categories: Sequence[str | None],
    samples: Sequence[Sequence[Sample]],
) -> list[RequestRecord]:
    """Every prompt of every unit in every repetition: ``units`` [unit] the recorded decodes, ``ids`` and
    ``categories`` [prompt] in the same order, ``samples`` [unit][repetition] the unit's timed decodes
    (empty: a point that failed before timing, whose records give repetition 0's counts alone)."""
    out: list[RequestRecord] = []
    first = 0
    for u, unit in enumerate(units):
        timed = samples[u] if u < len(samples) else ()
        for repetition in range(max(len(timed), 1)):
            sample = timed[repetition] if timed else None
            phases = sample.phases if sample else PhaseSeconds.of(unit)
            for position, p in enumerate(unit.prompts):
                at = first + position
                meta = {"request_id": ids[at], "category": categories[at], "unit": u, "batch": len(unit.prompts)}
                metrics = request_metrics(p, sample, phases)
                out.append(RequestRecord(meta | {"repetition": repetition}, metrics))
        first += len(unit.prompts)
    return out


def request_metrics(record: PromptRecord, sample: Sample | None, phases: PhaseSeconds | None) -> dict[str, Metered]:
    """One prompt's counts (vLLM's per-request names where it has one), and its unit's wall and CPU seconds and
    seconds by phase in this repetition (None where not measured)."""
    own = RequestAcceptance.of(record)
    rounds = max(own.rounds, 1)
    drafted = sum(record.drafted)  # draft tokens by depth: each round's L (K paths or a tree hold more nodes)
    metrics = {
        "input_tokens": Metered(record.prompt_tokens, "tokens"),
        "output_tokens": Metered(own.kept, "tokens"),
        "num_spec_steps": Metered(own.rounds, "rounds"),
        "num_accepted_draft_tokens": Metered(own.accepted, "tokens"),
        "num_draft_tokens": Metered(drafted, "tokens"),
        "mean_acceptance_length": Metered(1.0 + own.accepted / rounds, "tokens/round"),
        "draft_acceptance_rate": Metered(own.accepted / drafted if drafted else None, "ratio"),
        "block_efficiency": Metered(own.kept / rounds, "tokens/round"),
        "unit_wall_s": Metered(sample.wall_s if sample else None, "s"),
        "unit_cpu_s": Metered(sample.cpu_s if sample else None, "s"),
    }
    seconds = asdict(phases) if phases else dict.fromkeys(PHASE_NAMES)
    return metrics | {f"unit_{name}": Metered(seconds[name], "s") for name in PHASE_NAMES}


PHASE_NAMES = tuple(f.name for f in fields(PhaseSeconds))


def requests_jsonl(records: Sequence[RequestRecord]) -> str:
    return "".join(r.to_json() + "\n" for r in records)
