"""Model checkpoints for tests: the shipped tiny pair, and random-weight Llamas saved to disk."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

REPO = Path(__file__).resolve().parents[2]
TINY_PAIR = REPO / "assets" / "tiny-pycode"


VOCAB = 128


def char_tokenizer() -> PreTrainedTokenizerFast:
    """One token per printable ASCII character (and newline), <unk> for the rest, <eos> = 1."""
    chars = ["<unk>", "<eos>", "\n", *map(chr, range(32, 127))]
    backend = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(chars)}, merges=[], unk_token="<unk>"))
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token="<eos>")


def save_random_llama(path: Path, layers: int, hidden: int, vocab: int = VOCAB, seed: int = 0) -> Path:
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
    char_tokenizer().save_pretrained(path)
    return path
