"""Drafting ahead (speculative speculative decoding, SSD: Kumar, Dao and May, ICLR 2026, arXiv 2603.03251,
whose algorithm is called Saguaro): while the target verifies round t, the draft drafts round t + 1 for
the verdicts of round t it finds likeliest, and round t + 1 takes the cached draft on a hit.

A verdict on one drafted path d_1..d_L (K = 1) is an accepted length k (0..L) and the token the target
adds after it, x (its correction where k < L, its bonus at k = L): the round commits d_1..d_k, x and x is
the next root. For each k the draft guesses the F_k tokens its logits rank highest after d_1..d_k,
leaving out d_{k+1} (a correction is never the token it replaces); the guesses are nodes of the draft's
forest under the drafted chain, and each drafts L tokens from there as a path of its own, so a round's
speculation (`draft_ahead`) is L + 1 forest passes over G = sum F_k guesses a row, and no KV cache is
copied. A round is a hit when every row's verdict is among its guesses; a miss drafts as the synchronous
loop does. A draft model that drafts ahead keeps the next round's uniforms, drafts and hit in an
`AheadState` between rounds.

Randomness: a round's uniforms [B, K, L] are drawn once from the draft's generator, before the verdict
(`drafting.sampling.draft_uniforms`, as every decode draws them); every guess of row b draws its tokens
with row b's uniforms, and a miss drafts with the same ones. So the draft's randomness never depends on
the verdict it guesses, and the generator moves as in the synchronous loop. Losslessness is the
verifier's: a cached draft's tokens were drawn from the q it carries, after the very context the verdict
committed.

The fan-out over k is geometric by default: with a per-token acceptance rate a, the verdict stops at k
with probability P(k) = a^k (1 - a) (k < L) or a^L (k = L), and a budget of G guesses goes to F_k in
proportion to sqrt(P(k)) (the allocation that minimises the expected miss sum_k P(k) / F_k), at least
one each while the budget lasts; a is the acceptance so far of the unit being decoded (`AcceptanceRate`,
started afresh at each prefill, so a unit's guesses do not depend on the units decoded before it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from speculab.drafting.iid import ForestLM
from speculab.drafting.sampling import SamplingParams, draft_probs, sample_with
from speculab.drafting.tree import DraftTree, Proposal

FAN_OUTS = ("geometric", "uniform")  # `drafter.ahead_fan_out`


def stop_probabilities(length: int, rate: float) -> list[float]:
    """P(k) for k = 0..L of a verdict that accepts each drafted token with probability `rate`."""
    return [rate**k * (1.0 - rate) for k in range(length)] + [rate**length]


def fan_out(budget: int, length: int, rate: float, shape: str = "geometric") -> list[int]:
    """F_0..F_L, summing to `budget`: guesses of the correction (or bonus) token after k accepted tokens.
    geometric: F_k proportional to sqrt(P(k)) (module docstring); uniform: the budget spread evenly.
    Whole numbers by the largest remainder, at least one each where the budget covers every k."""
    if shape not in FAN_OUTS:
        raise ValueError(f"fan-out {shape!r}: must be one of {', '.join(FAN_OUTS)}")
    weights = [1.0] * (length + 1) if shape == "uniform" else [math.sqrt(p) for p in stop_probabilities(length, rate)]
    floor = 1 if budget >= length + 1 else 0
    spare = budget - floor * (length + 1)
    shares = [spare * w / sum(weights) for w in weights]
    counts = [floor + int(s) for s in shares]
    by_remainder = sorted(range(length + 1), key=lambda k: (int(shares[k]) - shares[k], k))
    for k in by_remainder[: budget - sum(counts)]:
        counts[k] += 1
    return counts


@dataclass
class AcceptanceRate:
    """A unit's per-token acceptance so far, for the geometric fan-out: accepted over drafted tokens,
    from a prior of one round at `prior`."""

    length: int
    prior: float = 0.5
    accepted: float = 0.0
    drafted: float = 0.0

    @property
    def rate(self) -> float:
        return (self.accepted + self.prior * self.length) / (self.drafted + self.length)

    def add(self, taus: list[int]) -> None:
        """A round's accepted lengths, one per row."""
        self.accepted += sum(taus)
        self.drafted += self.length * len(taus)


@dataclass(frozen=True)
class Guesses:
    """A round's guessed verdicts: guess g stops at k[g] accepted tokens and adds token x[b, g] in row b."""

    k: torch.Tensor  # [G] int64, the same for every row
    x: torch.Tensor  # [B, G] int64


