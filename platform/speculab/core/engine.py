"""The decoding loop (docs/architecture.md): propose, score, verify, commit, record.

`decode` runs speculative decoding over prompts in batches, with any target and drafter
that follow the model protocols (in-process or Ray actor proxies) and any verifier that
follows the verifier contract; it returns the run's records (`speculab.core.records`), its phases
timed by a `speculab.core.clock.PhaseClock`. The autoregressive baseline is this loop with a
root-only drafter (`speculab.core.autoregressive`). With an adaptive policy (`speculab.core.adaptive`) each
round drafts the shape the policy chooses: under `algorithm.L=auto` a length, 0 being one autoregressive
step (`root_proposal`, `sample_target`) that leaves the drafter alone; under `algorithm.budget=auto` a tree's
budget, which the tree drafter reads from the policy. This module does no I/O and no logging.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Protocol

import torch

from speculab.core.adaptive import Choice, Observed, Policy, Unread, pending_positions
from speculab.core.clock import PhaseClock
from speculab.core.evidence import Drafts, along_path, depth_evidence
from speculab.core.records import PromptRecord, RoundRecord, RunResult
from speculab.drafting.sampling import SamplingParams, sample
from speculab.drafting.tree import DraftTree, Proposal
from speculab.verify.verdict import Verdict

# Target features (DFlash): what `TargetModel.prefill`/`commit` return and `Drafter.prefill`/`commit`
# take: hidden features [B, T, n * hidden] of the tokens just committed, None when the drafter needs
# none, or on Ray an ObjectRef to them that the engine passes on unread.
Features = Any


class TargetModel(Protocol):
    def prefill(self, contexts: list[list[int]], room: int = 0) -> Features: ...  # room: `DecodeSettings.room`
    def score(self, tree: DraftTree, temperature: float) -> torch.Tensor: ...  # p [B, N, V]
    def commit(self, accepted_nodes: torch.Tensor) -> Features: ...  # [B, M]
    def retain(self, rows: torch.Tensor) -> None: ...
    def kv_bytes(self) -> int: ...


class Drafter(Protocol):
    def prefill(
        self, contexts: list[list[int]], roots: list[int], seed: int, features: Features = None, room: int = 0
    ) -> None: ...
    def propose(self, num_paths: int, length: int, sampling: SamplingParams) -> Proposal: ...
    def commit(self, emitted: list[list[int]], features: Features = None) -> None: ...
    def retain(self, rows: torch.Tensor) -> None: ...
    def kv_bytes(self) -> int: ...


Verifier = Callable[..., Verdict]
# (paths [B, K, L], p [B, K, L+1, V], q [B, K, L, V]) of a round's i.i.d. drafts, after its verdict, and the
# prompt each row decodes (its index among the decode's prompts)
PairedCheck = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, list[int]], None]


@dataclass(frozen=True)
class DecodeSettings:
    num_paths: int  # K
    length: int  # L (adaptive: the longest a round drafts)
    sampling: SamplingParams
    max_new_tokens: int
    batch_size: int = 1
    seed: int = 0
    eos_token_id: int | None = None
    tree_nodes: int = 0  # the most nodes a round's draft tree has, root included (0: not known)
    adaptive: bool = False  # algorithm.L=auto: each round's length chosen by the loop's `AdaptiveLength`

    @property
    def room(self) -> int:
        """Cache slots a decode adds to a prompt: its new tokens and its largest draft forest, so that
        the models' caches are sized once per batch (0 when the tree is not known: they grow instead)."""
        return self.max_new_tokens + self.tree_nodes if self.tree_nodes else 0


def accepted_nodes(tree: DraftTree, verdict: Verdict) -> torch.Tensor:
    """[B, L+1] tree nodes of the root and the accepted tokens, -1 padded."""
    assert tree.path_nodes is not None  # every proposed tree records its paths
    rows = torch.arange(tree.batch_size, device=tree.tokens.device)
    nodes = tree.path_nodes[rows, verdict.path.to(rows.device)]  # [B, L+1]
    cols = torch.arange(nodes.shape[1], device=nodes.device)
    return torch.where(cols[None, :] < verdict.num_tokens.to(nodes.device)[:, None], nodes, -1)


