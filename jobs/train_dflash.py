"""Train a tiny DFlash drafter for the tiny-pycode target, from the target's own hidden features.

The drafter is `speculab.models.dflash.DFlashDraft` (Qwen3 layers, no embedding or head of its
own: it uses the target's), run as `DFlashLM` runs it: the block [bonus, mask x (S - 1)]
attends to the context's projected target features and to itself.

Data: the target's own greedy continuations of `--prefix`-token corpus windows (`--data
generated`, the default), the context a T = 0 drafter sees at decode time; there the block
to guess is a function of the context, while on corpus text (`--data text`) every position
past the first is the corpus's token, not the target's. `--sampled F` continues a fraction F
by sampling at T = 1 instead (a T = 1 decode's context; cross-entropy on sampled tokens fits
the target's distribution, in expectation). Each training window is one target pass (its
hidden states at `--layer-ids` are the features, its logits the KL teacher) and several
blocks at random anchors n in the generated part, in one drafter pass: block g sees the
features of tokens < n and its own S positions (the block drafter's training mask).

Loss at every mask position j, weighted by exp(-(j - 1) / gamma) as in the DFlash recipe
(early positions decide acceptance): cross-entropy on the window's token n + j (`--loss ce`,
the default: on generated data, the target's argmax) or KL(p_target || q_j) (`--loss kl`).
Layers start from the target's last layers. Seeded; CPU; data and loop are the tiny pair's
(jobs/tiny_model_lib.py, jobs/train_tiny.py). Ends with the held-out greedy acceptance: the
mean number of leading block positions whose argmax equals the target's, on continuations of
held-out files.

`--dflash2` trains a DFlash2 drafter (vLLM's qwen3_dflash2 layout: a dynamic block convolution
around each layer's attention and MLP, and a candidate selector), from `--init-from` (a DFlash
checkpoint: its layers, with the convolutions at the identity and the selector scoring by the logits
alone, so training starts from that drafter). Its loss adds the selector's: at every mask position,
cross-entropy over the top K candidates of the draft's logits for the window's token there, scored
given the window's token before it (teacher forcing), where that token is among the candidates.

    python jobs/train_dflash.py --out assets/tiny-pycode/dflash     # 3 layers, block 8, 2000 steps, 1 thread, ~35 min
    python jobs/train_dflash.py --dflash2 --init-from assets/tiny-pycode/dflash --out assets/tiny-pycode/dflash2 \
        --steps 600 --minutes 30 --generations 800 --lr 5e-4 --no-bf16 --threads 2   # ~32 min (an AVX2 CPU)
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
from train_parallel_drafter import drafter_args, drafter_parser, prepare, save_stats, schedule, training_mask

from speculab.drafting.selector import tokens_of, walk
from speculab.models.dflash import DFlashDraft, load_dflash, selector_law


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    layers_help = "draft layers (initialised from the target's last ones)"
    block_help = "block size S: the bonus and S - 1 mask positions"
    p = drafter_parser(__doc__, "dflash", 3, layers_help, block_help, 2000)
    p.add_argument("--layer-ids", type=int, nargs="+", default=[2, 4, 6], help="target layers whose features it sees")
    p.add_argument("--gamma", type=float, default=4.0, help="loss weight decay over block positions")
    p.add_argument("--heldout-windows", type=int, default=64)
    data_help = "the target's own greedy continuations of corpus prefixes (the T = 0 decoding context) or corpus text"
    p.add_argument("--data", choices=["generated", "text"], default="generated", help=data_help)
    p.add_argument("--generations", type=int, default=4000, help="continuations made for --data generated")
    p.add_argument("--sampled", type=float, default=0.0, help="fraction of them sampled at T = 1 (the rest greedy)")
    loss_help = "cross-entropy on the window's next tokens (the target's argmax on generated data) or KL(p_target || q)"
    p.add_argument("--loss", choices=["ce", "kl"], default="ce", help=loss_help)
    p.add_argument("--prefix", type=int, default=128, help="corpus tokens before each continuation")
    p.add_argument(
        "--dflash2", action="store_true", help="a DFlash2 drafter: block convolutions and a candidate selector"
    )
    p.add_argument("--init-from", type=Path, help="a DFlash checkpoint whose weights it starts from")
    p.add_argument("--selector-rank", type=int, default=32)
    p.add_argument("--selector-top-k", type=int, default=8)
    p.set_defaults(block=8, blocks_per_window=64)  # many short blocks: more supervision of the first positions
    args = drafter_args(p, argv, "dflash")
    if args.smoke:
        args.heldout_windows, args.generations, args.prefix = 4, 8, 32
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
        dflash_config={"target_layer_ids": args.layer_ids, "block_size": args.block, "mask_token_id": mask_token_id}
        | (dflash2_settings(args) if args.dflash2 else {}),
    )


def dflash2_settings(args: argparse.Namespace) -> dict[str, int]:
    """DFlash2's `dflash_config` keys: 2 taps in groups of 16 channels (the published drafters')."""
    return {
        "conv_kernel_size": 2,
        "conv_group_size": 16,
        "selector_rank": args.selector_rank,
        "selector_top_k": args.selector_top_k,
    }


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


def init_from_dflash(draft: DFlashDraft, path: Path) -> list[int]:
    """Start from a trained DFlash drafter's weights (a DFlash2's convolutions and selector keep their start)."""
    draft.load_state_dict(load_dflash(path).state_dict(), strict=False)
    return []


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
    drafted = hidden.reshape(B, G, block, -1)[:, :, 1:]  # [B, G, S - 1, hidden]
    return drafted @ head.T, positions, drafted


def selector_loss(draft: DFlashDraft, q_logits, drafted, labels, previous, top_k: int) -> torch.Tensor:
    """[S - 1] cross-entropy of the selector over each position's top K candidates for its label, given
    the label before it; positions whose label is not a candidate add nothing."""
    selector = draft.candidate_selector
    candidates = q_logits.detach().topk(top_k, dim=-1).indices  # [B, G, S - 1, K]
    unary = q_logits.gather(-1, candidates).float()
    h = F.linear(drafted, selector.hidden_projection.weight)  # [B, G, S - 1, r]
    pred = F.embedding(previous, selector.predecessor_codebook) * h  # [B, G, S - 1, r]
    succ = F.embedding(candidates, selector.successor_codebook)  # [B, G, S - 1, K, r]
    scores = unary + (succ @ pred[..., None])[..., 0].float()  # [B, G, S - 1, K]
    hit = candidates == labels[..., None]
    present = hit.any(-1)
    per = F.cross_entropy(scores.permute(0, 3, 1, 2), hit.long().argmax(-1), reduction="none")  # [B, G, S - 1]
    return (per * present).sum((0, 1)) / present.sum((0, 1)).clamp(min=1)


def teacher_at(teacher: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """p logits [B, G, S - 1, V] for the tokens after each bonus: the target at position n + j - 1."""
    source = positions[..., :-1].reshape(positions.shape[0], -1)
    return teacher.gather(1, source[..., None].expand(-1, -1, teacher.shape[-1])).reshape(
        *positions.shape[:2], positions.shape[2] - 1, -1
    )


def first_anchor(args: argparse.Namespace) -> int:
    """The first bonus position blocks may start at: the first generated token, or 1 on text."""
    return args.prefix if args.data == "generated" else 1


@torch.no_grad()
def target_generations(
    target: LlamaForCausalLM, stream: torch.Tensor, args: argparse.Namespace, n: int, seed: int, sampled: int = 0
) -> torch.Tensor:
    """[n, seq_len + 1]: random `args.prefix`-token windows of the stream, each continued by the
    target (transformers' generate, eos suppressed so every row is full): greedily, or for the last
    `sampled` rows by sampling its full distribution at T = 1 (the context of a T = 1 decode)."""
    prefixes = lib.sample_windows(stream, n, args.prefix, torch.Generator().manual_seed(seed))
    torch.manual_seed(seed)  # generate samples from torch's global generator
    new = args.seq_len + 1 - args.prefix
    rows = []
    for part, options in (
        (prefixes[: n - sampled], {"do_sample": False}),
        (prefixes[n - sampled :], {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0}),
    ):
        for chunk in part.split(128) if len(part) else ():  # split() of an empty part yields one empty chunk
            rows.append(
                target.generate(
                    chunk,
                    attention_mask=torch.ones_like(chunk),
                    max_new_tokens=new,
                    min_new_tokens=new,
                    pad_token_id=target.config.pad_token_id,
                    **options,
                )
            )
            print(f"[dflash] generated {sum(map(len, rows))}/{n} continuations", flush=True)
    return torch.cat(rows)


def dflash_loss(draft, target, args: argparse.Namespace, mask_id: int, gen: torch.Generator):
    embed, head = target.model.embed_tokens.weight, target.lm_head.weight
    weights = torch.tensor([math.exp(-j / args.gamma) for j in range(args.block - 1)])
    weights = weights / weights.sum()

    def fn(window: torch.Tensor) -> torch.Tensor:
        B, T = window.shape[0], window.shape[1] - 1
        context = window[:, :T]
        features, teacher = features_and_teacher(target, context, args.layer_ids)
        anchors = torch.randint(first_anchor(args), T - args.block + 1, (B, args.blocks_per_window), generator=gen)
        q_logits, positions, drafted = block_logits(draft, head, embed, context, features, anchors, args.block, mask_id)
        labels = context.gather(1, positions[..., 1:].reshape(B, -1)).view(q_logits.shape[:-1])  # [B, G, S - 1]
        if args.loss == "ce":  # the window's tokens n + j: on generated data, the target's argmax
            per_position = F.cross_entropy(q_logits.float().permute(0, 3, 1, 2), labels, reduction="none").mean((0, 1))
        else:
            p_logits = teacher_at(teacher, positions)
            per_position = torch.stack(
                [lib.kl_target_to_draft(p_logits[:, :, j], q_logits[:, :, j]) for j in range(args.block - 1)]
            )
        if args.dflash2:
            previous = context.gather(1, positions[..., :-1].reshape(B, -1)).view(labels.shape)  # the token before
            per_position = per_position + selector_loss(draft, q_logits, drafted, labels, previous, args.selector_top_k)
        return (weights * per_position).sum()

    return fn


@torch.no_grad()
def heldout_acceptance(draft, target, windows: torch.Tensor, args: argparse.Namespace, mask_id: int) -> float:
    """Mean leading block positions whose draft argmax equals the target's (T = 0 acceptance, bonus
    excluded), over uniform random anchors: above the per-round mean of a decode, whose rounds
    start more often where drafts fail (a full accept skips 7 positions, a miss 1)."""
    embed, head = target.model.embed_tokens.weight, target.lm_head.weight
    gen = torch.Generator().manual_seed(1)
    accepted = []
    for window in windows.split(args.batch):
        features, teacher = features_and_teacher(target, window, args.layer_ids)
        T = window.shape[1]
        anchors = torch.randint(
            first_anchor(args), T - args.block + 1, (window.shape[0], args.blocks_per_window), generator=gen
        )
        q_logits, positions, drafted = block_logits(draft, head, embed, window, features, anchors, args.block, mask_id)
        guess = q_logits.argmax(-1) if not args.dflash2 else best_paths(draft, q_logits, drafted, window, anchors, args)
        agree = guess == teacher_at(teacher, positions).argmax(-1)  # [B, G, S - 1]
        accepted.append(agree.long().cumprod(-1).sum(-1).float().flatten())
    return float(torch.cat(accepted).mean())


def best_paths(draft: DFlashDraft, q_logits, drafted, window, anchors, args: argparse.Namespace) -> torch.Tensor:
    """[B, G, S - 1] the selector's best path of every block, walked from its bonus (DFlash2 at T = 0)."""
    B, G, L, V = q_logits.shape
    root = window.gather(1, anchors).reshape(B * G)
    hidden, logits = drafted.reshape(B * G, L, -1), q_logits.reshape(B * G, L, V)
    law = selector_law(draft.candidate_selector, hidden, logits, root, args.selector_top_k, 0.0)  # one-hot rows
    indices, _ = walk(law, torch.zeros(B * G, 1, L, dtype=torch.float64))
    return tokens_of(law, indices)[:, 0].reshape(B, G, L)


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
    picks = init_from_target(draft, target) if args.init_from is None else init_from_dflash(draft, args.init_from)
    gen = torch.Generator().manual_seed(args.seed)
    loss = dflash_loss(draft, target, args, tok.pad_token_id, gen)
    train, heldout = lib.encode_stream(tok, setup.train_texts), lib.encode_stream(tok, setup.heldout_texts)
    if args.data == "generated":
        train = target_generations(
            target, train, args, args.generations, args.seed, round(args.sampled * args.generations)
        )
        heldout = target_generations(target, heldout, args, args.heldout_windows, args.seed + 1)[:, :-1]
    else:
        heldout = lib.eval_windows(heldout, args.seq_len, args.heldout_windows)
    stats = lib.run_loop(draft, loss, train, schedule(args), gen, print, "dflash")
    stats["heldout_greedy_accepted"] = heldout_acceptance(draft, target, heldout, args, tok.pad_token_id)
    save_dflash(draft, args.out)
    stats |= {"init_from_target_layers": picks, "target_layer_ids": args.layer_ids, "data": args.data}
    if args.data == "generated":
        stats |= {"generations": args.generations, "sampled": args.sampled, "prefix": args.prefix}
    save_stats(
        setup, args, stats, draft, "python jobs/train_dflash.py " + " ".join(sys.argv[1:] if argv is None else argv)
    )


if __name__ == "__main__":
    main()
