"""Train a tiny DFlash drafter for the tiny-pycode target, from the target's own hidden features.

The drafter is `speculab.models.dflash.DFlashDraft` (Qwen3 layers, no embedding or head of its
own: it uses the target's), run as `DFlashLM` runs it: the block [bonus, mask x (S - 1)]
attends to the context's projected target features and to itself. Each training window is
one target pass (its logits are the teacher, its hidden states at `--layer-ids` the
features) and several blocks at random anchors n in one drafter pass: block g sees the
features of tokens < n and its own S positions (the block drafter's training mask). The loss
is KL(p_target || q_j) at every mask position j, weighted by exp(-(j - 1) / gamma) as in the
DFlash recipe (early positions decide acceptance). Layers start from the target's last
layers. Seeded; CPU; data and loop are the tiny pair's (jobs/tiny_model_lib.py,
jobs/train_tiny.py). Ends with the held-out greedy acceptance: the mean number of leading
block positions whose argmax equals the target's.

    python jobs/train_dflash.py --out assets/tiny-pycode/dflash     # 3 layers, block 8, 2000 steps, 1 thread, ~31 min
    python jobs/train_dflash.py --smoke                              # < 60 s, temp dir
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import LlamaForCausalLM, Qwen3Config

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "platform"))
import tiny_model_lib as lib
from train_block_drafter import drafter_args, drafter_parser, prepare, save_stats, schedule, training_mask

from speculab.models.dflash import DFlashDraft


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    layers_help = "draft layers (initialised from the target's last ones)"
    block_help = "block size S: the bonus and S - 1 mask positions"
    p = drafter_parser(__doc__, "dflash", 3, layers_help, block_help, 2000)
    p.add_argument("--layer-ids", type=int, nargs="+", default=[1, 3, 5], help="target layers whose features it sees")
    p.add_argument("--gamma", type=float, default=4.0, help="loss weight decay over block positions")
    p.add_argument("--heldout-windows", type=int, default=64)
    p.set_defaults(block=8, blocks_per_window=64)  # many short blocks: more supervision of the first positions
    args = drafter_args(p, argv, "dflash")
    if args.smoke:
        args.heldout_windows = 4
    return args


def dflash_config(target: LlamaForCausalLM, args: argparse.Namespace, mask_token_id: int) -> Qwen3Config:
    """The target's width, heads and RoPE; `args.layers` Qwen3 layers; the DFlash keys."""
    t = target.config
    return Qwen3Config(
        vocab_size=t.vocab_size,
        hidden_size=t.hidden_size,
        intermediate_size=t.intermediate_size,
        num_hidden_layers=args.layers,
        num_attention_heads=t.num_attention_heads,
        num_key_value_heads=t.num_key_value_heads,
        head_dim=t.head_dim,
        rms_norm_eps=t.rms_norm_eps,
        rope_parameters=t.rope_parameters,
        max_position_embeddings=t.max_position_embeddings,
        tie_word_embeddings=False,
        num_target_layers=t.num_hidden_layers,
        dflash_config={"target_layer_ids": args.layer_ids, "block_size": args.block, "mask_token_id": mask_token_id},
    )


def init_from_target(draft: DFlashDraft, target: LlamaForCausalLM) -> list[int]:
    """Copy the target's last layers (same names but the q/k norms, which start at one)."""
    n_t = target.config.num_hidden_layers
    picks = list(range(n_t - len(draft.layers), n_t))
    src = target.state_dict()
    state = {
        key: src[f"model.layers.{picks[int(key.split('.')[1])]}.{key.split('.', 2)[2]}"]
        for key in draft.state_dict()
        if key.startswith("layers.") and "_norm." not in key.split("self_attn.")[-1]
    }
    draft.load_state_dict(state, strict=False)
    return picks


def features_and_teacher(target: LlamaForCausalLM, context: torch.Tensor, layer_ids: list[int]):
    """(features [B, T, n * hidden] = hidden_states[id + 1] concatenated, teacher logits [B, T, V])."""
    with torch.no_grad():
        out = target(context, output_hidden_states=True)
    return torch.cat([out.hidden_states[i + 1] for i in layer_ids], dim=-1), out.logits.float()