def gather_paths(p_nodes: torch.Tensor, path_nodes: torch.Tensor) -> torch.Tensor:
    """Path-major target probs [B, K, L+1, V] from node-major p [B, N, V]."""
    B, K, M = path_nodes.shape
    flat = path_nodes.reshape(B, K * M).to(p_nodes.device)
    return p_nodes.gather(1, flat[..., None].expand(-1, -1, p_nodes.shape[-1])).reshape(B, K, M, -1)


def root_proposal(roots: list[int]) -> Proposal:
    """A round that drafts nothing (L = 0): each row's tree is its root, one path of no tokens."""
    paths = torch.empty(len(roots), 1, 0, dtype=torch.long)
    return Proposal(DraftTree.from_paths(torch.tensor(roots), paths), paths, torch.empty(len(roots), 1, 0, 0))


# paths [B, 1, 0]; p [B, 1, 1, V]; q [B, 1, 0, 0]
def sample_target(
    paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor, *, rng: torch.Generator, carry: Any = None
) -> Verdict:
    """Autoregressive decoding in verifier form: the next token drawn from p at the root."""
    token = sample(p[:, 0, 0], 1, rng)  # [B, 1]
    zeros = torch.zeros(len(token), dtype=torch.long, device=token.device)
    return Verdict(token, zeros + 1, zeros)


@dataclass(frozen=True)
class RoundRead:
    """What the host reads of a round, per row: the committed tokens, its tree's real nodes, the accepted
    nodes below the root, and the evidence at the depths it reached (empty when nothing was drafted)."""

    emitted: list[list[int]]
    tree_nodes: list[int]
    nodes: list[list[int]]
    evidence: list[list[float]]


# nodes [B, L+1] (`accepted_nodes`); evidence [B, E] (`depth_evidence`), or None when nothing was drafted
def read_round(verdict: Verdict, tree: DraftTree, nodes: torch.Tensor, evidence: torch.Tensor | None) -> RoundRead:
    """What the host needs of a round, in one host read (on a GPU each read waits for every queued
    kernel). Packed as float64, which holds every token id and node number exactly and every evidence
    value as it was."""
    device = verdict.tokens.device
    parts = [verdict.tokens, verdict.num_tokens[:, None], tree.num_nodes.to(device)[:, None], nodes.to(device)]
    if evidence is not None:
        parts.append(evidence.to(device))
    width, depth = verdict.tokens.shape[1], nodes.shape[1]
    rows = torch.cat([part.to(torch.float64) for part in parts], dim=1).tolist()
    emitted = [[int(token) for token in row[: int(row[width])]] for row in rows]
    accepted = [[int(node) for node in row[width + 3 : width + 2 + depth] if node >= 0] for row in rows]
    evidences = [row[width + 2 + depth :] for row in rows]
    return RoundRead(emitted, [int(row[width + 1]) for row in rows], accepted, evidences)


def _record(
    batch: list[PromptRecord], emitted: list[list[int]], evidence: list[list[float]], settings: DecodeSettings, L: int
) -> list[int]:
    """Each row's tokens, truncated, and its round (tau, the L it drafted, the evidence at the depths it
    reached) into its prompt's record; returns the tokens kept per row."""
    kept = []
    for record, tokens, row in zip(batch, emitted, evidence):
        tau = len(tokens) - 1
        tokens, record.stop = truncate(tokens, settings.max_new_tokens - len(record.tokens), settings.eos_token_id)
        record.tokens += tokens
        record.accepted.append(tau)
        record.drafted.append(L)
        record.overlap.append(row[: min(tau + 1, L)])
        if len(row) > L + 2:
            record.left_chain.append(row[L + 2] > 0)
        kept.append(len(tokens))
    return kept


