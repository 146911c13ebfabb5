"""DDTree's tree build on CUDA: the level builder there gives the CPU heap's tree at the
DDTree paper's sizes (B = 512, L = 16, Qwen3's vocabulary), and the engine's builder picks it."""

from __future__ import annotations

import pytest
import torch

from speculab.drafting.best_first import best_first, best_first_tree

pytestmark = pytest.mark.gpu


def test_the_level_builder_on_cuda_gives_the_cpu_tree() -> None:
    """On a GPU: the engine's DDTree builder (`best_first`) on CUDA marginals, at B = 512, L = 16 and Qwen3's
    vocabulary, builds the CPU heap's tree, field by field, and keeps it on the GPU."""
    gen = torch.Generator().manual_seed(0)
    q = torch.softmax(torch.randn(2, 16, 151_936, generator=gen) * 4, dim=-1)
    root = torch.tensor([3, 4])
    on_cpu = best_first_tree(q, root, 512)
    on_cuda = best_first(q.cuda(), root.cuda(), 512)
    assert on_cuda.tokens.device.type == "cuda"
    for field in ("tokens", "parents", "depth", "valid", "path_nodes"):
        assert torch.equal(getattr(on_cpu, field), getattr(on_cuda, field).cpu()), field
