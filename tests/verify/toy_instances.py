"""Sampled verifier inputs from analytic toy models, shared by the verify tests."""

from __future__ import annotations

import torch

from speculab.verify.decisions import replay_decisions
from speculab.verify.exact import Reference, ToyModel, verifier_inputs
from speculab.verify.verdict import Verdict


def sample_path(draft: ToyModel, context: tuple[int, ...], length: int,
                gen: torch.Generator) -> tuple[int, ...]:
    """One path of ``length`` tokens sampled from ``draft`` after ``context``."""
    path: tuple[int, ...] = ()
    for _ in range(length):
        path += (int(torch.multinomial(draft(context + path), 1, generator=gen)),)
    return path


def sample_batch(target: ToyModel, draft: ToyModel, batch: int, paths: int, length: int,
                 seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
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


def replay_reference(reference: Reference, paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor,
                     uniforms: torch.Tensor, carry_rows: list | None = None) -> list[Verdict]:
    """Run the scalar reference on every row, replaying that row's uniforms."""
    return [reference(paths[b], p[b], q[b], replay_decisions(uniforms[b]),
                      None if carry_rows is None else carry_rows[b])
            for b in range(paths.shape[0])]
