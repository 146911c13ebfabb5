"""The target and drafter roles over any decoder backend (transformers or toy).

`TreeTarget` and `DraftModel` implement the engine's `TargetModel` and `Drafter` protocols (docs/architecture.md).
They build their decoder from an `LMSpec` inside the process that owns them, so a Ray actor
wrapping either one loads weights on its own side and ships only tokens and probabilities,
and, for a drafter conditioned on the target (DFlash), the target's hidden features of the
tokens it commits: `TreeTarget.prefill`/`commit` return them ([B, T, n * hidden]) when its
spec names `feature_layers`, and `DraftModel.prefill`/`commit` take them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch

from speculab.drafting.ahead import AheadState, draft_ahead
from speculab.drafting.ddtree import Marginals, greedy_marginals
from speculab.drafting.iid import sample_iid_paths
from speculab.drafting.sampling import SamplingParams, draft_uniforms, tempered_probs
from speculab.drafting.selector import selector_marginals
from speculab.drafting.tree import DraftTree, Proposal
from speculab.models.kinds import (
    DecoderLM,
    FeatureConditionedLM,
    FeatureSource,
    OnePassDrafterLM,
    SelectorDrafterLM,
    TokenLM,
    TransformersLM,
)
from speculab.models.slots import workload_capacity

if TYPE_CHECKING:
    from speculab.core.engine import DecodeSettings
    from speculab.models.generate import BaselineResult, GenerateForm


@dataclass(frozen=True)
class LMSpec:
    """What to load: `hf` (a local transformers checkpoint), `parallel` (the parallel drafter), `dflash` (a DFlash
    drafter, with the target's embeddings and head from `target_path`) or `toy` (a bigram table)."""

    backend: str
    path: str = ""
    dtype: str = "float32"
    device: str = "cpu"
    threads: int = 0  # torch CPU threads in the owning process; 0 = leave as is
    tp_size: int = 1  # > 1: this process holds one shard (its TP world must exist already)
    tp_backend: str = "deepspeed"  # how a shard is loaded (`models.tp.TP_BACKENDS`): deepspeed or transformers
    table: torch.Tensor | None = field(default=None, compare=False)  # toy: [V, V]
    model: Any = field(default=None, compare=False)  # hf: a transformers model already built (benchmarks), not `path`
    feature_layers: tuple[int, ...] = ()  # target: return hidden_states[id + 1] of the tokens it commits
    target_path: str = ""  # dflash: the target checkpoint whose input embeddings and lm_head it uses
    passes: str = "eager"  # hf, dflash: eager, static or graphs (fixed-shape passes, CUDA graphs; `models.static_pass`)
    compile: bool = False  # hf, dflash: the fixed-shape passes compiled by inductor (`static_pass.compiled_pass`)


@dataclass(frozen=True)
class Conditions:
    """Where a model runs, as its speed figures depend on it: a process, or for a tensor-parallel
    target the process of rank 0 and those of its peers."""

    pid: int
    torch_threads: int  # torch's intra-op threads in that process (Ray sets one per reserved CPU)
    peers: tuple[Conditions, ...] = ()  # ranks 1.. of a tensor-parallel target, in rank order
    lean: bool = True  # its decoder layers run as speculab's lean functions (False: transformers' own code)

    def describe(self, here: int) -> str:
        place = "this process" if self.pid == here else f"process {self.pid}"
        threads = f"{self.torch_threads} torch thread{'s' if self.torch_threads != 1 else ''}"
        layers = "" if self.lean else ", layers on transformers' modules"
        if not self.peers:
            return f"{place}, {threads}{layers}"
        ranks = ", ".join(f"rank {r} process {p.pid} ({p.torch_threads})" for r, p in enumerate(self.peers, 1))
        return f"rank 0 {place}, {threads}{layers}; {ranks}"


def process_conditions(lean: bool = True) -> Conditions:
    return Conditions(os.getpid(), torch.get_num_threads(), lean=lean)


def _transformers_lm(spec: LMSpec) -> DecoderLM:
    from speculab.models.checkpoint_lm import checkpoint_lm
    from speculab.models.hf import TreeLM, load_causal_lm
    from speculab.models.weights import refuse_non_finite

    if spec.tp_size > 1:
        from speculab.models.tp import load_tp_causal_lm

        shard = load_tp_causal_lm(spec.path, spec.dtype, spec.device, spec.tp_size, spec.tp_backend)
        refuse_non_finite(spec.path, shard.named_parameters())  # this rank's slices
        return TreeLM(shard, spec.feature_layers)  # an AutoTP shard runs its own modules, eagerly
    model = spec.model
    if model is None:  # read without transformers' classes where it runs lean anyway (a faster start)
        model = checkpoint_lm(spec.path, spec.dtype, spec.device) or load_causal_lm(spec.path, spec.dtype, spec.device)
    return TreeLM(model, spec.feature_layers, spec.passes, spec.compile)


def _toy_lm(spec: LMSpec) -> DecoderLM:
    from speculab.models.toy import BigramLM

    assert spec.table is not None  # a toy model is its bigram table
    return BigramLM(spec.table)


def _parallel_lm(spec: LMSpec) -> OnePassDrafterLM:
    from speculab.models.parallel import ParallelDraftLM

    return ParallelDraftLM(spec.path, spec.dtype, spec.device)


def _dflash_lm(spec: LMSpec) -> OnePassDrafterLM:
    from speculab.models.dflash import load_dflash_lm

    return load_dflash_lm(spec.path, spec.target_path, spec.dtype, spec.device, spec.passes, spec.compile)


Loader = Callable[[LMSpec], DecoderLM | OnePassDrafterLM]
# What a model pair's checkpoints load with (`model.backend`).
PAIR_BACKENDS: dict[str, Loader] = {"hf": _transformers_lm}
# `LMSpec.backend` -> its loader: a pair's, a drafter's own checkpoint's (`DrafterSpec.backend`), or a toy's
# bigram table (tests). Each imports its backend only when asked: a toy run loads no transformers.
BACKENDS: dict[str, Loader] = {**PAIR_BACKENDS, "toy": _toy_lm, "parallel": _parallel_lm, "dflash": _dflash_lm}


def build_lm(spec: LMSpec) -> DecoderLM | OnePassDrafterLM:
    load = BACKENDS.get(spec.backend)
    if load is None:
        raise ValueError(f"model backend must be one of {', '.join(BACKENDS)}; got {spec.backend!r}")
    if spec.feature_layers and load is not _transformers_lm:
        raise ValueError(f"target features need a transformers target (backend hf); got {spec.backend!r}")
    if spec.threads:
        torch.set_num_threads(spec.threads)
    return load(spec)


class TreeTarget:
    """TargetModel: prefill, score a batch of trees in one pass, commit the accepted path."""

    def __init__(self, spec: LMSpec) -> None:
        lm = build_lm(spec)
        assert not isinstance(lm, OnePassDrafterLM), "a one-pass drafter cannot score trees"
        self.lm = lm
        self.source = lm if isinstance(lm, FeatureSource) else None  # told once, not at every commit
        self.generate_warmed: set[int] = (
            set()
        )  # batch sizes compiled generate has run untimed (`models.generate.generate`)

    def prefill(self, contexts: list[list[int]], room: int = 0) -> torch.Tensor | None:
        """Process each prompt but its last token (the first round's root), in a cache with `room`
        slots beyond the widest (`workload_capacity`); the features of those tokens [B, T, n * hidden]
        (right-aligned like the contexts), or None without feature layers."""
        self.lm.reset(len(contexts), workload_capacity(contexts, room))
        if not any(contexts):
            return None
        self.lm.feed(contexts)
        return self._features()

    def score(self, tree: DraftTree, temperature: float) -> torch.Tensor:
        """Target probabilities p [B, N, V] at every node, in one forward pass."""
        return tempered_probs(self.lm.extend(tree), temperature)

    def commit(self, accepted_nodes: torch.Tensor) -> torch.Tensor | None:
        """accepted_nodes [B, M]: tree nodes to keep, root first, -1 padded. Returns their features
        [B, M', n * hidden] from the tree-scoring pass (left-aligned), or None without feature layers."""
        self.lm.commit(accepted_nodes)
        return self._features()

    def _features(self) -> torch.Tensor | None:
        """The kept nodes' features of the last commit, on the target's device (the drafter takes them
        to its own; on Ray the actor hands them to the object store on the CPU)."""
        return None if self.source is None else self.source.features

    def retain(self, rows: torch.Tensor) -> None:
        self.lm.retain(rows)

    def kv_bytes(self) -> int:
        """Peak KV-cache bytes since the last prefill (tree or drafted paths included)."""
        return self.lm.peak_bytes

    def conditions(self) -> Conditions:
        """This model's process and torch threads (the same inline for both roles), and whether its layers
        run lean (`TreeLM.lean`, `models.families`: the autoregressive baseline's speed depends on it)."""
        return process_conditions(lean=not isinstance(self.lm, TransformersLM) or self.lm.lean is not None)

    def cpu_seconds(self) -> float:
        """CPU seconds so far of this model's process, every thread (a tensor-parallel loop sums its ranks')."""
        return time.process_time()

    def hf_generate(
        self, prompts: list[list[int]], settings: DecodeSettings, form: GenerateForm | None = None
    ) -> BaselineResult:
        """transformers' `generate` on this target's own model (the `baseline_hf` of a run), in `form`;
        leaves the tree cache alone. The batch sizes its compiled form has warmed are kept here, one set
        per loaded model."""
        from speculab.models.generate import GenerateForm, generate

        if not isinstance(self.lm, TransformersLM):  # a toy table has no transformers model
            raise ValueError("baseline_hf needs a transformers target (model.backend=hf)")
        return generate(self.lm.model, prompts, settings, form=form or GenerateForm(), warmed=self.generate_warmed)


def aligned_valid(lengths: list[int], width: int, right: bool = False) -> torch.Tensor:
    """valid [B, width]: each row's first (or, right-aligned, last) lengths[b] columns."""
    cols = torch.arange(width)[None, :]
    counts = torch.tensor(lengths)[:, None]
    return cols >= width - counts if right else cols < counts


class DraftModel:
    """Drafter: K i.i.d. paths of length L per prompt from an autoregressive draft model.

    Tokens committed since the last round (accepted tokens, then the extra token) are fed at
    the start of the next proposal, in the same pass that yields the first draft step. A
    drafter conditioned on the target (DFlash) reads no tokens but the bonus: it takes the
    target's features of the committed tokens instead, absorbing a round's at the next proposal.

    Drafting ahead (`speculate`, `speculab.drafting.ahead`): after proposing round t it drafts round t + 1
    for its guesses of round t's verdict; `commit` finds the verdict among them or not, and the next
    `propose` returns the cached draft (a hit) or drafts as usual (a miss), with the same uniforms.
    """

    def __init__(self, spec: LMSpec) -> None:
        self.lm = build_lm(spec)
        # told once, not every round: a drafter that reads the target's features instead of tokens (DFlash)
        self.conditioned = self.lm if isinstance(self.lm, FeatureConditionedLM) else None
        self.selector = self.lm if isinstance(self.lm, SelectorDrafterLM) else None  # DFlash2: it drafts its law
        self.pending: list[list[int]] = []
        self.pending_features: tuple[torch.Tensor, torch.Tensor] | None = None  # features [B, T, F], valid [B, T]
        self.rng = torch.Generator(device=spec.device)
        self.fed = False  # whether `pending` is in the cache (a proposal or a speculation fed it)
        self.root_logits: torch.Tensor | None = None  # [B, V] after the last token fed
        self.ahead = AheadState()  # the next round drafted ahead, where this model drafts ahead (`speculate`)
        # [B] each live row's place in its batch as prefilled: a round draws uniforms for every row of the
        # batch, so a row's draws do not depend on which rows left, nor on when a round drew them
        self.rows, self.width = torch.arange(0), 0

    def prefill(
        self,
        contexts: list[list[int]],
        roots: list[int],
        seed: int,
        features: torch.Tensor | None = None,
        room: int = 0,
    ) -> None:
        """Process each prompt but its last token (or the target's features of them, right-aligned
        [B, T, n * hidden]) in a cache with `room` slots beyond the widest; the roots wait for the
        first proposal."""
        self.lm.reset(len(contexts), workload_capacity(contexts, room))
        self.rng.manual_seed(seed)
        self.pending = [[root] for root in roots]
        self.pending_features = None
        self.fed, self.root_logits, self.ahead = False, None, AheadState()
        self.rows, self.width = torch.arange(len(contexts)), len(contexts)
        if self.conditioned is not None:
            if features is not None:
                valid = aligned_valid([len(c) for c in contexts], features.shape[1], right=True)
                self.conditioned.absorb(features, valid)
        elif any(contexts):
            assert isinstance(self.lm, TokenLM), "a drafter reads its context as tokens or as the target's features"
            self.lm.feed(contexts)

    def propose(self, num_paths: int, length: int, sampling: SamplingParams) -> Proposal:
        """K paths of L tokens, by the round's uniforms (drawn now, or when the round was drafted ahead);
        the cached draft where the round was drafted ahead and its verdict guessed."""
        assert not isinstance(self.lm, OnePassDrafterLM), "a one-pass drafter drafts marginals, not paths"
        u_ahead, ahead, hit = self.ahead.take()
        u = u_ahead if u_ahead is not None else self._uniforms(num_paths, length)
        drafts = ahead.drafts if ahead is not None else 0
        if ahead is not None and hit is not None:
            return replace(ahead.proposal(hit, self._root()), ahead_hit=True, ahead_drafts=drafts)
        self.root_logits, self.fed = self.lm.feed(self.pending), True
        root = self._root().to(self.root_logits.device)
        proposal = sample_iid_paths(self.lm, root, self.root_logits, num_paths, length, sampling, u)
        self._drop_forest(self.lm, self.root_logits.device)
        return proposal if ahead is None else replace(proposal, ahead_hit=False, ahead_drafts=drafts)

    def speculate(self, paths: torch.Tensor, fan: list[int], sampling: SamplingParams) -> None:
        """Draft the next round ahead, for each of F_k guesses (`fan`) of the token the verdict on the
        round's drafted path (paths [B, 1, L]) adds after k accepted tokens (`drafting.ahead`): L + 1 forest
        passes over the guesses, by the next round's uniforms, drawn here. One path a row (K = 1)."""
        assert paths.shape[1] == 1, "drafting ahead follows one path a row"
        lm = self.lm
        assert not isinstance(lm, OnePassDrafterLM), "a one-pass drafter drafts marginals, not paths"
        if not self.fed:  # the round's committed tokens, which a cached proposal did not feed
            self.root_logits, self.fed = lm.feed(self.pending), True
        assert self.root_logits is not None
        drafted = paths[:, 0].to(self.root_logits.device)  # [B, L]
        u = self._uniforms(1, drafted.shape[1])
        self.ahead.hold(u, draft_ahead(lm, self.root_logits, drafted, fan, sampling, u))
        self._drop_forest(lm, drafted.device)

    def marginals(self, length: int, temperature: float) -> Marginals:
        """Root [B] and q [B, L, V] for DDTree: a one-pass drafter's pass (a DFlash one first
        absorbs the features committed since; a DFlash2 one's law, with its marginals as q), or the
        greedy rollout of an autoregressive draft (`ar_marginals`, L passes)."""
        if isinstance(self.lm, OnePassDrafterLM):
            start, absorbed = time.perf_counter(), self._absorb_pending()
            absorb_s = time.perf_counter() - start
            if self.selector is not None:
                law = self.selector.block_law(self.pending, length, temperature)
                return Marginals(self._root(), selector_marginals(law), absorbed, absorb_s, selector=law)
            # q stays on the drafter's device: on a GPU the tree is built there (`best_first`), with no
            # [B, L, V] copy to the host and back each round
            q = self.lm.block_marginals(self.pending, length, temperature)
            return Marginals(self._root(), q, absorbed, absorb_s)
        q = greedy_marginals(self.lm, self.lm.feed(self.pending), length, temperature)
        self._drop_forest(self.lm, q.device)
        return Marginals(self._root(), q)

    def _absorb_pending(self) -> int:
        """Feed the features held since the last commit to a DFlash drafter; their bytes."""
        if self.pending_features is None or self.conditioned is None:
            return 0
        features, valid = self.pending_features
        self.conditioned.absorb(features, valid)
        self.pending_features = None
        return features.nbytes

    def _uniforms(self, paths: int, length: int) -> torch.Tensor:
        """[B, K, L] the live rows' uniforms of a round drawn for the whole batch as prefilled."""
        return draft_uniforms(self.rng, self.width, paths, length)[self.rows.to(self.rng.device)]

    def _root(self) -> torch.Tensor:
        """[B] the pending bonus token of every row."""
        return torch.tensor([row[-1] for row in self.pending])

    def _drop_forest(self, lm: DecoderLM, device: torch.device) -> None:
        """Discard drafted nodes: the next round feeds what was actually committed."""
        lm.commit(torch.empty(len(self.pending), 0, dtype=torch.long, device=device))

    def commit(self, emitted: list[list[int]], features: torch.Tensor | None = None) -> None:
        """Tokens each row committed this round (accepted, then the extra token), and the target's
        features of the root and the accepted tokens (left-aligned; the extra token is the next root)."""
        self.pending, self.fed = emitted, False
        self.ahead.commit(emitted)
        if features is not None:
            self.pending_features = features, aligned_valid([len(row) for row in emitted], features.shape[1])

    def retain(self, rows: torch.Tensor) -> None:
        self.lm.retain(rows)
        self.rows = self.rows[rows]
        self.pending = [self.pending[r] for r in rows.tolist()]
        self.root_logits = self.root_logits[rows.to(self.root_logits.device)] if self.root_logits is not None else None
        self.ahead.retain(rows)
        if self.pending_features is not None:
            features, valid = self.pending_features
            self.pending_features = features[rows.to(features.device)], valid[rows.to(valid.device)]

    def kv_bytes(self) -> int:
        """Peak KV-cache bytes since the last prefill (tree or drafted paths included)."""
        return self.lm.peak_bytes

    def conditions(self) -> Conditions:
        """This model's process and torch threads (the same inline for both roles)."""
        return process_conditions()

    def cpu_seconds(self) -> float:
        """CPU seconds so far of this model's process, every thread (asked of a draft actor of its own, whose
        work a decode's CPU time counts: `runtime.loop_host`)."""
        return time.process_time()
