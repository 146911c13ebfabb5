"""The point's decode loop: each timed method on one unit of prompts, beside the models it drives.

`PointLoop` runs the point's methods (its speculative decode and the baselines) one unit at a time
and times each where it runs. It lives in one of two places, and is the same code in both:

- in this process: `runtime=inline` (its models are the plain roles), or `runtime.loop=driver` on
  Ray (its models are group proxies, so every model step of a round is a Ray call);
- in rank 0 of the target's Ray group (`runtime.loop=target`, `speculab.runtime.loop_host`): the
  target's shard and the draft in that actor's process, the other ranks following rank 0's target
  calls, so a round makes no Ray call and the driver makes one per rank and unit. A round then costs
  what it costs inline; measured per round in `benchmarks/runtime.py` and end to end in
  `benchmarks/RESULTS.md`.

This module does not know the runtime that hosts it.

Everything a unit's methods need travels as a `PointWork` of plain values, and each call on a unit
is self-contained (seeded by the unit, its paired comparison included), so a loop actor that is
lost and recreated decodes the interrupted unit again from its prompts with the same result.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import torch

from speculab.core.adaptive import AdaptiveLength, Policy
from speculab.core.adaptive_budget import AdaptiveBudget
from speculab.core.autoregressive import autoregressive
from speculab.core.engine import DecodeSettings, Drafter, decode
from speculab.core.measure import Sample, timed
from speculab.core.paired import PairedComparison, PromptSums
from speculab.core.records import PhaseSeconds, RunResult
from speculab.device.syncs import counting_host_syncs
from speculab.drafting.ahead import Ahead, AheadDrafter
from speculab.drafting.ddtree import MarginalPathDrafter, TreeDrafter, tree_builder
from speculab.models.generate import BaselineResult, GenerateForm
from speculab.models.roles import Conditions, process_conditions
from speculab.registry import DRAFTERS, get_algorithm, get_verifier
from speculab.verify.captured import replayed

Unit = tuple[int, list[list[int]]]  # (index of its first prompt, the prompts one batch decodes together)
METHODS = ("speculative", "autoregressive", "generate")  # the point's own decode, then its baselines
TARGET_ROLE = "target and generate"  # `PointLoop.conditions`' key of the target's process (generate runs there)


@dataclass(frozen=True)
class PointWork:
    """What a point decodes and how, in plain values (it travels to the loop's actor)."""

    algorithm: str  # the verifier's name (`speculab.registry`)
    node_rule: str
    drafter: str  # `drafter.name`
    tree: str  # tree algorithms: the tree builder (`best_first`, `chain`) ...
    budget: int  # ... and its node budget (with `budgets`, the largest)
    compare: tuple[str, ...]  # paired comparison: the verifiers compared with the configured one (empty: none)
    compare_repeats: int
    units: tuple[Unit, ...]
    settings: DecodeSettings
    # how `baseline_hf` runs transformers' generate (default: eager)
    generate: GenerateForm = field(default_factory=GenerateForm)
    # how a path verifier's decision runs (`models.static_pass.PASSES`; "graphs": `verify.captured.CapturedPaths`)
    verifier_passes: str = "eager"
    ahead: Ahead | None = None  # drafting ahead (`drafter.ahead=ssd`); None: off
    budgets: tuple[int, ...] = ()  # algorithm.budget=auto: the ladder a round's budget is chosen from; (): fixed


@dataclass(frozen=True)
class UnitResult:
    """One method on one unit: its timing, and on repetition 0 what it decoded."""

    sample: Sample
    result: RunResult | BaselineResult | None  # None on repetitions other than 0
    paired: PromptSums | None  # speculative, repetition 0, with a comparison: its sums per prompt
    host_syncs_per_round: float | None = None  # the speculative warm-up on CUDA: synchronisations per round


def unit_settings(settings: DecodeSettings, first: int) -> DecodeSettings:
    """A unit is seeded by its first prompt's index, as among all the prompts, so every repetition
    decodes the same tokens wherever the loop runs."""
    return replace(settings, seed=settings.seed + first)


def point_policy(work: PointWork) -> Policy | None:
    """The loop's adaptive policy, one for its life so that the costs it measured carry over units: the
    draft length's (`algorithm.L=auto`), a tree budget's (`algorithm.budget=auto`), or None."""
    if work.settings.adaptive:
        return AdaptiveLength(work.settings.length, longest_first=get_algorithm(work.algorithm).carry)
    if work.budgets:
        return AdaptiveBudget(work.settings.length, work.budgets)
    return None


# draft_model: a DraftModel or its Ray proxy
def point_drafter(draft_model: Any, work: PointWork, policy: Policy | None = None) -> Drafter:
    """The drafter the engine drives: the draft model itself, or its marginals turned into one tree per
    prompt (tree algorithms: of the budget `policy` chose for the round, under algorithm.budget=auto) or one
    drawn path (a marginals drafter under a path verifier), or the draft model drafting every round ahead
    (`drafter.ahead=ssd`)."""
    if get_algorithm(work.algorithm).tree_builder:
        budget = (lambda: policy.current) if isinstance(policy, AdaptiveBudget) else work.budget
        return TreeDrafter(draft_model, tree_builder(work.tree, budget))
    if work.ahead is not None:
        return AheadDrafter(draft_model, work.ahead, work.settings.length)
    if DRAFTERS[work.drafter].proposes == "marginals":
        return MarginalPathDrafter(draft_model, torch.Generator())
    return draft_model


AutoregressiveRun = Callable[[list[list[int]], DecodeSettings], RunResult]


class PointLoop:
    """The point's methods on its units, driving `target` and `draft_model` (roles or Ray proxies).
    `cpu` is the CPU clock a decode is charged on: this process's, plus, where the models are Ray
    proxies, the seconds their ranks report (`speculab.runtime.cpu_seconds`). `whole_autoregressive`:
    how the host runs the autoregressive baseline in one call where it can (a tensor-parallel target's
    ranks from one announcement, `runtime.tp_loop`); by default the engine's loop on `target`."""

    def __init__(
        self,
        target: Any,
        draft_model: Any,
        work: PointWork,
        cpu: Callable[[], float] = time.process_time,
        whole_autoregressive: AutoregressiveRun | None = None,
    ) -> None:
        self.target, self.draft_model, self.work, self.cpu = target, draft_model, work, cpu
        self.autoregressive: AutoregressiveRun = whole_autoregressive or partial(autoregressive, target)
        self.policy = point_policy(work)
        self.drafter = point_drafter(draft_model, work, self.policy)
        self.verifier = get_verifier(work.algorithm, work.node_rule, replayed(work.verifier_passes))

    def conditions(self) -> dict[str, Conditions]:
        """Where each figure is measured: the target's process (transformers' generate runs there too),
        the draft's, and the loop's own."""
        return {
            TARGET_ROLE: self.target.conditions(),
            "draft": self.draft_model.conditions(),
            "loop": process_conditions(),
        }

    def paired(self, first: int, prompts: int) -> PairedComparison | None:
        """The unit's paired comparison (configured verifier first), seeded by the unit like its decode."""
        p = self.work
        if not p.compare:
            return None
        verifiers = {p.algorithm: get_verifier(p.algorithm, p.node_rule)}
        verifiers |= {name: get_verifier(name) for name in p.compare if name != p.algorithm}
        return PairedComparison(verifiers, p.compare_repeats, p.settings.seed + 1 + first, prompts)

    def decode_unit(self, method: str, unit: int, repeat: int) -> UnitResult:
        """`method` (one of METHODS) on unit `unit`; repetition 0 keeps what it decoded, -1 is a warm-up."""
        first, prompts = self.work.units[unit]
        settings = unit_settings(self.work.settings, first)
        paired = self.paired(first, len(prompts)) if method == "speculative" and repeat == 0 else None
        runs: dict[str, Callable[[], RunResult | BaselineResult]] = {
            "speculative": lambda: decode(
                self.target, self.drafter, self.verifier, prompts, settings, None, paired, self.policy
            ),
            "autoregressive": lambda: self.autoregressive(prompts, settings),
            # transformers', in the target's process
            "generate": lambda: self.target.hf_generate(prompts, settings, self.work.generate),
        }
        if method not in runs:
            raise ValueError(f"method={method!r}: must be one of {', '.join(METHODS)}")
        # The warm-up is untimed: count its host synchronisations there (`device.syncs`), not in a measured run.
        with counting_host_syncs(enabled=repeat == -1 and method == "speculative") as syncs:
            result, wall, cpu = timed(self.cpu, runs[method])
        per_round = syncs[0] / len(result.rounds) if syncs and isinstance(result, RunResult) and result.rounds else None
        if isinstance(result, RunResult):
            tokens = sum(len(p.tokens) for p in result.prompts)
            sample = Sample(tokens, wall - result.paired_s, cpu - result.paired_cpu_s, PhaseSeconds.of(result))
        else:
            sample = Sample(sum(map(len, result.tokens)), wall, cpu)
        return UnitResult(sample, result if repeat == 0 else None, paired.sums() if paired else None, per_round)
