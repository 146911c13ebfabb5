"""Toy model pairs, enumerable instances and sampled verifier inputs shared by the verify tests."""

from __future__ import annotations

import torch

from speculab.verify.decisions import replay_decisions
from speculab.verify.exact import (
    Reference,
    ToyModel,
    extended_distribution,
    max_difference,
    round_outcomes,
    target_distribution,
    verifier_inputs,
)
from speculab.verify.verdict import Verdict

# (vocab, length, paths, context kind, zeros, one_hot): small enough to enumerate
Instance = tuple[int, int, int, str, bool, bool]

MULTI_PATH_INSTANCES: list[Instance] = [
    (2, 2, 2, "full", False, False),
    (3, 2, 2, "full", True, False),
    (2, 3, 2, "bigram", False, False),
    (3, 1, 3, "full", False, False),
    (2, 2, 3, "full", True, False),
    (3, 2, 2, "full", False, True),
]


def toy_pair(vocab: int, context: str, zeros: bool, one_hot: bool, seed: int) -> tuple[ToyModel, ToyModel]:
    """(target, draft): two independent random toy models of the same kind."""
    return ToyModel(vocab, seed, context, zeros, one_hot), ToyModel(vocab, seed + 1, context, zeros, one_hot)


def instance_pair(instance: Instance, seed: int) -> tuple[ToyModel, ToyModel]:
    """``toy_pair`` for an ``Instance``, seeded by ``seed`` plus its vocabulary and length."""
    vocab, length, _, context, zeros, one_hot = instance
    return toy_pair(vocab, context, zeros, one_hot, seed + vocab + length)


def one_round_error(reference: Reference, instance: Instance, seed: int) -> float:
    """The one-round certificate: how far the extended output of one round is from the target."""
    length, paths = instance[1:3]
    target, draft = instance_pair(instance, seed)
    outcomes = round_outcomes(reference, target, draft, paths, length)
    exact = extended_distribution(outcomes, target, length + 1)
    return max_difference(exact, target_distribution(target, length + 1))


def sample_path(draft: ToyModel, context: tuple[int, ...], length: int, gen: torch.Generator) -> tuple[int, ...]:
    """One path of ``length`` tokens sampled from ``draft`` after ``context``."""
    path: tuple[int, ...] = ()
    for _ in range(length):
        path += (int(torch.multinomial(draft(context + path), 1, generator=gen)),)
    return path


def sample_batch(
    target: ToyModel, draft: ToyModel, batch: int, paths: int, length: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``batch`` prompts (random short contexts), each with ``paths`` i.i.d. drafted paths.

    Returns the contract's tensors: paths ``[B, K, L]``, p ``[B, K, L+1, V]``, q ``[B, K, L, V]``.
    """
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(batch):
        context = tuple(torch.randint(target.vocab, (2,), generator=gen).tolist())
        drafted = tuple(sample_path(draft, context, length, gen) for _ in range(paths))
        rows.append(verifier_inputs(target, draft, context, drafted))
    return tuple(torch.stack(parts) for parts in zip(*rows))  # type: ignore[return-value]


# paths [B, K, L] one-hot drafts (the K paths coincide); p [B, K, L+1, V] one-hot targets
def assert_greedy_matching(verdict: Verdict, paths: torch.Tensor, p: torch.Tensor) -> None:
    """Temperature 0: the verdict is the longest draft prefix matching the argmax, then the argmax."""
    greedy = p.argmax(-1)[:, 0]  # [B, L+1]
    for b, row in enumerate(verdict.rows()):
        match = int((paths[b, 0] == greedy[b, :-1]).long().cumprod(0).sum())
        assert row == paths[b, 0, :match].tolist() + [int(greedy[b, match])]


def replay_reference(
    reference: Reference,
    paths: torch.Tensor,
    p: torch.Tensor,
    q: torch.Tensor,
    uniforms: torch.Tensor,
    carry_rows: list | None = None,
) -> list[Verdict]:
    """Run the scalar reference on every row, replaying that row's uniforms."""
    return [
        reference(paths[b], p[b], q[b], replay_decisions(uniforms[b]), None if carry_rows is None else carry_rows[b])
        for b in range(paths.shape[0])
    ]
