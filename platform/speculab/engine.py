"""The decoding loop (docs/architecture.md): propose, score, verify, commit, record.

`decode` runs speculative decoding over prompts in batches, with any target and drafter
that follow the model protocols (in-process or Ray actor proxies) and any verifier that
follows the verifier contract. The autoregressive baseline is the same loop with a
drafter that proposes nothing (L = 0) and a verifier that samples the target's next token,
so both are timed and truncated by the same code. This module does no I/O and no logging.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import torch

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
# (paths [B, K, L], p [B, K, L+1, V], q [B, K, L, V]) of a round's i.i.d. drafts, after its verdict
PairedCheck = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]


@dataclass(frozen=True)
class DecodeSettings:
    num_paths: int  # K
    length: int  # L
    sampling: SamplingParams
    max_new_tokens: int
    batch_size: int = 1
    seed: int = 0
    eos_token_id: int | None = None
    tree_nodes: int = 0  # the most nodes a round's draft tree has, root included (0: not known)

    @property
    def room(self) -> int:
        """Cache slots a decode adds to a prompt: its new tokens and its largest draft forest, so that
        the models' caches are sized once per batch (0 when the tree is not known: they grow instead)."""
        return self.max_new_tokens + self.tree_nodes if self.tree_nodes else 0


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


@dataclass
class PromptRecord:
    index: int
    prompt_tokens: int
    tokens: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)  # tau per round
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


Mark = float | torch.cuda.Event  # a point in time: the host clock's seconds, or an event on the stream
Span = tuple[str, Mark, Mark]  # (phase, start, end)


@dataclass
class RoundMarks:
    """A round's marks, turned into its record's phase times once the run is over (`PhaseClock.settle`)."""

    record: RoundRecord
    start: Mark
    end: Mark
    phases: list[Span]


class PhaseClock:
    """Time per phase without stalling the device. Where this process runs CUDA work, each phase
    boundary is an event recorded on the current stream and read when the run is over: the phases
    are intervals of the device's own timeline, and no phase waits for the GPU to drain (a
    synchronise per phase would stall the launch queue 5 times a round). Elsewhere, the host clock.
    The events are on the current device's stream: with the draft on another GPU in-process
    (`model.draft_device`), its phase shows the launch time on the host, not its kernels."""

    def __init__(self) -> None:
        self.cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        self.spans: list[Span] = []  # phases not yet claimed by a round (or the prefill)
        self.rounds: list[RoundMarks] = []
        self.last: Mark | None = None

    def mark(self) -> Mark:
        if not self.cuda:
            self.last = time.perf_counter()
            return self.last
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self.last = event
        return event

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = self.mark()
        yield
        self.spans.append((name, start, self.mark()))

    def begin_round(self) -> tuple[Mark, int]:
        """The round's start: its mark, and where its phases begin among the unclaimed ones."""
        return self.mark(), len(self.spans)

    def close_round(self, record: RoundRecord, begun: tuple[Mark, int]) -> None:
        """The phases since `begun` (`begin_round`) belong to `record`, whose times `settle` fills in."""
        start, first = begun
        self.rounds.append(RoundMarks(record, start, self.mark(), self.spans[first:]))
        del self.spans[first:]

    def settle(self) -> dict[str, float]:
        """Wait for the last mark (once per run), fill every closed round's phase times (the rest of
        the round is `time_other_s`), and return the seconds of the phases no round claimed (prefill)."""
        if isinstance(self.last, torch.cuda.Event):
            self.last.synchronize()
        for marks in self.rounds:
            spent = _sums(marks.phases)
            r = marks.record
            r.time_draft_s, r.time_target_s = spent.get("draft", 0.0), spent.get("target", 0.0)
            r.time_verify_s, r.time_paired_s = spent.get("verify", 0.0), spent.get("paired", 0.0)
            r.time_other_s = max(0.0, _seconds(marks.start, marks.end) - sum(spent.values()))
        self.rounds = []
        rest, self.spans = _sums(self.spans), []
        return rest


