"""Train the parallel drafter (a one-pass block drafter, context only) for the tiny-pycode target.

The drafter is a small Llama (initialised from the target's embeddings and first layers)
run as `speculab.models.parallel.ParallelDraftLM` runs it: a causal context, then the block
[bonus, mask x S] with bidirectional attention inside the block. Each training window holds
several blocks at random anchors n in one forward pass (a 4-D mask keeps the context causal
and lets block g see the context before its bonus and its own block only). The loss is
KL(p_target || q_j) at every mask position j, with p_target the target's teacher-forced
next-token distribution for the token j steps after the bonus. Seeded; CPU; the data
helpers are the tiny pair's (jobs/tiny_model_lib.py).

    python jobs/train_parallel_drafter.py --out assets/tiny-pycode/parallel       # 1300 steps, 1 thread, ~28 min
    python jobs/train_parallel_drafter.py --smoke                                    # < 60 s, temp dir
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM, PreTrainedTokenizerFast

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiny_model_lib as lib
from train_tiny import load_corpus, save_pair

TARGET = Path("assets/tiny-pycode/target")


def drafter_parser(doc: str | None, name: str, layers: int, layers_help: str, block_help: str, steps: int):
    """The options of a tiny drafter's training (this script's and jobs/train_dflash.py's)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help=f"output dir (default assets/tiny-pycode/{name}; a temp dir with --smoke)")
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--layers", type=int, default=layers, help=layers_help)
    p.add_argument("--block", type=int, default=16, help=block_help)
    p.add_argument("--blocks-per-window", type=int, default=12)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=steps)
    p.add_argument(
        "--minutes",
        type=float,
        default=0.0,
        help="wall-time budget (0 = steps only, so the result does not depend on the machine's speed)",
    )
    p.add_argument("--lr", type=float, default=2e-3)
    # bf16 autocast pays on a CPU with bf16 instructions (AVX-512 BF16, AMX); on one without (AVX2) a step
    # ran 6x slower than in fp32 (train_dflash.py, AMD EPYC, 2026-12-02)
    p.add_argument("--no-bf16", action="store_true", help="train in fp32 (default: bf16 autocast)")
    p.add_argument("--max-file-bytes", type=int, default=300_000)
    p.add_argument("--heldout-every", type=int, default=50)
    return p


def drafter_args(p: argparse.ArgumentParser, argv: list[str] | None, name: str) -> argparse.Namespace:
    """Parsed, with --smoke's tiny run and the default output dir applied."""
    args = p.parse_args(argv)
    if args.smoke:
        args.steps, args.minutes, args.batch, args.seq_len = 6, 0.0, 2, 64
    if args.out is None:
        args.out = Path(tempfile.mkdtemp(prefix=f"{name}-")) if args.smoke else Path(f"assets/tiny-pycode/{name}")
    return args


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    layers_help = "drafter layers (copied from the target's first ones)"
    p = drafter_parser(__doc__, "parallel", 2, layers_help, "mask positions per block (largest L)", 1300)
    return drafter_args(p, argv, "parallel")


def block_drafter(target: LlamaForCausalLM, layers: int) -> LlamaForCausalLM:
    """A `layers`-deep copy of the target's embeddings, first layers, final norm and head."""
    config = type(target.config).from_dict({**target.config.to_dict(), "num_hidden_layers": layers})
    drafter = LlamaForCausalLM(config)
    lib.init_draft_from_target(drafter, target)
    return drafter


# anchors [B, G] bonus positions; returns [B, 1, T + G*(S+1), T + G*(S+1)] bool (True = attend)
def training_mask(T: int, anchors: torch.Tensor, block: int) -> torch.Tensor:
    """Causal context; block g sees context positions < its anchor and its own S+1 positions."""
    B, G = anchors.shape
    W = T + G * (block + 1)
    allowed = torch.zeros(B, W, W, dtype=torch.bool)
    allowed[:, :T, :T] = torch.ones(T, T, dtype=torch.bool).tril()
    cols = torch.arange(T)
    for g in range(G):
        rows = slice(T + g * (block + 1), T + (g + 1) * (block + 1))
        allowed[:, rows, :T] = (cols[None, :] < anchors[:, g, None])[:, None, :]
        allowed[:, rows, rows] = True
    return allowed[:, None]


