"""The decoding loop (docs/architecture.md): propose, score, verify, commit, record.

`decode` runs speculative decoding over prompts in batches, with any target and drafter
that follow the model protocols (in-process or Ray actor proxies) and any verifier that
follows the verifier contract; it returns the run's records (`speculab.core.records`), its phases
timed by a `speculab.core.clock.PhaseClock`. The autoregressive baseline is this loop with a
root-only drafter (`speculab.core.autoregressive`). This module does no I/O and no logging.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from speculab.core.clock import PhaseClock
from speculab.core.evidence import Drafts, along_path, depth_evidence
from speculab.core.records import PromptRecord, RoundRecord, RunResult
from speculab.drafting.sampling import SamplingParams
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


# evidence [B, E] (`depth_evidence`), or None when nothing was drafted
def read_round(
    verdict: Verdict, tree: DraftTree, evidence: torch.Tensor | None
) -> tuple[list[list[int]], list[int], list[list[float]]]:
    """What the host needs of a round, in one host read (on a GPU each read waits for every queued
    kernel): each row's committed tokens, its tree's real nodes and its evidence. Packed as float64,
    which holds every token id and node count exactly and every evidence value as it was."""
    device = verdict.tokens.device
    parts = [verdict.tokens, verdict.num_tokens[:, None], tree.num_nodes.to(device)[:, None]]
    if evidence is not None:
        parts.append(evidence.to(device))
    width = verdict.tokens.shape[1]
    rows = torch.cat([part.to(torch.float64) for part in parts], dim=1).tolist()
    emitted = [[int(token) for token in row[: int(row[width])]] for row in rows]
    return emitted, [int(row[width + 1]) for row in rows], [row[width + 2 :] for row in rows]


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
    ``paired`` sees every round's i.i.d. drafts after they are verified (`speculab.core.paired`); its
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
    L = settings.length
    if L:
        p_path, q_path = along_path(p_nodes, proposal, tree, verdict.path, drafts)
        depths: torch.Tensor | None = depth_evidence(p_path, q_path, verdict, tree_marginals=proposal.paths is None)
    else:
        depths = None
    emitted, tree_nodes, evidence = read_round(verdict, proposal.tree, depths)
    if paired is not None and drafts is not None:
        paired_cpu = time.process_time()
        with clock.phase("paired"):
            paired(*drafts, [record.index for record in batch])
        paired_cpu = time.process_time() - paired_cpu
    with clock.phase("target"):
        features = target.commit(accepted_nodes(proposal.tree, verdict))
    with clock.phase("draft"):
        drafter.commit(emitted, features=features)
    taus = [len(tokens) - 1 for tokens in emitted]
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
        tree_nodes=tree_nodes,
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
    )
    rounds.append(round_record)
    clock.close_round(round_record, begun)
    return [batch[i] for i in live], carry
