"""Model checkpoints for tests: the shipped tiny pair, and random-weight Llamas and Qwen3s saved to disk."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    OPTConfig,
    OPTForCausalLM,
    PreTrainedTokenizerFast,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

REPO = Path(__file__).resolve().parents[2]
TINY_PAIR = REPO / "assets" / "tiny-pycode"


VOCAB = 128


def char_tokenizer() -> PreTrainedTokenizerFast:
    """One token per printable ASCII character (and newline), <unk> for the rest, <eos> = 1."""
    chars = ["<unk>", "<eos>", "\n", *map(chr, range(32, 127))]
    backend = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(chars)}, merges=[], unk_token="<unk>"))
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token="<eos>")


ARCHITECTURES = {
    "llama": (LlamaConfig, LlamaForCausalLM),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM),
    "qwen3_moe": (Qwen3MoeConfig, Qwen3MoeForCausalLM),
}
# Qwen3-MoE: 4 experts, 2 a token, every layer sparse but the first (Qwen3-30B-A3B's 128 and 8, scaled down)
MOE = {"num_experts": 4, "num_experts_per_tok": 2, "mlp_only_layers": [0]}


def save_random_lm(
    path: Path, layers: int, hidden: int, vocab: int = VOCAB, seed: int = 0, arch: str = "llama"
) -> Path:
    """A random-weight causal LM (4 heads over 2 key heads) with the character tokenizer."""
    torch.manual_seed(seed)
    config_class, model_class = ARCHITECTURES[arch]
    config = config_class(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden // 4,
        max_position_embeddings=2048,  # room for a HumanEval prompt in characters (speculab refuses longer)
        **(MOE | {"moe_intermediate_size": hidden} if arch == "qwen3_moe" else {}),
    )
    model_class(config).save_pretrained(path)
    char_tokenizer().save_pretrained(path)
    return path


def save_random_opt(path: Path, layers: int, hidden: int, norm_before: bool = True, project: int = 0) -> Path:
    """A random-weight OPT (4 heads, LayerNorm, biases, learned positions) with the character tokenizer;
    `norm_before=False` and a `project` width below `hidden` give OPT-350m's shape (norms after each
    block, embeddings projected in and out)."""
    torch.manual_seed(5)
    config = OPTConfig(
        vocab_size=VOCAB,
        hidden_size=hidden,
        ffn_dim=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        max_position_embeddings=2048,
        do_layer_norm_before=norm_before,
        word_embed_proj_dim=project or hidden,
    )
    OPTForCausalLM(config).save_pretrained(path)
    char_tokenizer().save_pretrained(path)
    return path


def dflash_tensor_shapes(hidden: int, ffn: int, heads: int, kv_heads: int, head_dim: int, layers: int, n_ids: int):
    """{key: shape} of a DFlash checkpoint, in the authors' published layout (no embedding, no head)."""
    shapes = {"fc.weight": (hidden, n_ids * hidden), "hidden_norm.weight": (hidden,), "norm.weight": (hidden,)}
    for i in range(layers):
        p = f"layers.{i}."
        shapes |= {
            p + "self_attn.q_proj.weight": (heads * head_dim, hidden),
            p + "self_attn.k_proj.weight": (kv_heads * head_dim, hidden),
            p + "self_attn.v_proj.weight": (kv_heads * head_dim, hidden),
            p + "self_attn.o_proj.weight": (hidden, heads * head_dim),
            p + "self_attn.q_norm.weight": (head_dim,),
            p + "self_attn.k_norm.weight": (head_dim,),
            p + "mlp.gate_proj.weight": (ffn, hidden),
            p + "mlp.up_proj.weight": (ffn, hidden),
            p + "mlp.down_proj.weight": (hidden, ffn),
            p + "input_layernorm.weight": (hidden,),
            p + "post_attention_layernorm.weight": (hidden,),
        }
    return shapes


# a small DFlash2's settings (`dflash_config`): 2 taps, groups of 16 channels, rank 8, 4 candidates
DFLASH2 = {"conv_kernel_size": 2, "conv_group_size": 16, "selector_rank": 8, "selector_top_k": 4}


def dflash2_tensor_shapes(hidden: int, vocab: int, layers: int, settings: dict[str, int]):
    """{key: shape} of DFlash2's tensors beyond DFlash's, in vLLM's qwen3_dflash2 layout."""
    taps, groups = settings["conv_kernel_size"], hidden // settings["conv_group_size"]
    rank = settings["selector_rank"]
    shapes = {
        "candidate_selector.predecessor_codebook": (vocab, rank),
        "candidate_selector.successor_codebook": (vocab, rank),
        "candidate_selector.hidden_projection.weight": (rank, hidden),
    }
    for i in range(layers):
        for conv in ("attention_conv", "mlp_conv"):
            p = f"layers.{i}.{conv}."
            shapes |= {
                p + "base_kernel": (2, taps, hidden),
                p + "kernel_projection.weight": (2 * taps * groups, hidden),
            }
    return shapes


def save_random_dflash(
    path: Path,
    target: Path,
    layer_ids: list[int],
    block_size: int = 8,
    layers: int = 2,
    seed: int = 0,
    dflash2: dict[str, int] | None = None,
    **config: object,
) -> Path:
    """A random-weight DFlash drafter for the Llama checkpoint `target`, written tensor by tensor in the
    published layout (config.json with dflash_config; safetensors keys as the authors name them); with
    `dflash2` settings, a DFlash2 one (vLLM's layout). `config` overrides config.json keys (None removes one)."""
    from safetensors.torch import save_file

    t = json.loads((target / "config.json").read_text())
    head_dim = t.get("head_dim") or t["hidden_size"] // t["num_attention_heads"]
    gen = torch.Generator().manual_seed(seed)
    shapes = dflash_tensor_shapes(
        t["hidden_size"], 96, t["num_attention_heads"], t["num_key_value_heads"], head_dim, layers, len(layer_ids)
    )
    if dflash2 is not None:
        shapes |= dflash2_tensor_shapes(t["hidden_size"], t["vocab_size"], layers, dflash2)
    tensors = {
        key: (1 + 0.1 * torch.randn(shape, generator=gen))
        if len(shape) == 1
        else 0.08 * torch.randn(shape, generator=gen)
        for key, shape in shapes.items()
    }
    for key, shape in shapes.items():
        if key.endswith("base_kernel"):  # near the identity at tap 0, small taps before it
            tensors[key] = 0.3 * torch.randn(shape, generator=gen) + torch.eye(shape[1])[0][None, :, None]
        elif key.endswith("_codebook"):
            tensors[key] = torch.randn(shape, generator=gen)
    path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path / "model.safetensors"))
    body = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": t["hidden_size"],
        "intermediate_size": 96,
        "num_hidden_layers": layers,
        "num_attention_heads": t["num_attention_heads"],
        "num_key_value_heads": t["num_key_value_heads"],
        "head_dim": head_dim,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "vocab_size": t["vocab_size"],
        "max_position_embeddings": t["max_position_embeddings"],
        "tie_word_embeddings": False,
        "num_target_layers": t["num_hidden_layers"],
        "dflash_config": {"target_layer_ids": layer_ids, "block_size": block_size, "mask_token_id": 0}
        | (dflash2 or {}),
    }
    body = {key: value for key, value in (body | config).items() if value is not None}
    (path / "config.json").write_text(json.dumps(body))
    return path