def block_loss(
    drafter: LlamaForCausalLM, target: LlamaForCausalLM, args: argparse.Namespace, mask_id: int, gen: torch.Generator
):
    S, G = args.block, args.blocks_per_window

    def fn(window: torch.Tensor) -> torch.Tensor:
        B, T = window.shape[0], window.shape[1] - 1
        context = window[:, :T]
        with torch.no_grad():
            teacher = target(context).logits.float()  # [B, T, V]: position t predicts t+1
        anchors = torch.randint(1, T - S, (B, G), generator=gen)  # bonus at n, masks predict n+1..n+S
        steps = torch.arange(S + 1)
        positions = anchors[..., None] + steps  # [B, G, S+1]
        block_tokens = torch.full((B, G, S + 1), mask_id)
        block_tokens[..., 0] = context.gather(1, anchors)
        ids = torch.cat([context, block_tokens.reshape(B, -1)], dim=1)
        pos = torch.cat([torch.arange(T).expand(B, T), positions.reshape(B, -1)], dim=1)
        allowed = training_mask(T, anchors, S)
        bias = torch.zeros(allowed.shape).masked_fill_(~allowed, torch.finfo(torch.float32).min)
        logits = drafter(input_ids=ids, attention_mask=bias, position_ids=pos).logits[:, T:]
        q_logits = logits.reshape(B, G, S + 1, -1)[:, :, 1:]  # mask j predicts token n+j
        source = (positions[..., 1:] - 1).reshape(B, G * S)  # teacher position predicting n+j
        p_logits = teacher.gather(1, source[..., None].expand(-1, -1, teacher.shape[-1])).reshape(q_logits.shape)
        return lib.kl_target_to_draft(p_logits.flatten(0, 2), q_logits.flatten(0, 2))

    return fn


@dataclass
class Setup:
    """What a drafter's training starts from (this script's and jobs/train_dflash.py's)."""

    tok: PreTrainedTokenizerFast
    target: LlamaForCausalLM  # frozen, fp32
    train_texts: list[str]
    heldout_texts: list[str]
    corpus: dict
    start: float  # perf_counter at the start


def prepare(args: argparse.Namespace) -> Setup:
    """Threads and seed, the tiny target (frozen) and its tokenizer, the corpus split."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    start = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(TARGET)
    target = AutoModelForCausalLM.from_pretrained(TARGET, dtype=torch.float32).eval()
    for param in target.parameters():
        param.requires_grad_(False)
    train_texts, heldout_texts, corpus = load_corpus(
        argparse.Namespace(max_file_bytes=args.max_file_bytes, heldout_every=args.heldout_every, smoke=args.smoke)
    )
    return Setup(tok, target, train_texts, heldout_texts, corpus, start)


def schedule(args: argparse.Namespace) -> lib.Schedule:
    return lib.Schedule(
        args.steps,
        args.batch,
        args.seq_len,
        args.lr,
        warmup=min(100, args.steps // 10 + 1),
        bf16=not args.no_bf16,
        max_seconds=args.minutes * 60,
    )


def save_stats(setup: Setup, args: argparse.Namespace, stats: dict, drafter: torch.nn.Module, command: str) -> None:
    """train_stats.json beside the weights: the loop's numbers, the run's settings and its command."""
    stats |= {
        "layers": args.layers,
        "block": args.block,
        "seed": args.seed,
        "python": setup.corpus["python"],
        "params": lib.num_params(drafter),
        "wall_min": (time.perf_counter() - setup.start) / 60,
        "command": command,
    }
    (args.out / "train_stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    print(f"saved {args.out}: {stats}", flush=True)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    setup = prepare(args)
    tok, target = setup.tok, setup.target
    drafter = block_drafter(target, args.layers)
    gen = torch.Generator().manual_seed(args.seed)
    stats = lib.run_loop(
        drafter,
        block_loss(drafter, target, args, tok.pad_token_id, gen),
        lib.encode_stream(tok, setup.train_texts),
        schedule(args),
        gen,
        lambda msg: print(msg, flush=True),
        "block",
    )
    args.out.mkdir(parents=True, exist_ok=True)
    save_pair(drafter, tok, args.out, torch.float16)
    (args.out / "block.json").write_text(
        json.dumps({"mask_token_id": tok.pad_token_id, "block_size": args.block}) + "\n"
    )
    command = "python jobs/train_parallel_drafter.py " + " ".join(sys.argv[1:] if argv is None else argv)
    save_stats(setup, args, stats, drafter, command)


if __name__ == "__main__":
    main()
