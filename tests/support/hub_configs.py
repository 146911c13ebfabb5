"""config.json contents of the preset models (architecture keys only), for fake checkpoints.

Figures from the models' published config.json files. The DFlash drafters' shapes are
assumptions (Qwen3-style, target width, 5 layers, block 16, five target layers spread from
layer 1): the tests only need them plausible and in the authors' layout (`dflash_config`).
"""

from __future__ import annotations

from typing import Any


def llama(hidden: int, intermediate: int, layers: int, heads: int, kv_heads: int, vocab: int) -> dict[str, Any]:
    return dict(
        model_type="llama",
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        vocab_size=vocab,
        tie_word_embeddings=False,
        max_position_embeddings=8192,
    )


def qwen3(hidden: int, intermediate: int, layers: int, heads: int, kv_heads: int, tied: bool) -> dict[str, Any]:
    return dict(
        model_type="qwen3",
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=128,
        vocab_size=151936,
        tie_word_embeddings=tied,
        max_position_embeddings=40960,
    )


def dflash(base: dict[str, Any], target_layers: int) -> dict[str, Any]:
    """A DFlash drafter's config.json: a Qwen3 config plus `dflash_config` and `num_target_layers`."""
    ids = [1 + i * (target_layers - 4) // 4 for i in range(5)]
    spec = {"target_layer_ids": ids, "block_size": 16, "mask_token_id": 151669}
    return base | {"dflash_config": spec, "num_target_layers": target_layers}


def opt(hidden: int, ffn: int, layers: int, heads: int, project: int, norm_before: bool = True) -> dict[str, Any]:
    return dict(
        model_type="opt",
        hidden_size=hidden,
        ffn_dim=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        word_embed_proj_dim=project,
        vocab_size=50272,
        max_position_embeddings=2048,
        do_layer_norm_before=norm_before,
    )


QWEN3_CODER_30B_A3B = dict(
    model_type="qwen3_moe",
    hidden_size=2048,
    intermediate_size=6144,
    moe_intermediate_size=768,
    num_experts=128,
    num_experts_per_tok=8,
    num_hidden_layers=48,
    num_attention_heads=32,
    num_key_value_heads=4,
    head_dim=128,
    vocab_size=151936,
    tie_word_embeddings=False,
    max_position_embeddings=262144,
)

HUB_CONFIGS: dict[str, dict[str, Any]] = {
    "meta-llama/Meta-Llama-3-70B-Instruct": llama(8192, 28672, 80, 64, 8, 128256),
    "meta-llama/Meta-Llama-3-8B-Instruct": llama(4096, 14336, 32, 32, 8, 128256),
    "Qwen/Qwen3-32B": qwen3(5120, 25600, 64, 64, 8, tied=False),
    "Qwen/Qwen3-0.6B": qwen3(1024, 3072, 28, 16, 8, tied=True),
    "Qwen/Qwen3-4B": qwen3(2560, 9728, 36, 32, 8, tied=True),
    "Qwen/Qwen3-8B": qwen3(4096, 12288, 36, 32, 8, tied=False),
    "Qwen/Qwen3-Coder-30B-A3B-Instruct": QWEN3_CODER_30B_A3B,
    "z-lab/Qwen3-4B-DFlash-b16": dflash(qwen3(2560, 9728, 5, 32, 8, tied=True), 36),
    "z-lab/Qwen3-8B-DFlash-b16": dflash(qwen3(4096, 12288, 5, 32, 8, tied=True), 36),
    "z-lab/Qwen3-Coder-30B-A3B-DFlash": dflash(qwen3(2048, 6144, 5, 32, 4, tied=True), 48),
    "facebook/opt-6.7b": opt(4096, 16384, 32, 32, 4096),
    "facebook/opt-350m": opt(1024, 4096, 24, 16, 512, norm_before=False),
    "facebook/opt-125m": opt(768, 3072, 12, 12, 768),
    "deepseek-ai/deepseek-coder-33b-instruct": llama(7168, 19200, 62, 56, 8, 32256),
    "deepseek-ai/deepseek-coder-6.7b-instruct": llama(4096, 11008, 32, 32, 32, 32256),
    "deepseek-ai/deepseek-coder-1.3b-instruct": llama(2048, 5504, 24, 16, 16, 32256),
}
