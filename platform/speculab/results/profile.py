"""A point's acceptance as a `speculation_profile.json` (NVIDIA Model-Optimizer's specdec_bench, schema 1.0),
built from the same figures its run logs, and a profile another tool wrote, read back and checked.

The schema's vectors are indexed by draft position j = 1..L: `marginal_accept_rates[j-1]` = P(tau >= j),
speculab's `position_<j>`; `conditional_accept_rates[j-1]` = P(tau >= j | tau >= j-1), its `alpha_<j>`;
`mean_accept_length` = 1 + the sum of the marginals, its per-step `acceptance_length`. Its histogram is keyed
by acceptance length, tau + 1 (the bonus token counted). For K > 1 paths or a tree, tau is the depth of the
accepted path, so the vectors describe that path, not one chain's positions: the file says so in `notes`.
docs/measuring.md, "Speculation profiles", has every field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from speculab.registry import ALGORITHMS, DRAFTERS
from speculab.results.figures import categories_of
from speculab.results.names import Figures
from speculab.results.point import PointResult, PointShape

SCHEMA_VERSION = "1.0"
PROFILE_ARTIFACT = "speculation_profile.json"
TOLERANCE = 0.02  # the schema's own check: 1 + sum of the marginals within this of the mean acceptance length
LONGEST_PREFIX = "longest_prefix"  # specdec_bench's name for token-by-token (prefix-wise) verification
CHAIN_ANALYTIC, MEASURED_PER_K = "chain_analytic", "measured_per_k"


def checkpoint_id(path: str) -> str:
    """A checkpoint directory as the field names it, its last two parts (`z-lab/Qwen3-8B-DFlash-b16`): a
    published profile carries no local layout."""
    parts = [p for p in path.replace("\\", "/").split("/") if p]
    return "/".join(parts[-2:])


@dataclass(frozen=True)
class Conditions:
    """What speculab knows of a point's measurement (the profile's `measurement_conditions`)."""

    pair: str  # `model.name`
    target: str  # its checkpoints' ids (`checkpoint_id`)
    draft: str
    verifier: str  # the algorithm, with its node rule where it has several
    drafter: str
    K: int | None  # i.i.d. paths (None: a tree)
    L: int
    budget: int | None  # a best-first tree's nodes
    temperature: float
    confidence_stop: float  # `algorithm.confidence_stop` (0: off): a round's path may end short of L
    top_k: int
    dataset: str
    prompts: int  # decoded
    sample_seed: int | None  # the sample's seed (None: the first prompts)
    max_new_tokens: int
    batch_size: int
    repeats: int  # `measure.repeats`
    runtime: str
    machine: str  # the processes and threads each role ran in, and the host's platform


def conditions_of(
    shape: PointShape, target_dir: str, draft_dir: str, prompts: int, repeats: int, runtime: str, machine: str
) -> Conditions:
    rule = f"/{shape.node_rule}" if shape.node_rule else ""
    return Conditions(
        shape.model, checkpoint_id(target_dir), checkpoint_id(draft_dir), f"{shape.algorithm}{rule}", shape.drafter,
        shape.K, shape.L, shape.budget, shape.temperature, shape.stop, shape.top_k, shape.dataset, prompts,
        shape.sample_seed, shape.max_new_tokens, shape.batch_size, repeats, runtime, machine,
    )  # fmt: skip


@dataclass(frozen=True)
class Checks:
    """The schema's own checks: 1 + the sum of the marginals against the mean acceptance length, and the
    marginals never rising (a survival function cannot)."""

    implied_mean_accept_length: float
    reported_mean_accept_length: float
    abs_delta: float
    tolerance: float
    mean_consistent: bool
    rising_at: list[int]  # draft positions j whose marginal exceeds position j - 1's

    @classmethod
    def of(cls, marginals: list[float], mean: float) -> Checks:
        implied = 1.0 + sum(marginals)
        rising = [j + 1 for j in range(1, len(marginals)) if marginals[j] > marginals[j - 1] + 1e-9]
        return cls(implied, mean, abs(implied - mean), TOLERANCE, abs(implied - mean) <= TOLERANCE, rising)

    @property
    def passed(self) -> bool:
        return self.mean_consistent and not self.rising_at

    def as_schema(self) -> dict[str, Any]:
        """The checks as specdec_bench's `validation` block writes them."""
        consistency = {
            "implied_mean_accept_length": round(self.implied_mean_accept_length, 6),
            "reported_mean_accept_length": round(self.reported_mean_accept_length, 6),
            "abs_delta": round(self.abs_delta, 6),
            "tolerance": self.tolerance,
            "passed": self.mean_consistent,
        }
        violations = [{"position": j - 1} for j in self.rising_at]
        return {
            "mean_consistency": consistency,
            "marginal_monotonicity": {"passed": not violations, "violations": violations},
        }


