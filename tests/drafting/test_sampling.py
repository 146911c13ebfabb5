"""Draft-side sampling distributions: temperature, top-k and top-p truncation; drawing tokens."""

from __future__ import annotations

import torch

from speculab.drafting.sampling import draft_probs, sample, tempered_probs, truncate_probs


def test_temperature_zero_is_one_hot_at_the_argmax() -> None:
    logits = torch.tensor([[0.1, 2.0, 2.0, -1.0]])
    assert tempered_probs(logits, 0.0).tolist() == [[0.0, 1.0, 0.0, 0.0]]  # ties: lowest id
    torch.testing.assert_close(tempered_probs(logits, 1.0), torch.softmax(logits, -1))


def test_top_k_and_top_p_keep_the_head_and_renormalise() -> None:
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    torch.testing.assert_close(truncate_probs(probs, top_k=2), torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    torch.testing.assert_close(truncate_probs(probs, top_p=0.8), torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    torch.testing.assert_close(truncate_probs(probs, top_p=0.81), torch.tensor([[0.5, 0.3, 0.15, 0.0]]) / 0.95)
    assert truncate_probs(probs, top_p=0.1).tolist() == [[1.0, 0.0, 0.0, 0.0]]
    assert truncate_probs(probs) is probs


def test_draft_probs_compose_temperature_then_truncation() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    torch.testing.assert_close(draft_probs(logits, 1.0, top_k=1), torch.tensor([[1.0, 0.0, 0.0, 0.0]]))


def test_sample_matches_probs_and_skips_zeros() -> None:
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0, 0.0]])
    draws = sample(probs, 40_000, torch.Generator().manual_seed(0))  # [2, n]
    assert draws.shape == (2, 40_000)
    counts = torch.stack([torch.bincount(row, minlength=5) for row in draws]).double() / 40_000
    assert counts[:, [0, 2]].tolist()[0] == [0.0, 0.0] and counts[1, 0] == 1.0
    torch.testing.assert_close(counts[0], probs[0].double(), atol=0.01, rtol=0)
