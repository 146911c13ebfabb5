"""GBV (GBV paper Alg. 1, eq. 19-23): certificates, skewed draft, stability, agreement."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest
import torch

from speculab.verify.block import block_verify
from speculab.verify.decisions import draw_uniforms
from speculab.verify.exact import ToyModel, path_distribution, verifier_inputs
from speculab.verify.gbv import (
    gbv_verify,
    gbv_verify_reference,
    select_path_reference,
    skewed_draft_probs,
    skewed_draft_reference,
)
from speculab.verify.primitives import SinglePath
from support.toy_instances import MULTI_PATH_INSTANCES, one_round_error, replay_reference, sample_batch, toy_pair


@pytest.mark.parametrize("instance", MULTI_PATH_INSTANCES)
def test_certificate_one_round_matches_target(instance: tuple) -> None:
    assert one_round_error(gbv_verify_reference, instance, seed=31) < 1e-9


def brute_force_skewed(target: ToyModel, draft: ToyModel, length: int, paths: int) -> dict:
    """GBV eq. 19 by enumeration: the distribution of the selected path over all K-tuples."""
    singles = list(path_distribution(draft, (), length))
    selected: dict[tuple[int, ...], float] = {}
    for draft_set in itertools.product(singles, repeat=paths):
        chosen = tuple(path for path, _ in draft_set)
        k0 = select_path_reference(*verifier_inputs(target, draft, (), chosen))
        prob = 1.0
        for _, single in draft_set:
            prob *= single
        selected[chosen[k0]] = selected.get(chosen[k0], 0.0) + prob
    return selected


@pytest.mark.parametrize("vocab,length,paths,zeros", [(3, 2, 2, False), (2, 3, 3, False), (3, 2, 3, True)])
def test_skewed_draft_equals_brute_force_selection(vocab: int, length: int, paths: int, zeros: bool) -> None:
    target, draft = toy_pair(vocab, "full", zeros, False, seed=41)
    selected = brute_force_skewed(target, draft, length, paths)

    def prefix_mass(prefix: tuple[int, ...]) -> float:
        return sum(prob for path, prob in selected.items() if path[: len(prefix)] == prefix)

    for path, _ in path_distribution(draft, (), length):
        tokens, p, q = verifier_inputs(target, draft, (), (path,))
        reference = skewed_draft_reference(tokens[0], p[0], q[0], paths)
        batched = skewed_draft_probs(SinglePath(tokens, p[:, :], q), paths)[0]
        for t in range(length):
            parent = prefix_mass(path[:t])
            brute = torch.tensor([prefix_mass(path[:t] + (x,)) / parent for x in range(vocab)], dtype=torch.float64)
            torch.testing.assert_close(reference[t], brute, rtol=0, atol=1e-12)
            torch.testing.assert_close(batched[t], brute, rtol=0, atol=1e-12)


def exact_skewed(draft: torch.Tensor, p: torch.Tensor, q: torch.Tensor, paths: int) -> list[list[Fraction]]:
    """GBV eq. 22-23 in exact rational arithmetic (same ranking as the float code)."""
    mass, below, rows = Fraction(1), Fraction(0), []
    vocab = q.shape[-1]
    for t in range(draft.shape[0]):
        ratio = [float(p[t, x] / q[t, x]) if q[t, x] > 0 else float("inf") for x in range(vocab)]
        qf = [Fraction(float(v)) for v in q[t]]
        lower = [below + mass * sum(qf[y] for y in range(vocab) if (ratio[y], y) < (ratio[x], x)) for x in range(vocab)]
        parent = (below + mass) ** paths - below**paths
        rows.append([((lower[x] + mass * qf[x]) ** paths - lower[x] ** paths) / parent for x in range(vocab)])
        x = int(draft[t])
        below, mass = lower[x], mass * qf[x]
    return rows


@pytest.mark.parametrize("dtype,tolerance", [(torch.float64, 1e-12), (torch.float32, 2e-6)])
def test_skewed_draft_is_stable_for_eight_paths(dtype: torch.dtype, tolerance: float) -> None:
    """K = 8 along an L = 8 path of improbable tokens: the naive difference of powers cancels."""
    gen = torch.Generator().manual_seed(3)
    p = torch.softmax(torch.randn(1, 9, 6, generator=gen, dtype=torch.float64) * 3, -1)
    q = torch.softmax(torch.randn(1, 8, 6, generator=gen, dtype=torch.float64) * 3, -1)
    draft = q.argmin(-1)  # the least likely tokens: q(a_{1:t}) becomes tiny
    skewed = skewed_draft_probs(SinglePath(draft, p.to(dtype), q.to(dtype)), 8)[0].double()
    exact = torch.tensor(
        [[float(v) for v in row] for row in exact_skewed(draft[0], p[0], q[0], 8)], dtype=torch.float64
    )
    assert torch.isfinite(skewed).all()
    torch.testing.assert_close(skewed, exact, rtol=tolerance, atol=tolerance)


def test_one_path_equals_block_exactly() -> None:
    target, draft = toy_pair(7, "full", True, False, seed=5)
    paths, p, q = sample_batch(target, draft, batch=64, paths=1, length=4, seed=2)
    gbv = gbv_verify(paths, p, q, rng=torch.Generator().manual_seed(4))
    block = block_verify(paths, p, q, rng=torch.Generator().manual_seed(4))
    assert torch.equal(gbv.tokens, block.tokens) and torch.equal(gbv.path, block.path)
    skewed = skewed_draft_probs(SinglePath(paths[:, 0], p[:, 0], q[:, 0]), 1)
    assert torch.equal(skewed, q[:, 0])


@pytest.mark.parametrize(
    "zeros,one_hot,length", [(False, False, 3), (True, False, 3), (False, True, 3), (False, False, 1)]
)
def test_batched_equals_reference_for_identical_draws(zeros: bool, one_hot: bool, length: int) -> None:
    target, draft = toy_pair(5, "full", zeros, one_hot, seed=7)
    paths, p, q = sample_batch(target, draft, batch=48, paths=3, length=length, seed=1)
    verdict = gbv_verify(paths, p, q, rng=torch.Generator().manual_seed(9))
    uniforms = draw_uniforms(torch.Generator().manual_seed(9), 48, length + 1, p.device)
    expected = replay_reference(gbv_verify_reference, paths, p, q, uniforms)
    assert verdict.rows() == [v.rows()[0] for v in expected]
    assert verdict.path.tolist() == [int(v.path[0]) for v in expected]


@pytest.mark.parametrize("paths", [2, 4, 8])
def test_residual_mass_without_full_sort_equals_full_rows(paths: int) -> None:
    """The band/telescoping residual mass equals the sum over fully sorted skewed rows."""
    from speculab.verify.gbv import local_ranking, skewed_residual_mass, skewed_rows

    gen = torch.Generator().manual_seed(paths)
    rows, vocab = 24, 3000
    p = torch.softmax(torch.randn(rows, vocab, generator=gen, dtype=torch.float64) * 3, -1)
    q = torch.softmax(torch.randn(rows, vocab, generator=gen, dtype=torch.float64) * 3, -1)
    q[:4, :100] = 0.0  # zeros in q (ranked +inf), and ties in the ranking
    p[4:8, :50] = q[4:8, :50]
    q = q / q.sum(-1, keepdim=True)
    w = torch.rand(rows, generator=gen, dtype=torch.float64)
    u = torch.rand(rows, generator=gen, dtype=torch.float64) ** 3
    u[-2:] = 1.0
    full = (w[:, None] * p - skewed_rows(p, q, u, paths)).clamp_min(0).sum(-1)
    torch.testing.assert_close(
        skewed_residual_mass(p, q, local_ranking(p, q), w, u, paths), full, rtol=1e-12, atol=1e-12
    )


def test_batched_equals_reference_on_a_large_vocabulary() -> None:
    gen = torch.Generator().manual_seed(11)
    batch, paths, length, vocab = 16, 4, 5, 700
    p = torch.softmax(torch.randn(batch, paths, length + 1, vocab, generator=gen, dtype=torch.float64) * 3, -1)
    q = torch.softmax(torch.randn(batch, paths, length, vocab, generator=gen, dtype=torch.float64) * 3, -1)
    drafted = torch.multinomial(q.flatten(0, 2), 1, generator=gen).view(batch, paths, length)
    verdict = gbv_verify(drafted, p, q, rng=torch.Generator().manual_seed(9))
    uniforms = draw_uniforms(torch.Generator().manual_seed(9), batch, length + 1, p.device)
    expected = replay_reference(gbv_verify_reference, drafted, p, q, uniforms)
    assert verdict.rows() == [v.rows()[0] for v in expected]


def awkward_ranking(dtype: torch.dtype) -> torch.Tensor:
    """``[6, 5000]`` ratios as ``local_ranking`` makes them: many magnitudes, ties, 0, +inf."""
    gen = torch.Generator().manual_seed(5)
    ranking = torch.rand(6, 5000, generator=gen) * 10.0 ** torch.randint(-40, 30, (6, 5000), generator=gen)
    ranking = torch.where(torch.rand(6, 5000, generator=gen) < 0.2, ranking[:, :1], ranking).to(dtype)  # ties
    ranking[:, ::7], ranking[:, 3::11] = 0.0, torch.inf
    return ranking


def test_local_ranking_has_no_negative_zero() -> None:
    """-0.0 would sort below +0.0 by its bit pattern (``ranking_bits``)."""
    from speculab.verify.gbv import local_ranking

    ranking = local_ranking(torch.tensor([-0.0, 0.0, 0.5, 0.0]), torch.tensor([0.5, 0.5, 0.0, 0.0]))
    assert torch.equal(ranking.view(torch.int32), torch.tensor([0.0, 0.0, torch.inf, torch.inf]).view(torch.int32))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("rows", [1, 6])
def test_ranking_order_equals_stable_float_sort(dtype: torch.dtype, rows: int) -> None:
    """The integer-key radix sort orders rows like a stable float sort."""
    from speculab.verify.gbv import ranking_order

    ranking = awkward_ranking(dtype)[:rows]
    assert torch.equal(ranking_order(ranking), torch.sort(ranking, dim=-1, stable=True).indices)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64])
def test_mass_ranked_below_token_by_bits_equals_float_comparisons(dtype: torch.dtype) -> None:
    from speculab.verify.gbv import mass_ranked_below_token

    ranking = awkward_ranking(dtype)
    q = torch.rand(ranking.shape, generator=torch.Generator().manual_seed(6), dtype=dtype)
    tokens = torch.tensor([0, 7, 3, 4999, 1234, 3 + 11 * 5])  # ties (0, inf) and plain tokens
    own, ids = ranking.gather(-1, tokens[:, None]), torch.arange(ranking.shape[-1])
    below = (ranking < own) | ((ranking == own) & (ids < tokens[:, None]))
    assert torch.equal(mass_ranked_below_token(ranking, q, tokens), torch.where(below, q, 0).sum(-1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_lazy_tau_equals_tau_from_every_mass(dtype: torch.dtype) -> None:
    """Exact residual masses only where the bounds leave eta_i < h_i open: the same tau as with
    every mass, for uniforms drawn at random and right next to h (zeros, ties, w = 0)."""
    from speculab.verify.block import block_acceptance, block_weights, longest_accepted
    from speculab.verify.gbv import (
        local_ranking,
        longest_accepted_lazily,
        mass_ranked_below_token,
        selection_masses,
        skewed_probs,
        skewed_residual_mass,
    )
    from speculab.verify.primitives import token_probs

    gen = torch.Generator().manual_seed(8)
    batch, length, vocab, paths = 40, 5, 2000, 4
    p = torch.softmax(torch.randn(batch, length + 1, vocab, generator=gen, dtype=torch.float64) * 2, -1)
    q = torch.softmax(torch.randn(batch, length, vocab, generator=gen, dtype=torch.float64) * 2, -1)
    p[:8, :length, :300] = q[:8, :, :300]  # ties in the ranking, often drafted
    q[8:16, :, :200] = 0.0
    p[16:24, :, 200:700] = 0.0
    p, q = (p / p.sum(-1, keepdim=True)).to(dtype), (q / q.sum(-1, keepdim=True)).to(dtype)
    draft = torch.multinomial(q.flatten(0, 1), 1, generator=gen).view(batch, length)
    draft[16:24, 1] = 250  # p = 0 there: w = 0 from position 1 on
    ranking = local_ranking(p[:, :length], q)
    qx = token_probs(q, draft).to(torch.float64)
    cx = mass_ranked_below_token(ranking.flatten(0, 1), q.flatten(0, 1), draft.flatten()).view(batch, length)
    u = selection_masses(qx, cx.to(torch.float64))
    w = block_weights(token_probs(p[:, :length], draft), skewed_probs(qx, cx.to(torch.float64), u, paths))
    mass = skewed_residual_mass(
        p[:, 1:length].flatten(0, 1),
        q[:, 1:].flatten(0, 1),
        ranking[:, 1:].flatten(0, 1),
        w[:, 1:length].flatten(),
        u[:, 1:].flatten(),
        paths,
    ).view(batch, length - 1)
    h = torch.cat([block_acceptance(w[:, 1:length], mass), w[:, length:]], dim=1)
    for trial in range(6):
        eta = torch.rand(batch, length, generator=gen, dtype=torch.float64)
        if trial % 2:  # right next to h, on either side
            eta = (h + (eta - 0.5) * 1e-6).clamp(0, 1 - 1e-12)
        lazy = longest_accepted_lazily(p[:, 1:length], q[:, 1:], ranking[:, 1:], w, u, eta, paths)
        assert torch.equal(lazy, longest_accepted(eta < h))
