"""What a decode records: one `RoundRecord` per batch round, one `PromptRecord` per prompt, and the
`RunResult` that holds them with the run's times. Plain values, built by `speculab.core.engine`, turned
into a point's figures by `speculab.results.figures` and written to its run by `speculab.tracking`
(`point_log`, `run_page`); no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace


@dataclass
class RoundRecord:
    """One round of one batch; per-row lists follow the batch rows of that round. The phase times
    are filled in when the run is over (`PhaseClock.settle`)."""

    rows: int
    tree_nodes: list[int]
    accepted: list[int]  # tau per row
    kept: list[int]  # tokens kept per row after eos / max-new-tokens truncation
    time_tree_build_s: float  # part of time_draft_s: building a deterministic tree (DDTree)
    kv_target_bytes: int  # peak since this batch's prefill
    kv_draft_bytes: int
    time_draft_s: float = 0.0
    time_target_s: float = 0.0
    time_verify_s: float = 0.0
    time_other_s: float = 0.0
    time_paired_s: float = 0.0  # the paired check, outside the four phases and the run's wall time
    cpu_paired_s: float = 0.0  # its CPU seconds (this process's), kept out of the run's CPU time likewise
    feature_bytes: int = 0  # target features the drafter absorbed for this round's draft (DFlash)
    time_feature_s: float = 0.0  # part of time_draft_s: absorbing them
    # The first drafted position, per row (`depth_evidence`; empty when nothing is drafted): to
    # tell a drafter that predicts badly from a verification that accepts badly.
    first_overlap: list[float] = field(default_factory=list)
    first_entropy_target: list[float] = field(default_factory=list)
    first_entropy_draft: list[float] = field(default_factory=list)
    # Drafted ahead (`drafting.ahead`): whether the round took its cached draft, None where no round before
    # drafted it ahead; and the drafts made ahead for it (guesses times rows): the work the cache cost
    ahead_hit: bool | None = None
    ahead_drafts: int = 0
    # A draft in an actor of its own driven over a socket (`runtime.draft_channel`): its model seconds
    # for this round (its process's clock); the rest of the round it waited for the loop
    draft_busy_s: float = 0.0
    # The draft length this round (the settings' L, or an adaptive policy's choice: `core.adaptive`), the
    # tokens a row the policy expected of it (NaN without a policy) and the policy's seconds choosing it
    length: int = 0
    predicted_tokens: float = math.nan
    time_policy_s: float = 0.0
    # under a policy: the tokens the draft's deferred prefill read in this round (`core.engine`; 0: none ran)
    catch_up_tokens: int = 0
    # algorithm.budget=auto: the node budget the policy chose for this round's tree (`core.adaptive_budget`; 0:
    # the config's budget, or a path round)
    budget: int = 0


@dataclass
class PromptRecord:
    index: int
    prompt_tokens: int
    tokens: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)  # tau per round
    drafted: list[int] = field(default_factory=list)  # L per round: the draft tokens tau is out of
    stop: str = ""  # "eos" or "max_new_tokens"
    # Per round, sum_x min(p_j, q_j) at each depth j the verification reached (1..min(tau + 1, L)) along
    # the accepted path (`depth_evidence`); empty lists when nothing is drafted.
    overlap: list[list[float]] = field(default_factory=list)
    left_chain: list[bool] = field(default_factory=list)  # per round, deterministic trees only: off the chain


@dataclass
class RunResult:
    prompts: list[PromptRecord]
    rounds: list[RoundRecord]
    wall_s: float  # decoding only: the paired check's time is not in it
    prefill_target_s: float
    prefill_draft_s: float
    paired_s: float = 0.0  # spent in the paired check (extra verifications on the same drafts)
    paired_cpu_s: float = 0.0  # its CPU seconds
    length: int = 0  # L: draft tokens per round (0: nothing drafted, the autoregressive baseline)


@dataclass(frozen=True)
class PhaseSeconds:
    """A decode's seconds by phase: prefill (both models), then its rounds' draft, target, verify and the rest
    (what `core.clock.PhaseClock` timed; at batch > 1 shared by the unit's prompts)."""

    prefill_s: float
    draft_s: float
    target_s: float
    verify_s: float
    other_s: float

    @classmethod
    def of(cls, run: RunResult) -> PhaseSeconds:
        rounds = run.rounds
        return cls(
            run.prefill_target_s + run.prefill_draft_s,
            sum(r.time_draft_s for r in rounds),
            sum(r.time_target_s for r in rounds),
            sum(r.time_verify_s for r in rounds),
            sum(r.time_other_s for r in rounds),
        )


def concat_runs(runs: list[RunResult]) -> RunResult:
    """One run of consecutive parts (the units of a point, each decoded by its own `decode` call):
    prompts renumbered in order, rounds concatenated, times summed."""
    prompts = [replace(p, index=i) for i, p in enumerate(p for run in runs for p in run.prompts)]
    return RunResult(
        prompts,
        [r for run in runs for r in run.rounds],
        sum(run.wall_s for run in runs),
        sum(run.prefill_target_s for run in runs),
        sum(run.prefill_draft_s for run in runs),
        sum(run.paired_s for run in runs),
        sum(run.paired_cpu_s for run in runs),
        max((run.length for run in runs), default=0),
    )