def block_logits(
    draft: DFlashDraft, head: torch.Tensor, embed: torch.Tensor, window: torch.Tensor, features, anchors, block, mask_id
) -> tuple[torch.Tensor, torch.Tensor]:
    """(draft logits [B, G, S - 1, V] at the mask positions, positions [B, G, S] of each block)."""
    B, T = features.shape[:2]
    G = anchors.shape[1]
    positions = anchors[..., None] + torch.arange(block)  # [B, G, S]
    tokens = torch.full((B, G, block), mask_id)
    tokens[..., 0] = window.gather(1, anchors)
    context = draft.context_kv(features, torch.arange(T).expand(B, T))
    allowed = training_mask(T, anchors, block - 1)[:, :, T:]  # block rows: context < anchor, own block
    hidden = draft(F.embedding(tokens.reshape(B, -1), embed), positions.reshape(B, -1), context, allowed)
    return (hidden.reshape(B, G, block, -1)[:, :, 1:] @ head.T), positions


def teacher_at(teacher: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """p logits [B, G, S - 1, V] for the tokens after each bonus: the target at position n + j - 1."""
    source = positions[..., :-1].reshape(positions.shape[0], -1)
    return teacher.gather(1, source[..., None].expand(-1, -1, teacher.shape[-1])).reshape(
        *positions.shape[:2], positions.shape[2] - 1, -1
    )


def dflash_loss(draft, target, args: argparse.Namespace, mask_id: int, gen: torch.Generator):
    embed, head = target.model.embed_tokens.weight, target.lm_head.weight
    weights = torch.tensor([math.exp(-j / args.gamma) for j in range(args.block - 1)])
    weights = weights / weights.sum()

    def fn(window: torch.Tensor) -> torch.Tensor:
        B, T = window.shape[0], window.shape[1] - 1
        context = window[:, :T]
        features, teacher = features_and_teacher(target, context, args.layer_ids)
        anchors = torch.randint(1, T - args.block + 1, (B, args.blocks_per_window), generator=gen)
        q_logits, positions = block_logits(draft, head, embed, context, features, anchors, args.block, mask_id)
        p_logits = teacher_at(teacher, positions)
        per_position = torch.stack(
            [lib.kl_target_to_draft(p_logits[:, :, j], q_logits[:, :, j]) for j in range(args.block - 1)]
        )
        return (weights * per_position).sum()

    return fn


@torch.no_grad()
def heldout_acceptance(draft, target, stream: torch.Tensor, args: argparse.Namespace, mask_id: int) -> float:
    """Mean leading block positions whose draft argmax equals the target's (T = 0 acceptance, bonus excluded)."""
    embed, head = target.model.embed_tokens.weight, target.lm_head.weight
    windows = lib.eval_windows(stream, args.seq_len, args.heldout_windows)
    gen = torch.Generator().manual_seed(1)
    accepted = []
    for window in windows.split(args.batch):
        features, teacher = features_and_teacher(target, window, args.layer_ids)
        T = window.shape[1]
        anchors = torch.randint(1, T - args.block + 1, (window.shape[0], args.blocks_per_window), generator=gen)
        q_logits, positions = block_logits(draft, head, embed, window, features, anchors, args.block, mask_id)
        agree = q_logits.argmax(-1) == teacher_at(teacher, positions).argmax(-1)  # [B, G, S - 1]
        accepted.append(agree.long().cumprod(-1).sum(-1).float().flatten())
    return float(torch.cat(accepted).mean())


def save_dflash(draft: DFlashDraft, path: Path) -> None:
    """The published layout: config.json and model.safetensors (fp16), nothing else."""
    path.mkdir(parents=True, exist_ok=True)
    state = {key: value.detach().to(torch.float16).contiguous() for key, value in draft.state_dict().items()}
    save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})
    config = draft.config.to_dict() | {"architectures": ["DFlashDraftModel"], "dtype": "float16"}
    (path / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    setup = prepare(args)
    tok, target = setup.tok, setup.target
    draft = DFlashDraft(dflash_config(target, args, tok.pad_token_id))
    picks = init_from_target(draft, target)
    gen = torch.Generator().manual_seed(args.seed)
    loss = dflash_loss(draft, target, args, tok.pad_token_id, gen)
    stats = lib.run_loop(draft, loss, lib.encode_stream(tok, setup.train_texts), schedule(args), gen, print, "dflash")
    heldout = lib.encode_stream(tok, setup.heldout_texts)
    stats["heldout_greedy_accepted"] = heldout_acceptance(draft, target, heldout, args, tok.pad_token_id)
    save_dflash(draft, args.out)
    stats |= {"init_from_target_layers": picks, "target_layer_ids": args.layer_ids}
    save_stats(
        setup, args, stats, draft, "python jobs/train_dflash.py " + " ".join(sys.argv[1:] if argv is None else argv)
    )


if __name__ == "__main__":
    main()
