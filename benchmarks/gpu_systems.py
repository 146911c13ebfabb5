"""Systems costs at realistic shapes, with random weights: no downloads.

    python benchmarks/gpu_systems.py            # GPU: 8B-shaped Llama target, 0.6B-shaped draft, bf16
    python benchmarks/gpu_systems.py --small    # small shapes (the default without a GPU), float32

Three tables, like the GBV paper's App. I breakdown:
1. target pass time against tree size (1..512 nodes, random tree shapes, one forward pass of
   the project's TreeLM with tree attention over a cached context), with the KV cache size;
2. draft time for K i.i.d. paths of L tokens, and per path;
3. the engine's own decode loop (block / GBV verification, K = 1..4, L = 8): share of wall time
   in draft, target and verification, tree size and KV peaks.
Random weights make the draft disagree with the target, so few tokens are accepted: the
time split per round is meaningful, block efficiency is not. On a GPU every timed phase ends
with torch.cuda.synchronize. Models are written to a temporary directory and loaded through
the same path as real checkpoints.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.utils import logging as hf_logging

from speculab.algorithms import get_verifier
from speculab.drafting.iid import sample_iid_paths
from speculab.drafting.sampling import SamplingParams
from speculab.drafting.tree import DraftTree
from speculab.engine import DecodeSettings, decode
from speculab.models import DraftModel, LMSpec, TreeTarget
from speculab.tracking.metrics import summarize

# (hidden, layers, heads, kv heads, intermediate): Llama-3-8B's shape, a 0.6B-class draft, and CPU-sized ones.
SHAPES = {
    "gpu": ((4096, 32, 32, 8, 14336), (1024, 16, 16, 8, 3584), 128256),
    "small": ((512, 6, 8, 2, 1408), (128, 2, 4, 2, 352), 8192),
}
TREE_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def save_random_llama(path: Path, shape: tuple[int, ...], vocab: int, dtype: torch.dtype, seed: int) -> int:
    """A random-weight Llama checkpoint at path; returns its parameter count."""
    hidden, layers, heads, kv_heads, intermediate = shape
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        intermediate_size=intermediate,
        max_position_embeddings=8192,
    )
    torch.manual_seed(seed)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # build in the target dtype: an 8B model in float32 would need 32 GB
    try:
        model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    model.save_pretrained(path)
    return sum(p.numel() for p in model.parameters())


def timed(fn: Callable[[], object], device: str, repeats: int) -> float:
    """Median milliseconds of fn over repeats (after one warm-up call)."""
    times = []
    for i in range(repeats + 1):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        if i:
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def random_tree(num_nodes: int, vocab: int, gen: torch.Generator, device: str) -> DraftTree:
    """One tree of num_nodes nodes, each hanging under a uniformly chosen earlier node."""
    parents = [-1] + [int(torch.randint(0, i, (1,), generator=gen)) for i in range(1, num_nodes)]
    depth = [0] * num_nodes
    for i in range(1, num_nodes):
        depth[i] = depth[parents[i]] + 1
    tokens = torch.randint(0, vocab, (1, num_nodes), generator=gen).to(device)  # [1, N]
    return DraftTree(
        tokens,
        torch.tensor([parents], device=device),
        torch.tensor([depth], device=device),
        torch.ones(1, num_nodes, dtype=torch.bool, device=device),
    )


def tree_pass_table(target: TreeTarget, context: list[int], vocab: int, device: str, repeats: int) -> Table:
    table = Table("tree nodes", "target pass ms", "ms / node", "KV MB (context + tree)")
    gen = torch.Generator().manual_seed(0)
    target.prefill([context])
    none_kept = torch.empty(1, 0, dtype=torch.long, device=device)
    for n in TREE_SIZES:
        tree = random_tree(n, vocab, gen, device)

        def one_pass() -> None:
            target.lm.extend(tree)
            target.lm.commit(none_kept)  # drop the tree: the next pass sees the same context

        ms = timed(one_pass, device, repeats)
        target.lm.extend(tree)
        kv_mb = target.lm.kv_bytes() / 2**20
        target.lm.commit(none_kept)
        table.add_row(str(n), f"{ms:.2f}", f"{ms / n:.3f}", f"{kv_mb:.1f}")
    return table


def draft_table(drafter: DraftModel, context: list[int], length: int, device: str, repeats: int) -> Table:
    table = Table("K paths", f"draft ms (L={length})", "ms / path")
    drafter.prefill([context[:-1]], [context[-1]], seed=0)
    root_logits = drafter.lm.feed(drafter.pending)
    root = torch.tensor([context[-1]], device=device)
    none_kept = torch.empty(1, 0, dtype=torch.long, device=device)
    for k in (1, 2, 4, 8):

        def one_round() -> None:
            sample_iid_paths(drafter.lm, root, root_logits, k, length, SamplingParams(1.0, 0, 1.0), drafter.rng)
            drafter.lm.commit(none_kept)

        ms = timed(one_round, device, repeats)
        table.add_row(str(k), f"{ms:.2f}", f"{ms / k:.2f}")
    return table


def split_table(target: TreeTarget, drafter: DraftModel, prompts: list[list[int]], max_new: int) -> Table:
    table = Table(
        "verifier",
        "K",
        "ms / token",
        "share draft",
        "share target",
        "share verify",
        "share other",
        "tree nodes",
        "KV MB target",
        "KV MB draft",
    )
    for name, k in (("block", 1), ("gbv", 2), ("gbv", 4)):
        settings = DecodeSettings(
            num_paths=k,
            length=8,
            sampling=SamplingParams(1.0, 0, 1.0),
            max_new_tokens=max_new,
            batch_size=1,
            seed=0,
            eos_token_id=None,
        )
        m = summarize(decode(target, drafter, get_verifier(name), prompts, settings))
        table.add_row(
            name,
            str(k),
            f"{m['ms_per_token']:.1f}",
            *(f"{m[f'share_{p}']:.2f}" for p in ("draft", "target", "verify", "other")),
            f"{m['tree_nodes_mean']:.1f}",
            f"{m['kv_peak_mb_target']:.1f}",
            f"{m['kv_peak_mb_draft']:.1f}",
        )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="small shapes (automatic without a GPU)")
    parser.add_argument("--context", type=int, default=None, help="context tokens (default 1024 GPU, 128 small)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default 128 GPU, 32 small")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args()
    hf_logging.disable_progress_bar()
    torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    small = args.small or device == "cpu"
    target_shape, draft_shape, vocab = SHAPES["small" if small else "gpu"]
    dtype = "float32" if device == "cpu" else "bfloat16"
    context_len = args.context or (128 if small else 1024)
    max_new = args.max_new_tokens or (32 if small else 128)
    console = Console(width=140)
    where = torch.cuda.get_device_name() if device == "cuda" else f"CPU, {args.threads} threads"
    with tempfile.TemporaryDirectory() as tmp:
        n_target = save_random_llama(Path(tmp, "target"), target_shape, vocab, getattr(torch, dtype), seed=1)
        n_draft = save_random_llama(Path(tmp, "draft"), draft_shape, vocab, getattr(torch, dtype), seed=2)
        target = TreeTarget(LMSpec("hf", str(Path(tmp, "target")), dtype, device))
        drafter = DraftModel(LMSpec("hf", str(Path(tmp, "draft")), dtype, device))
    console.print(
        f"{where}; {dtype}; target {n_target / 1e9:.2f}B params {target_shape}, draft "
        f"{n_draft / 1e9:.3f}B {draft_shape}, vocab {vocab}; context {context_len} tokens"
    )
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, vocab, (context_len,), generator=gen).tolist() for _ in range(2)]
    console.print(tree_pass_table(target, prompts[0], vocab, device, args.repeats))
    console.print(draft_table(drafter, prompts[0], 8, device, args.repeats))
    console.print(split_table(target, drafter, prompts, max_new))


if __name__ == "__main__":
    main()
