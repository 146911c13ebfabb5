"""Toy model pairs, enumerable instances and sampled verifier inputs shared by the verify tests."""

from __future__ import annotations

import torch
from scipy.stats import chisquare

from speculab.registry import ALGORITHMS, get_verifier
from speculab.verify.decisions import replay_decisions, sample_inverse_cdf
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


def bigram_table(model: ToyModel) -> torch.Tensor:
    """``[V+1, V]`` next-token rows after each token, the last row for the empty context."""
    rows = [model((x,)) for x in range(model.vocab)] + [model(())]
    return torch.stack(rows)


@torch.no_grad()
def decode_tokens(
    name: str,
    target: ToyModel,
    draft: ToyModel,
    batch: int,
    paths: int,
    length: int,
    tokens: int,
    seed: int,
    device: str = "cpu",
) -> torch.Tensor:
    """``[B, tokens]`` the first tokens of speculative decoding, every row from the empty context;
    drafts, verification and every draw on ``device``."""
    p_table, q_table = bigram_table(target).to(device), bigram_table(draft).to(device)
    gen = torch.Generator(device=device).manual_seed(seed)
    out = torch.zeros(batch, tokens * (length + 1) + 1, dtype=torch.int64, device=device)  # last column: discard
    count = torch.zeros(batch, dtype=torch.int64, device=device)
    carry = None
    rows = torch.arange(batch, device=device)
    for _ in range(tokens):  # every round emits at least one token
        last = torch.where(count > 0, out[rows, (count - 1).clamp_min(0)], target.vocab)
        prev = last[:, None].expand(batch, paths)
        drafted = []
        for _ in range(length):
            u = torch.rand(batch * paths, generator=gen, dtype=torch.float64, device=device)
            prev = sample_inverse_cdf(q_table[prev].flatten(0, 1), u).view(batch, paths)
            drafted.append(prev)
        draft_paths = torch.stack(drafted, dim=2)
        context = torch.cat([last[:, None, None].expand(batch, paths, 1), draft_paths], dim=2)
        verdict: Verdict = get_verifier(name)(
            draft_paths, p_table[context], q_table[context[:, :, :-1]], rng=gen, carry=carry
        )
        column = count[:, None] + torch.arange(length + 1, device=device)
        keep = torch.arange(length + 1, device=device) < verdict.num_tokens[:, None]
        out.scatter_(1, torch.where(keep, column, out.shape[1] - 1), torch.where(keep, verdict.tokens, 0))
        count += verdict.num_tokens
        carry = verdict.carry
    return out[:, :tokens]


def decoded_joint_pvalue(name: str, device: str) -> tuple[float, int]:
    """Chi-square p-value (and cells) of the joint of the first 4 tokens that verifier `name`
    decodes on a bigram toy pair (V = 3, L = 3, 200,000 rows, drawn on `device`) against the
    target's exact joint."""
    vocab, length, tokens, batch = 3, 3, 4, 200_000
    spec = ALGORITHMS[name]
    paths = 2 if spec.multi_path and spec.lossless(2) else 1  # spectr_gbv: its lossless K = 1
    target, draft = ToyModel(vocab, 101, "bigram"), ToyModel(vocab, 102, "bigram")
    decoded = decode_tokens(name, target, draft, batch, paths, length, tokens, seed=7, device=device).cpu()
    code = (decoded * vocab ** torch.arange(tokens - 1, -1, -1)).sum(1)
    observed = torch.bincount(code, minlength=vocab**tokens).double()
    exact = target_distribution(target, tokens)
    expected = (
        torch.tensor(
            [
                exact.get(tuple(int(c) // vocab ** (tokens - 1 - i) % vocab for i in range(tokens)), 0.0)
                for c in range(vocab**tokens)
            ],
            dtype=torch.float64,
        )
        * batch
    )
    small = expected < 5  # pool sparse cells so the chi-square approximation holds
    f_obs = torch.cat([observed[~small], observed[small].sum().reshape(1)])
    f_exp = torch.cat([expected[~small], expected[small].sum().reshape(1)])
    pvalue = chisquare(f_obs.numpy(), f_exp.numpy() * f_obs.sum().item() / f_exp.sum().item()).pvalue
    return float(pvalue), len(f_obs)