def _seconds(start: Mark, end: Mark) -> float:
    if isinstance(start, torch.cuda.Event) and isinstance(end, torch.cuda.Event):
        return start.elapsed_time(end) / 1e3
    assert isinstance(start, float) and isinstance(end, float)
    return end - start


def _sums(spans: list[Span]) -> dict[str, float]:
    """Seconds per phase name."""
    spent: dict[str, float] = {}
    for name, start, end in spans:
        spent[name] = spent.get(name, 0.0) + _seconds(start, end)
    return spent


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


# tokens [B, L+1] a verdict's (accepted, then the extra token); tau [B]; q [B, L, V] a tree's marginals
def left_chain(tokens: torch.Tensor, tau: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """[B] bool: the accepted path left the tree's first-ranked chain (the most probable token at
    every depth, ties to the lower token id as the tree builders rank them): the round was won by a
    side branch, which a single chain (vanilla DFlash) would have lost."""
    L = q.shape[1]
    off = tokens[:, :L] != q.argmax(dim=-1).to(tokens.device)  # [B, L]
    return (off & (torch.arange(L, device=tokens.device) < tau[:, None])).any(dim=1)


Drafts = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # i.i.d. paths [B, K, L], p [B, K, L+1, V], q [B, K, L, V]


# p_nodes [B, N, V]; path [B]
def along_path(
    p_nodes: torch.Tensor, proposal: Proposal, tree: DraftTree, path: torch.Tensor, drafts: Drafts | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """([B, L, V] target, [B, L, V] draft) distributions of the token at each depth j = 1..L of path
    `path`: the i.i.d. paths' (``drafts``, on p's device for their verifier), or a deterministic
    tree's p at the path's node of depth j - 1 (``tree`` on p's device, where it was walked) and its
    marginals. Nothing is copied to the device but a tree's marginals where the draft is elsewhere."""
    rows = torch.arange(len(path), device=p_nodes.device)
    if drafts is not None:
        return drafts[1][rows, path, :-1], drafts[2][rows, path]
    assert tree.path_nodes is not None and proposal.marginals is not None  # a deterministic tree records both
    nodes = tree.path_nodes[rows, path, :-1].clamp(min=0)  # [B, L]; -1 past the end of a tree's shorter path
    p = p_nodes.gather(1, nodes[..., None].expand(-1, -1, p_nodes.shape[-1]))
    return p, proposal.marginals.to(p_nodes.device)


# p, q [B, L, V] along `verdict.path` (`along_path`)
def depth_evidence(p: torch.Tensor, q: torch.Tensor, verdict: Verdict, tree_marginals: bool = False) -> torch.Tensor:
    """Why a round accepted what it did, from what the round already computed (no model pass), on p's
    device so that the caller reads it in one host read; [B, L + 2], [B, L + 3] with ``tree_marginals``
    (q is the marginals a deterministic tree was built from).
    Columns: at each depth j = 1..L along the accepted path, sum_x min(p_j(x), q_j(x)), the chance
    that one token drawn from q_j is accepted against p_j by token verification (at the depths
    reached, j <= tau + 1, every path through the accepted prefix has the same p_j and q_j, so which
    one `verdict.path` names does not matter); then the entropies of p_1 and q_1 in nats; for a
    tree, then 1 where the accepted path left its first-ranked chain (`left_chain`)."""
    device = p.device
    # ranked in the dtype the tree was built from, before q meets p's
    off = left_chain(verdict.tokens.to(device), verdict.tau.to(device), q) if tree_marginals else None
    q = q.to(device, p.dtype)
    entropies = [torch.special.entr(d[:, 0]).sum(-1, keepdim=True) for d in (p, q)]
    columns = [torch.minimum(p, q).sum(-1), *entropies]
    if off is not None:
        columns.append(off[:, None].to(p.dtype))
    return torch.cat(columns, dim=1)


def _record(
    batch: list[PromptRecord], emitted: list[list[int]], evidence: list[list[float]], settings: DecodeSettings
) -> list[int]:
    """Each row's tokens, truncated, and its round (tau, the evidence at the depths it reached) into
    its prompt's record; returns the tokens kept per row."""
    kept, L = [], settings.length
    for record, tokens, row in zip(batch, emitted, evidence):
        tau = len(tokens) - 1
        tokens, record.stop = truncate(tokens, settings.max_new_tokens - len(record.tokens), settings.eos_token_id)
        record.tokens += tokens
        record.accepted.append(tau)
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


def decode(
    target: TargetModel,
    drafter: Drafter,
    verifier: Verifier,
    prompts: list[list[int]],
    settings: DecodeSettings,
    on_prompt_done: Callable[[PromptRecord], None] | None = None,
    paired: PairedCheck | None = None,
) -> RunResult:
    """Generate up to max_new_tokens per prompt; returns per-prompt and per-round records.

    ``on_prompt_done`` gets each prompt's record as soon as it stops (live progress, tracking).
    ``paired`` sees every round's i.i.d. drafts after they are verified (`speculab.paired`); its
    time is kept out of the run's wall time and phase split."""
    records = [PromptRecord(i, len(p)) for i, p in enumerate(prompts)]
    rounds: list[RoundRecord] = []
    clock = PhaseClock()
    # On the CPU whatever the models' device: verifiers and the sampler move its uniforms to p's
    # device, so a seed gives the same draws inline and on Ray, on the CPU and on a GPU.
    rng = torch.Generator().manual_seed(settings.seed)
    start = time.perf_counter()
    for first in range(0, len(prompts), settings.batch_size):
        batch = records[first : first + settings.batch_size]
        with clock.phase("prefill_target"):
            features = target.prefill([prompts[r.index][:-1] for r in batch], room=settings.room)
        with clock.phase("prefill_draft"):
            drafter.prefill(
                [prompts[r.index][:-1] for r in batch],
                [prompts[r.index][-1] for r in batch],
                settings.seed + first,
                features=features,
                room=settings.room,
            )
        carry = None
        while batch:
            active, carry = _round(target, drafter, verifier, batch, carry, settings, rng, clock, rounds, paired)
            for record in batch:
                if record.stop and on_prompt_done:
                    on_prompt_done(record)
            batch = active
    prefill = clock.settle()  # waits for the device once: the wall time below includes its queued work
    paired_s = sum(r.time_paired_s for r in rounds)
    wall = time.perf_counter() - start - paired_s
    return RunResult(
        records,
        rounds,
        wall,
        prefill.get("prefill_target", 0.0),
        prefill.get("prefill_draft", 0.0),
        paired_s,
        sum(r.cpu_paired_s for r in rounds),
        settings.length,
    )


def _round(
    target: TargetModel,
    drafter: Drafter,
    verifier: Verifier,
    batch: list[PromptRecord],
    carry: Any,
    settings: DecodeSettings,
    rng: torch.Generator,
    clock: PhaseClock,
    rounds: list[RoundRecord],
    paired: PairedCheck | None = None,
) -> tuple[list[PromptRecord], Any]:
    """One round for the active rows; returns the rows still decoding and the next carry."""
    begun = clock.begin_round()
    with clock.phase("draft"):
        proposal = drafter.propose(settings.num_paths, settings.length, settings.sampling)
    with clock.phase("target"):
        p_nodes = target.score(proposal.tree, settings.sampling.temperature)
    drafts: Drafts | None = None  # i.i.d. paths with p and q, for the paired check
    paired_cpu, tree = 0.0, proposal.tree
    with clock.phase("verify"):
        if proposal.paths is None:  # a deterministic tree (DDTree): a tree verifier (walk) on node-major p
            tree = tree.to(p_nodes.device)
            verdict = verifier(tree, p_nodes, rng=rng)
        else:
            assert proposal.q is not None and proposal.tree.path_nodes is not None  # i.i.d. paths come with both
            p = gather_paths(p_nodes, proposal.tree.path_nodes)
            drafts = (proposal.paths.to(p.device), p, proposal.q.to(p.device))
            verdict = verifier(*drafts, rng=rng, carry=carry)
        emitted = verdict.rows()
    if paired is not None and drafts is not None:
        paired_cpu = time.process_time()
        with clock.phase("paired"):
            paired(*drafts)
        paired_cpu = time.process_time() - paired_cpu
    with clock.phase("target"):
        features = target.commit(accepted_nodes(proposal.tree, verdict))
    with clock.phase("draft"):
        drafter.commit(emitted, features=features)
    taus = [len(tokens) - 1 for tokens in emitted]  # from the rows already on the host: no device read
    L = settings.length
    if L:  # one host read, where the first position's figures took one before
        p_path, q_path = along_path(p_nodes, proposal, tree, verdict.path, drafts)
        evidence = depth_evidence(p_path, q_path, verdict, tree_marginals=proposal.paths is None).tolist()
    else:
        evidence = [[] for _ in batch]
    kept = _record(batch, emitted, evidence, settings)
    first = [[row[column] for row in evidence if row] for column in (0, L, L + 1)]  # depth 1, entropies
    live = [i for i, record in enumerate(batch) if not record.stop]
    carry = verdict.carry
    if len(live) < len(batch):
        rows = torch.tensor(live, dtype=torch.long)
        target.retain(rows)
        drafter.retain(rows)
        carry = carry.select(rows.to(verdict.num_tokens.device)) if carry is not None else None
    round_record = RoundRecord(
        rows=len(batch),
        tree_nodes=proposal.tree.num_nodes.tolist(),
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
    )
    rounds.append(round_record)
    clock.close_round(round_record, begun)
    return [batch[i] for i in live], carry


class RootOnlyDrafter:
    """The autoregressive baseline's drafter: every round proposes the root alone (L = 0)."""

    def __init__(self) -> None:
        self.roots: list[int] = []

    def prefill(
        self, contexts: list[list[int]], roots: list[int], seed: int, features: Features = None, room: int = 0
    ) -> None:
        self.roots = list(roots)

    def propose(self, num_paths: int, length: int, sampling: SamplingParams) -> Proposal:
        paths = torch.empty(len(self.roots), 1, 0, dtype=torch.long)
        return Proposal(
            DraftTree.from_paths(torch.tensor(self.roots), paths), paths, torch.empty(len(self.roots), 1, 0, 0)
        )

    def commit(self, emitted: list[list[int]], features: Features = None) -> None:
        self.roots = [row[-1] for row in emitted]

    def retain(self, rows: torch.Tensor) -> None:
        self.roots = [self.roots[r] for r in rows.tolist()]

    def kv_bytes(self) -> int:
        return 0


# paths [B, 1, 0]; p [B, 1, 1, V]; q [B, 1, 0, 0]
def sample_target(
    paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor, *, rng: torch.Generator, carry: Any = None
) -> Verdict:
    """Autoregressive decoding in verifier form: the next token drawn from p at the root."""
    token = sample(p[:, 0, 0], 1, rng)  # [B, 1]
    zeros = torch.zeros(len(token), dtype=torch.long, device=token.device)
    return Verdict(token, zeros + 1, zeros)


def autoregressive(
    target: TargetModel,
    prompts: list[list[int]],
    settings: DecodeSettings,
    on_prompt_done: Callable[[PromptRecord], None] | None = None,
) -> RunResult:
    """The baseline: one target call per token, same prompts, batching and truncation."""
    settings = replace(settings, num_paths=1, length=0, tree_nodes=1)  # a round's tree is its root
    return decode(target, RootOnlyDrafter(), sample_target, prompts, settings, on_prompt_done)