def truncate(tokens: list[int], room: int, eos: int | None) -> tuple[list[int], str]:
    """Cut emitted tokens at the first eos (kept) or when the budget `room` runs out."""
    if eos is not None and eos in tokens[:room]:
        return tokens[: tokens.index(eos) + 1], "eos"
    return tokens[:room], "max_new_tokens" if len(tokens) >= room else ""


@dataclass(frozen=True)
class Loop:
    """What every round of a decode uses: the roles, the settings, the verification RNG, the phase clock,
    the records so far, the paired check and the adaptive policy (None: every round drafts `settings.length`)."""

    target: TargetModel
    drafter: Drafter
    verifier: Verifier
    settings: DecodeSettings
    rng: torch.Generator
    clock: PhaseClock
    rounds: list[RoundRecord]
    paired: PairedCheck | None = None
    policy: Policy | None = None


@dataclass(frozen=True)
class DeferredPrefill:
    """Under a policy, the drafter's prefill of a unit until a round drafts: the call, and the tokens of the
    batch's prompts it reads (what the policy prices the catch-up by, with the tokens emitted since)."""

    run: Callable[[], None]
    tokens: int


@dataclass
class Held:
    """What a batch carries from one round to the next: the verifier's carry, and per row the tokens
    committed since the drafter last drafted, its next root last (what `Drafter.commit` is handed: a
    round's emitted tokens, or more after rounds that drafted nothing); and how far the policy has
    read the phase clock's closed rounds."""

    unfed: list[list[int]]
    carry: Any = None
    costs_read: int = 0
    # under a policy, the drafter's prefill of the batch until a round drafts (None: done), and each live row's
    # place in the batch as prefilled, so that the rows that left meanwhile leave the drafter then
    draft_prefill: DeferredPrefill | None = None
    rows: list[int] = field(default_factory=list)


def decode(
    target: TargetModel,
    drafter: Drafter,
    verifier: Verifier,
    prompts: list[list[int]],
    settings: DecodeSettings,
    on_prompt_done: Callable[[PromptRecord], None] | None = None,
    paired: PairedCheck | None = None,
    policy: Policy | None = None,
) -> RunResult:
    """Generate up to max_new_tokens per prompt; returns per-prompt and per-round records.

    ``on_prompt_done`` gets each prompt's record as soon as it stops (live progress, tracking).
    ``paired`` sees every round's i.i.d. drafts after they are verified (`speculab.core.paired`); its
    time is kept out of the run's wall time and phase split. ``policy`` chooses each round's length
    (`settings.adaptive`) or each tree's budget; its acceptance restarts at each prefill, its costs carry on."""
    records = [PromptRecord(i, len(p)) for i, p in enumerate(prompts)]
    # On the CPU whatever the models' device: verifiers and the sampler move its uniforms to p's
    # device, so a seed gives the same draws inline and on Ray, on the CPU and on a GPU.
    rng = torch.Generator().manual_seed(settings.seed)
    loop = Loop(target, drafter, verifier, settings, rng, PhaseClock(), [], paired, policy)
    clock = loop.clock
    start = time.perf_counter()
    for first in range(0, len(prompts), settings.batch_size):
        batch = records[first : first + settings.batch_size]
        with clock.phase("prefill_target"):
            features = target.prefill([prompts[r.index][:-1] for r in batch], room=settings.room)
        draft_prefill = partial(
            drafter.prefill,
            [prompts[r.index][:-1] for r in batch],
            [prompts[r.index][-1] for r in batch],
            settings.seed + first,
            features=features,
            room=settings.room,
        )
        held = Held([[prompts[r.index][-1]] for r in batch], costs_read=len(clock.rounds), rows=list(range(len(batch))))
        if policy is not None:
            policy.restart()
        if policy is None or policy.drafts_every_round:
            with clock.phase("prefill_draft"):
                draft_prefill()
        else:  # a unit the policy never drafts for never pays the draft's pass over its prompts
            held.draft_prefill = DeferredPrefill(draft_prefill, sum(len(prompts[r.index]) - 1 for r in batch))
        while batch:
            active = _round(loop, batch, held)
            for record in batch:
                if record.stop and on_prompt_done:
                    on_prompt_done(record)
            batch = active
    prefill = clock.settle()  # waits for the device once: the wall time below includes its queued work
    paired_s = sum(r.time_paired_s for r in loop.rounds)
    wall = time.perf_counter() - start - paired_s
    return RunResult(
        records,
        loop.rounds,
        wall,
        prefill.get("prefill_target", 0.0),
        prefill.get("prefill_draft", 0.0),
        paired_s,
        sum(r.cpu_paired_s for r in loop.rounds),
        settings.length,
    )