def guessed(rankings: torch.Tensor, drafted: torch.Tensor, fan: list[int]) -> Guesses:
    """The top F_k tokens of `rankings` at each k, the drafted token left out where k < L.
    rankings [B, L+1, V]: the draft's logits after the root and after each drafted token;
    drafted [B, L]: the path d_1..d_L."""
    B, L1, V = rankings.shape
    scores = rankings.float().clone()
    rows = torch.arange(B, device=scores.device)
    for k in range(L1 - 1):
        scores[rows, k, drafted[:, k].to(scores.device)] = -math.inf
    ks, xs = [], []
    for k, f in enumerate(fan):
        if f:
            xs.append(scores[:, k].topk(min(f, V if k == L1 - 1 else V - 1), dim=-1).indices)  # [B, F_k]
            ks += [k] * xs[-1].shape[1]
    return Guesses(torch.tensor(ks, dtype=torch.long), torch.cat(xs, dim=1))


def chain_nodes(drafted: torch.Tensor) -> DraftTree:
    """drafted [B, L] as a chain of forest nodes 0..L-1 under the context (node i's parent: node i-1)."""
    B, L = drafted.shape
    parents = torch.arange(-1, L - 1, device=drafted.device).expand(B, L)
    depth = torch.arange(L, device=drafted.device).expand(B, L)
    return DraftTree(drafted, parents, depth, torch.ones_like(drafted, dtype=torch.bool))


def guess_nodes(guesses: Guesses) -> DraftTree:
    """Guess g's token x[:, g] as forest node L + g, under the chain's node k[g] - 1 (the context at k = 0)."""
    x = guesses.x
    parents = (guesses.k - 1).to(x.device).expand_as(x)
    return DraftTree(x, parents, guesses.k.to(x.device).expand_as(x), torch.ones_like(x, dtype=torch.bool))


def guess_step_nodes(tokens: torch.Tensor, k: torch.Tensor, step: int, length: int) -> DraftTree:
    """Drafted token `step` (1-based) of every guess: tokens [B, G] as forest nodes after the chain, the
    guesses and the steps before, each under its guess's previous node (the guess itself at step 1)."""
    B, G = tokens.shape
    g = torch.arange(G, device=tokens.device).expand(B, G)
    parents = length + (step - 1) * G + g  # the guess (step 1) or the step before
    depth = (k.to(tokens.device) + step).expand(B, G)
    return DraftTree(tokens, parents, depth, torch.ones_like(tokens, dtype=torch.bool))


@dataclass(frozen=True)
class Speculation:
    """The drafts a round made ahead: guess g's next round draws tokens[b, g] [L] from q[b, g] [L, V]."""

    guesses: Guesses
    tokens: torch.Tensor  # [B, G, L] int64
    q: torch.Tensor  # [B, G, L, V]

    @property
    def drafts(self) -> int:
        """Drafts made ahead: guesses times rows."""
        return self.tokens.shape[0] * self.tokens.shape[1]

    def hits(self, emitted: list[list[int]]) -> torch.Tensor | None:
        """[B] the guess each row's verdict (the tokens it committed) matched, or None if any row's was
        not guessed: its accepted length is len - 1 and its added token the last."""
        found = []
        k, x = self.guesses.k.tolist(), self.guesses.x.tolist()
        for row, tokens in enumerate(emitted):
            match = [g for g in range(len(k)) if k[g] == len(tokens) - 1 and x[row][g] == tokens[-1]]
            if not match:
                return None
            found.append(match[0])
        return torch.tensor(found, dtype=torch.long)

    def proposal(self, hit: torch.Tensor, root: torch.Tensor) -> Proposal:
        """The cached draft of the guesses `hit` [B], rooted at `root` [B] (each row's added token)."""
        rows = torch.arange(hit.shape[0])
        paths = self.tokens[rows, hit.to(self.tokens.device)][:, None]  # [B, 1, L]
        return Proposal(DraftTree.from_paths(root.to(paths.device), paths), paths, self.q[rows, hit][:, None])

    def retain(self, rows: torch.Tensor) -> Speculation:
        """The speculation of the rows still decoding."""
        at = rows.to(self.tokens.device)
        return Speculation(Guesses(self.guesses.k, self.guesses.x[at]), self.tokens[at], self.q[at])


def draft_ahead(
    lm: ForestLM,
    root_logits: torch.Tensor,
    drafted: torch.Tensor,
    fan: list[int],
    sampling: SamplingParams,
    u: torch.Tensor,
) -> Speculation:
    """The next round drafted ahead of the verdict on the round's drafted path (drafted [B, L], its root's
    logits [B, V] the last the draft fed), for each of F_k guesses (`fan`) of the token the verdict adds
    after k accepted tokens: L + 1 passes over `lm`'s forest, by the next round's uniforms u [B, 1, L]
    (row b's for every guess of row b)."""
    B, L = drafted.shape
    after = lm.extend(chain_nodes(drafted))  # [B, L, V] after d_1..d_L
    guesses = guessed(torch.cat([root_logits[:, None], after], dim=1), drafted, fan)
    logits = lm.extend(guess_nodes(guesses))  # [B, G, V]
    tokens: list[torch.Tensor] = []
    qs: list[torch.Tensor] = []
    for step in range(L):
        qs.append(draft_probs(logits, sampling.temperature, sampling.top_k, sampling.top_p))  # [B, G, V]
        row_u = u[:, 0, step, None, None].expand(B, qs[-1].shape[1], 1)  # row b's, for every guess
        tokens.append(sample_with(qs[-1], row_u)[..., 0])  # [B, G]
        if step < L - 1:
            logits = lm.extend(guess_step_nodes(tokens[-1], guesses.k, step + 1, L))
    return Speculation(guesses, torch.stack(tokens, dim=2), torch.stack(qs, dim=2))


