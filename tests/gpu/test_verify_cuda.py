"""Every registered verifier on CUDA: the verdicts the CPU gives for the same draws, eager and
replayed from a CUDA graph (`verify.captured.CapturedPaths`), and tokens drawn on the GPU that follow the
target (chi-square over the first four tokens)."""

from __future__ import annotations

import pytest
import torch

from speculab.drafting.best_first import best_first_tree
from speculab.registry import ALGORITHMS, PATH_ALGORITHMS, get_verifier
from speculab.verify.captured import replayed
from support.toy_instances import decoded_joint_pvalue, sample_batch, toy_pair

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", PATH_ALGORITHMS)
def test_the_same_draws_give_the_cpu_verdict_on_cuda(name: str) -> None:
    """A CPU generator on both sides: the verifier draws its uniforms there and moves them to p's
    device (`verify.decisions.draw_uniforms`), so both runs consume the same uniforms."""
    spec = ALGORITHMS[name]
    paths_per_row = 3 if spec.multi_path and spec.lossless(3) else 1
    target, draft = toy_pair(6, "full", False, False, seed=3)
    paths, p, q = sample_batch(target, draft, batch=64, paths=paths_per_row, length=4, seed=5)
    verify = get_verifier(name)
    on_cpu = verify(paths, p, q, rng=torch.Generator().manual_seed(11))
    on_cuda = verify(paths.cuda(), p.cuda(), q.cuda(), rng=torch.Generator().manual_seed(11))
    assert on_cuda.tokens.device.type == "cuda"
    for field in ("tokens", "num_tokens", "path"):
        assert torch.equal(getattr(on_cpu, field), getattr(on_cuda, field).cpu()), field


@pytest.mark.parametrize("name", PATH_ALGORITHMS)
def test_the_captured_decision_gives_the_cpu_verdicts_round_after_round(name: str) -> None:
    """On a GPU: three rounds on one batch, each the previous round's carry in: the first of each shape
    (carry or none) captures its graph, the rest replay it; every verdict is the CPU's for the same draws.
    Added 2026-11-28: not yet run on a GPU."""
    spec = ALGORITHMS[name]
    paths_per_row = 3 if spec.multi_path and spec.lossless(3) else 1
    target, draft = toy_pair(6, "full", False, False, seed=3)
    paths, p, q = sample_batch(target, draft, batch=64, paths=paths_per_row, length=4, seed=5)
    eager, captured = get_verifier(name), get_verifier(name, replay=replayed("graphs"))
    cpu_carry = cuda_carry = None
    for round_index in range(3):
        on_cpu = eager(paths, p, q, rng=torch.Generator().manual_seed(round_index), carry=cpu_carry)
        on_cuda = captured(
            paths.cuda(), p.cuda(), q.cuda(), rng=torch.Generator().manual_seed(round_index), carry=cuda_carry
        )
        for field in ("tokens", "num_tokens", "path"):
            assert torch.equal(getattr(on_cpu, field), getattr(on_cuda, field).cpu()), (round_index, field)
        cpu_carry, cuda_carry = on_cpu.carry, on_cuda.carry


@pytest.mark.parametrize("name", PATH_ALGORITHMS)
def test_tokens_drawn_on_cuda_follow_the_target(name: str) -> None:
    """On a GPU: the tokens each path verifier draws there (200,000 rows of a bigram toy pair) follow the
    target's exact joint of the first four tokens (chi-square p-value above 1e-4)."""
    pvalue, cells = decoded_joint_pvalue(name, device="cuda")
    assert pvalue > 1e-4, f"{name}: chi-square p-value {pvalue:.3g} over {cells} cells"


def test_the_same_draws_give_the_cpu_ddtree_walk_on_cuda() -> None:
    """The DDTree walk (a tree verifier) with the CPU generator on both sides, as the engine calls it."""
    gen = torch.Generator().manual_seed(7)
    marginals = torch.softmax(torch.randn(16, 4, 6, generator=gen) * 2, dim=-1)  # [B, L, V]
    tree = best_first_tree(marginals, torch.randint(0, 6, (16,), generator=gen), 12)
    p = torch.softmax(torch.randn(6, 6, generator=gen) * 2, dim=-1)[tree.tokens]  # [B, N, V] a bigram target
    walk = get_verifier("ddtree")
    on_cpu = walk(tree, p, rng=torch.Generator().manual_seed(11))
    on_cuda = walk(tree.to(torch.device("cuda")), p.cuda(), rng=torch.Generator().manual_seed(11))
    assert on_cuda.tokens.device.type == "cuda"
    for field in ("tokens", "num_tokens", "path"):
        assert torch.equal(getattr(on_cpu, field), getattr(on_cuda, field).cpu()), field