def _choose(loop: Loop, batch: list[PromptRecord], held: Held) -> tuple[Choice, float]:
    """The round's length (and the tokens a row it expects) and the policy's seconds to choose it, from the
    rounds the phase clock closed since it last looked; the settings' length without a policy."""
    policy = loop.policy
    if policy is None:
        return Choice(loop.settings.length, math.nan), 0.0
    start = time.perf_counter()
    if policy.resting:  # L = 0 to the unit's end (`AdaptiveLength.resting`): its rounds teach the fit nothing new
        return Choice(0, 1.0), time.perf_counter() - start
    done, held.costs_read = loop.clock.finished(held.costs_read)
    for closed in done:
        policy.measured(closed)
    choice = policy.choose(len(batch), floor=pending_positions(held.carry), unread=_unread(loop, batch, held))
    return choice, time.perf_counter() - start


def _unread(loop: Loop, batch: list[PromptRecord], held: Held) -> Unread | None:
    """What a round that drafts would make the draft catch up on (None: it has read the unit)."""
    if held.draft_prefill is None:
        return None
    return Unread(_unread_tokens(held), max(loop.settings.max_new_tokens - len(record.tokens) for record in batch))


def _verify(
    loop: Loop, proposal: Proposal, p_nodes: torch.Tensor, held: Held, L: int
) -> tuple[Verdict, Drafts | None, DraftTree]:
    """The round's verdict, for i.i.d. paths the drafts with their p and q (the paired check's), and the
    tree where it was verified (a deterministic one is walked on p's device).
    A round that drafted nothing (L = 0) samples the target and keeps the carry: the policy drafts
    nothing only where no carry modifies the next position (`pending_positions`)."""
    if proposal.paths is None:  # a deterministic tree (DDTree): a tree verifier (walk) on node-major p
        tree = proposal.tree.to(p_nodes.device)
        return loop.verifier(tree, p_nodes, rng=loop.rng), None, tree
    assert proposal.q is not None and proposal.tree.path_nodes is not None  # i.i.d. paths come with both
    p = gather_paths(p_nodes, proposal.tree.path_nodes)
    drafts = (proposal.paths.to(p.device), p, proposal.q.to(p.device))
    verify = loop.verifier if L or loop.policy is None else sample_target
    verdict = verify(*drafts, rng=loop.rng, carry=held.carry)
    return (verdict if L or loop.policy is None else replace(verdict, carry=held.carry)), drafts, proposal.tree