class AheadState:
    """What a draft model that drafts ahead holds between rounds: the next round's uniforms, drawn ahead,
    its drafts for the guessed verdicts (`Speculation`), and the guess each row's verdict matched."""

    def __init__(self) -> None:
        self.next_u: torch.Tensor | None = None  # [B, K, L] the next round's uniforms, drawn ahead
        self.speculation: Speculation | None = None  # the next round drafted ahead
        self.hit: torch.Tensor | None = None  # [B] the guess each row's verdict matched (every row's did)

    def hold(self, u: torch.Tensor, speculation: Speculation) -> None:
        """The next round's uniforms and its drafts, made ahead of this round's verdict."""
        self.next_u, self.speculation, self.hit = u, speculation, None

    def take(self) -> tuple[torch.Tensor | None, Speculation | None, torch.Tensor | None]:
        """(the uniforms drawn ahead, the speculation, the guess hit) for the round about to be proposed,
        each None where the last round drafted nothing ahead; forgotten here."""
        held = self.next_u, self.speculation, self.hit
        self.next_u, self.speculation, self.hit = None, None, None
        return held

    def commit(self, emitted: list[list[int]]) -> None:
        """The round's verdict (the tokens each row committed): found among the guesses, or not."""
        if self.speculation is not None:
            self.hit = self.speculation.hits(emitted)

    def retain(self, rows: torch.Tensor) -> None:
        self.next_u = self.next_u[rows.to(self.next_u.device)] if self.next_u is not None else None
        self.speculation = self.speculation.retain(rows) if self.speculation is not None else None
        self.hit = self.hit[rows] if self.hit is not None else None


class AheadModel(Protocol):
    """A draft model that drafts ahead (`speculab.models.roles.DraftModel`, or its Ray proxy)."""

    def prefill(
        self, contexts: list[list[int]], roots: list[int], seed: int, features: Any = None, room: int = 0
    ) -> None: ...
    def propose(self, num_paths: int, length: int, sampling: SamplingParams) -> Proposal: ...
    def speculate(self, paths: torch.Tensor, fan: list[int], sampling: SamplingParams) -> None: ...
    def commit(self, emitted: list[list[int]], features: Any = None) -> None: ...
    def retain(self, rows: torch.Tensor) -> None: ...
    def kv_bytes(self) -> int: ...


def speculation_nodes(budget: int, length: int) -> int:
    """Forest nodes a round drafted ahead adds to the draft's cache: the chain, and L per guess."""
    return length + budget * length


@dataclass(frozen=True)
class Ahead:
    """How a decode drafts ahead (`drafter.ahead=ssd`): guesses a row, and their fan-out over k."""

    budget: int
    fan_out: str = "geometric"


class AheadDrafter:
    """The engine's drafter that drafts every round ahead: each proposal is followed by the draft model's
    speculation of the next round (`AheadModel.speculate`) with the fan-out of the decode's acceptance
    so far (from the unit's prefill on). In one process the speculation runs after the proposal, before the
    target scores it."""

    def __init__(self, model: AheadModel, ahead: Ahead, length: int) -> None:
        self.model, self.budget, self.shape = model, ahead.budget, ahead.fan_out
        self.acceptance = AcceptanceRate(length)

    def prefill(
        self, contexts: list[list[int]], roots: list[int], seed: int, features: Any = None, room: int = 0
    ) -> None:
        self.acceptance = AcceptanceRate(self.acceptance.length)
        extra = speculation_nodes(self.budget, self.acceptance.length) if room else 0
        self.model.prefill(contexts, roots, seed, features=features, room=room + extra)

    def propose(self, num_paths: int, length: int, sampling: SamplingParams) -> Proposal:
        proposal = self.model.propose(num_paths, length, sampling)
        assert proposal.paths is not None  # a path drafter's
        self.model.speculate(proposal.paths, fan_out(self.budget, length, self.acceptance.rate, self.shape), sampling)
        return proposal

    def commit(self, emitted: list[list[int]], features: Any = None) -> None:
        self.acceptance.add([len(tokens) - 1 for tokens in emitted])
        self.model.commit(emitted, features=features)

    def retain(self, rows: torch.Tensor) -> None:
        self.model.retain(rows)

    def kv_bytes(self) -> int:
        return self.model.kv_bytes()
