"""Shared fixtures: a random-weight tiny Llama saved to disk (loaded like any checkpoint)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

REPO = Path(__file__).resolve().parents[1]
TINY_PAIR = REPO / "assets" / "tiny-pycode"


def save_random_llama(path: Path, layers: int, hidden: int, vocab: int = 97, seed: int = 0) -> Path:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def random_llama_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(target, draft) random-weight Llama checkpoints sharing a 97-token vocabulary."""
    root = tmp_path_factory.mktemp("llama")
    return save_random_llama(root / "target", 3, 64, seed=1), save_random_llama(root / "draft", 1, 32, seed=2)
