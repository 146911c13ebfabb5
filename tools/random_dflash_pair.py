"""Write a random-weight Qwen3 target and DFlash drafter in the layouts their authors publish.

    python tools/random_dflash_pair.py OUT                   # Qwen3-8B shape + a DFlash-b16 drafter (~17 GB bf16)
    python tools/random_dflash_pair.py OUT --shape small     # the same layout, a few narrow layers (the CPU suite's)
    python tools/random_dflash_pair.py OUT --dflash2         # a DFlash2 drafter instead (vLLM's qwen3_dflash2 layout)
    speculab model=qwen3-8b_dflash model.target_path=OUT/target model.draft_path=OUT/draft algorithm=ddtree

The target is what `Qwen3ForCausalLM.save_pretrained` of transformers 4.x writes: config.json with
`rope_theta` at the top level, safetensors shards of at most --shard-gb with
`model.safetensors.index.json`, keys `model.layers.{i}.self_attn.{q,k,v,o}_proj`, `q_norm`,
`k_norm`, ... and an untied `lm_head` (Qwen3-8B's). The drafter is DFlash-b16-shaped: five Qwen3
layers of the target's width reading target layers spread by `num_target_layers` (1, 9, 17, 25,
33 of 36), `block_size` 16 at the top level (as checkpoints from transformers 4.x carry it),
`mask_token_id` 151669 in `dflash_config`, no embedding and no lm_head. Every key and shape comes
from the modules themselves, built on the meta device. `--dflash2` writes a DFlash2 drafter: the
published DFlash2 settings in `dflash_config` (`block_size` 8, `conv_kernel_size` 2,
`conv_group_size` 16, `selector_rank` 256, `selector_top_k` 16) and its tensors
(`layers.{i}.{attention,mlp}_conv.*`, `candidate_selector.*`). The tokenizer is the shipped tiny pair's
(ids far below the vocabulary): decoding exercises the real code path, not the real text.
The weights are random, so the drafter's acceptance is near zero: this pair is for systems
figures (memory, time per round, tree sizes), never for acceptance.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import Qwen3Config, Qwen3ForCausalLM

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "platform"))

from speculab.models.dflash import DFlashDraft  # noqa: E402
from speculab.models.dflash_layout import spread_layer_ids  # noqa: E402

VOCAB = 151936  # Qwen3's
MASK_TOKEN_ID = 151669  # the DFlash drafters' mask token (added after Qwen3's special tokens)
BLOCK_SIZE = 16
# the published DFlash2 drafters' settings (dflash_config)
DFLASH2 = {"block_size": 8, "conv_kernel_size": 2, "conv_group_size": 16, "selector_rank": 256, "selector_top_k": 16}
TOKENIZER = REPO / "assets" / "tiny-pycode" / "target"


@dataclass(frozen=True)
class Shape:
    hidden: int
    ffn: int
    layers: int  # target layers
    heads: int
    kv_heads: int
    head_dim: int
    draft_layers: int


SHAPES = {"8b": Shape(4096, 12288, 36, 32, 8, 128, 5), "small": Shape(64, 128, 6, 4, 2, 16, 2)}


def target_config(shape: Shape) -> dict:
    """Qwen3-8B's config.json (transformers 4.x keys) at ``shape``."""
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": shape.hidden,
        "intermediate_size": shape.ffn,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "hidden_act": "silu",
        "attention_bias": False,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "max_position_embeddings": 40960,
        "use_sliding_window": False,
        "vocab_size": VOCAB,
        "tie_word_embeddings": False,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "torch_dtype": "bfloat16",
    }


def draft_config(shape: Shape, dflash2: bool = False) -> dict:
    """A DFlash-b16 drafter's config.json for the target at ``shape``, or a DFlash2 one's."""
    return target_config(shape) | {
        "architectures": ["DFlashDraftModel"],
        "num_hidden_layers": shape.draft_layers,
        "num_target_layers": shape.layers,
        "block_size": BLOCK_SIZE,
        "dflash_config": {
            "mask_token_id": MASK_TOKEN_ID,
            "target_layer_ids": spread_layer_ids(shape.layers, shape.draft_layers),
        }
        | (DFLASH2 if dflash2 else {}),
    }


def meta_shapes(module: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    """{checkpoint key: shape} of a module's persistent state (built on the meta device: no memory)."""
    return {key: tuple(tensor.shape) for key, tensor in module.state_dict().items()}


def random_tensor(shape: tuple[int, ...], gen: torch.Generator, dtype: torch.dtype, device: str) -> torch.Tensor:
    """Norm weights near one, matrices at transformers' initializer scale (0.02)."""
    noise = torch.randn(shape, generator=gen, device=device)
    return (1 + 0.1 * noise if len(shape) == 1 else 0.02 * noise).to(dtype).cpu()


def plan_shards(shapes: dict[str, tuple[int, ...]], itemsize: int, shard_bytes: int) -> list[list[str]]:
    """Keys in order, grouped into shards of at most ``shard_bytes`` (a single larger tensor gets its own)."""
    groups: list[list[str]] = [[]]
    size = 0
    for key, shape in shapes.items():
        nbytes = torch.Size(shape).numel() * itemsize
        if groups[-1] and size + nbytes > shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append(key)
        size += nbytes
    return groups


def write_shards(
    out: Path, shapes: dict[str, tuple[int, ...]], dtype: torch.dtype, device: str, seed: int, shard_bytes: int
) -> None:
    """Random tensors for ``shapes`` in shards named and indexed as `save_pretrained` does (one
    `model.safetensors` when they fit in one); one shard in memory at a time."""
    gen = torch.Generator(device=device).manual_seed(seed)
    groups = plan_shards(shapes, dtype.itemsize, shard_bytes)
    weight_map = {}
    for number, keys in enumerate(groups, start=1):
        name = f"model-{number:05d}-of-{len(groups):05d}.safetensors" if len(groups) > 1 else "model.safetensors"
        save_file(
            {key: random_tensor(shapes[key], gen, dtype, device) for key in keys}, str(out / name), {"format": "pt"}
        )
        weight_map |= dict.fromkeys(keys, name)
    if len(groups) == 1:
        return
    total = sum(torch.Size(shape).numel() for shape in shapes.values()) * dtype.itemsize
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def write_pair(
    out: Path, shape: Shape, dtype: torch.dtype, device: str, shard_bytes: int, dflash2: bool = False
) -> tuple[Path, Path]:
    """(target dir, draft dir) under ``out``."""
    target, draft = out / "target", out / "draft"
    for path, config, module_of, seed in (
        (target, target_config(shape), Qwen3ForCausalLM, 1),
        (draft, draft_config(shape, dflash2), DFlashDraft, 2),
    ):
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        with torch.device("meta"):
            module = module_of(Qwen3Config.from_dict(config))
        write_shards(path, meta_shapes(module), dtype, device, seed, shard_bytes)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOKENIZER / name, target / name)
    return target, draft


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--shape", choices=tuple(SHAPES), default="8b")
    parser.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default="bfloat16")
    parser.add_argument("--device", default="cpu", help="where the random numbers are drawn (cuda: much faster)")
    parser.add_argument("--shard-gb", type=float, default=4.0)
    parser.add_argument("--dflash2", action="store_true", help="a DFlash2 drafter (vLLM's qwen3_dflash2 layout)")
    args = parser.parse_args(argv)
    target, draft = write_pair(
        args.out, SHAPES[args.shape], getattr(torch, args.dtype), args.device, int(args.shard_gb * 2**30), args.dflash2
    )
    print(f"model.target_path={target} model.draft_path={draft}")


if __name__ == "__main__":
    main()
