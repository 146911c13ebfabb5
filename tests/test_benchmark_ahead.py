"""benchmarks/ahead.py's deepened target, the pair on which drafting ahead is measured against a costlier
target pass: the tiny target with identity layers added scores every token exactly as the tiny target does,
so the benchmark's two pairs differ in what a target pass costs and in nothing else."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

REPO = Path(__file__).resolve().parents[1]


def test_a_deepened_target_gives_the_tiny_targets_logits(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    sys.modules.pop("ahead", None)
    import ahead

    deep = ahead.deepened(ahead.TINY_TARGET, 16, tmp_path / "deep")
    tokens = torch.randint(2, 4096, (2, 12), generator=torch.Generator().manual_seed(0))
    shallow_model = AutoModelForCausalLM.from_pretrained(ahead.TINY_TARGET, dtype=torch.float32)
    deep_model = AutoModelForCausalLM.from_pretrained(deep, dtype=torch.float32)
    assert deep_model.config.num_hidden_layers == 16
    with torch.no_grad():
        assert torch.equal(deep_model(tokens).logits, shallow_model(tokens).logits)
    with pytest.raises(ValueError, match="--target-layers must be at least the target's own 7"):
        ahead.deepened(ahead.TINY_TARGET, 3, tmp_path / "shallow")