@dataclass(frozen=True)
class SpeculationProfile:
    """specdec_bench's schema 1.0, field by field (docs/measuring.md), and speculab's `notes` on them."""

    method: str | None
    target_model: dict[str, Any] | None
    draft_checkpoint: dict[str, Any] | None
    num_speculative_tokens: int
    block_size: int | None
    max_supported_k: int
    verification_method: str
    conditional_accept_rates: list[float]
    marginal_accept_rates: list[float]
    mean_accept_length: float
    mean_accept_length_per_request: float | None
    accept_length_model: str
    accept_length_by_k: dict[str, float]
    acceptance_length_histogram: dict[str, int]
    per_category: dict[str, dict[str, float]] | None
    measurement_conditions: dict[str, Any] | None
    notes: dict[str, str] = field(default_factory=dict)
    schema_version: str = SCHEMA_VERSION
    measured: bool = True

    @property
    def checks(self) -> Checks:
        return Checks.of(self.marginal_accept_rates, self.mean_accept_length)

    def to_json(self) -> str:
        return json.dumps(asdict(self) | {"validation": self.checks.as_schema()}, indent=1)


def rates(figures: Figures, stem: str, L: int) -> list[float]:
    """`<stem>_1..L` as the schema's dense vector: a depth no round reached (NaN) is 0.0, as it counts them."""
    return [0.0 if math.isnan(v := figures.value(f"{stem}_{j}")) else round(v, 6) for j in range(1, L + 1)]


def notes_for(shape: PointShape) -> dict[str, str]:
    """What a field holds where the schema's reading (one chain, verified token by token) is not the point's."""
    spec, notes = ALGORITHMS[shape.algorithm], {}
    if spec.tree_builder or (shape.K or 1) > 1:
        drafted = "a tree" if spec.tree_builder else f"K={shape.K} i.i.d. paths"
        notes["marginal_accept_rates"] = (
            f"drafted {drafted}: entry j-1 is P(tau >= j) with tau the depth of the accepted path (whichever path or "
            "branch won), not the j-th position of one chain"
        )
        notes["conditional_accept_rates"] = "P(tau >= j | tau >= j-1) of that accepted path's depth"
        notes["num_speculative_tokens"] = "L, the draft depth; a round drafts more tokens than L (tree_nodes_mean)"
    if not spec.longest_prefix:
        notes["verification_method"] = (
            f"speculab's verifier `{shape.algorithm}`: its tau is not a longest-correct prefix, so the vectors hold "
            "for this L only (accept_length_model measured_per_k)"
        )
    notes["block_size"] = "null: speculab records a drafter's block in the run's params (model.draft_dir)"
    return notes


def length_model(shape: PointShape) -> str:
    """`chain_analytic` where a shorter L would accept tau cut there (token verification of one autoregressive
    path), so that the marginals give accept_length at every k <= L; else `measured_per_k`."""
    spec, drafter = ALGORITHMS[shape.algorithm], DRAFTERS[shape.drafter]
    chain = spec.longest_prefix and (shape.K or 1) == 1 and not spec.tree_builder and not drafter.block_file
    return CHAIN_ANALYTIC if chain else MEASURED_PER_K


def per_category(figures: Figures) -> dict[str, dict[str, float]] | None:
    """The schema's `per_category`, from the run's `category/<category>/...` figures (None: no categories)."""
    found = {
        category: {
            "mean_accept_length": round(figures.value(f"category/{category}/acceptance_length"), 6),
            "mean_accept_length_per_request": round(
                figures.value(f"category/{category}/acceptance_length_per_request"), 6
            ),
            "num_requests": int(figures.value(f"category/{category}/prompts")),
        }
        for category in categories_of(figures)
    }
    return found or None


def profile_of(result: PointResult, histogram: Mapping[int, int], conditions: Conditions) -> SpeculationProfile:
    """A drafted point's profile from its figures (what its run logs) and its rounds' tau histogram."""
    shape, figures, L = result.shape, result.figures, result.shape.L
    marginals = rates(figures, "position", L)
    mean = figures.value("acceptance_length")
    model = length_model(shape)
    by_k = {str(k): round(1.0 + sum(marginals[:k]), 6) for k in range(1, L + 1)} if model == CHAIN_ANALYTIC else {}
    per_request = figures.value("acceptance_length_per_request")
    return SpeculationProfile(
        method=DRAFTERS[shape.drafter].field_method,
        target_model={"id": conditions.target, "pair": shape.model},
        draft_checkpoint={"id": conditions.draft, "drafter": shape.drafter},
        num_speculative_tokens=L,
        block_size=None,
        max_supported_k=L,
        verification_method=LONGEST_PREFIX if ALGORITHMS[shape.algorithm].longest_prefix else shape.algorithm,
        conditional_accept_rates=rates(figures, "alpha", L),
        marginal_accept_rates=marginals,
        mean_accept_length=round(mean, 6),
        mean_accept_length_per_request=None if math.isnan(per_request) else round(per_request, 6),
        accept_length_model=model,
        accept_length_by_k=by_k | {str(L): round(mean, 6)},
        acceptance_length_histogram={str(tau + 1): count for tau, count in sorted(histogram.items())},
        per_category=per_category(figures),
        measurement_conditions=asdict(conditions),
        notes=notes_for(shape),
    )