def _round(loop: Loop, batch: list[PromptRecord], held: Held) -> list[PromptRecord]:
    """One round for the active rows; returns the rows still decoding (`held` updated for the next)."""
    target, drafter, settings, clock = loop.target, loop.drafter, loop.settings, loop.clock
    begun = clock.begin_round()
    choice, policy_s = _choose(loop, batch, held)
    L = choice.length
    drafted = L > 0 or loop.policy is None  # without a policy the drafter proposes every round
    catch_up_tokens = 0
    if drafted and held.draft_prefill is not None:
        with clock.phase("catch_up"):
            catch_up_tokens = _catch_up(drafter, held)
    with clock.phase("draft"):
        proposal = (
            drafter.propose(settings.num_paths, L, settings.sampling)
            if drafted
            else root_proposal([row[-1] for row in held.unfed])
        )
    if drafted and proposal.paths is not None:  # a confidence stop may end a round's paths short of L
        L = proposal.paths.shape[2]
    with clock.phase("target"):
        p_nodes = target.score(proposal.tree, settings.sampling.temperature)
    with clock.phase("verify"):
        verdict, drafts, tree = _verify(loop, proposal, p_nodes, held, L)
    if L:
        p_path, q_path = along_path(p_nodes, proposal, tree, verdict.path, drafts)
        depths: torch.Tensor | None = depth_evidence(p_path, q_path, verdict, tree_marginals=proposal.paths is None)
    else:
        depths = None
    nodes = accepted_nodes(proposal.tree, verdict)  # [B, L+1]
    read = read_round(verdict, proposal.tree, nodes, depths)
    emitted, evidence = read.emitted, read.evidence
    paired_cpu = _paired(loop, drafts, batch)
    held.unfed = emitted if drafted else [row + tokens for row, tokens in zip(held.unfed, emitted)]
    with clock.phase("target"):
        features = target.commit(nodes)
    with clock.phase("draft"):
        if held.draft_prefill is None:
            drafter.commit(held.unfed, features=features)
    taus = [len(tokens) - 1 for tokens in emitted]
    if loop.policy is not None:
        loop.policy.observe(Observed(L, taus, choice.budget, read.nodes))
    kept = _record(batch, emitted, evidence, settings, L)
    first = [[row[column] for row in evidence if row] for column in (0, L, L + 1)]  # depth 1, entropies
    live = [i for i, record in enumerate(batch) if not record.stop]
    held.carry = verdict.carry
    if len(live) < len(batch):
        rows = torch.tensor(live, dtype=torch.long)
        target.retain(rows)
        if held.draft_prefill is None:
            drafter.retain(rows)
        held.unfed, held.rows = [held.unfed[i] for i in live], [held.rows[i] for i in live]
        held.carry = held.carry.select(rows.to(verdict.num_tokens.device)) if held.carry is not None else None
    round_record = RoundRecord(
        rows=len(batch),
        tree_nodes=read.tree_nodes,
        accepted=taus,
        kept=kept,
        time_tree_build_s=proposal.build_s,
        kv_target_bytes=target.kv_bytes(),
        kv_draft_bytes=drafter.kv_bytes(),
        cpu_paired_s=paired_cpu,
        feature_bytes=proposal.feature_bytes,
        time_feature_s=proposal.feature_s,
        first_overlap=first[0],
        first_entropy_target=first[1],
        first_entropy_draft=first[2],
        ahead_hit=proposal.ahead_hit,
        ahead_drafts=proposal.ahead_drafts,
        draft_busy_s=proposal.draft_busy_s,
        length=L,
        predicted_tokens=choice.predicted,
        time_policy_s=policy_s,
        catch_up_tokens=catch_up_tokens,
        budget=choice.budget,
    )
    loop.rounds.append(round_record)
    clock.close_round(round_record, begun)
    return [batch[i] for i in live]


def _unread_tokens(held: Held) -> int:
    """The tokens the draft's catch-up reads: the batch's prompts, and what its rows emitted since."""
    assert held.draft_prefill is not None
    return held.draft_prefill.tokens + sum(len(row) for row in held.unfed)


def _catch_up(drafter: Drafter, held: Held) -> int:
    """The first round that drafts after a prefill under a policy: the drafter's prefill of the whole batch
    (its uniforms laid out by the batch's rows, as without a policy), the rows that left since dropped, and
    the tokens committed since handed over (each row's root, then what its rounds emitted); the tokens it
    read."""
    assert held.draft_prefill is not None
    tokens = _unread_tokens(held)
    held.draft_prefill.run()
    held.draft_prefill = None
    drafter.retain(torch.tensor(held.rows, dtype=torch.long))
    drafter.commit(held.unfed)
    return tokens


def _paired(loop: Loop, drafts: Drafts | None, batch: list[PromptRecord]) -> float:
    """The paired check on the round's i.i.d. drafts (`speculab.core.paired`), in a phase of its own;
    its CPU seconds."""
    if loop.paired is None or drafts is None:
        return 0.0
    start = time.process_time()
    with loop.clock.phase("paired"):
        loop.paired(*drafts, [record.index for record in batch])
    return time.process_time() - start
