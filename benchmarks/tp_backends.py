"""The two tensor-parallel backends side by side at TP = 2 on the CPU (gloo): DeepSpeed's inference
AutoTP (`cluster.tp_backend=deepspeed`, the default) and transformers' own tensor parallelism (the
model's `tp_plan`, `cluster.tp_backend=transformers`).

    PYTHONPATH=platform python benchmarks/tp_backends.py [--hidden 1024] [--layers 8] [--vocab 32000]
        [--rounds 30] [--shard-mb 200]

A random-weight Llama in the real checkpoint layout (sharded safetensors with an index, fp32) is saved
once; then, for each backend in its own two fresh processes (as two Ray actors start), each rank joins
the world, loads its shard through `speculab.models.tp.load_tp_causal_lm` and runs `--rounds` rounds
of the target's part of a round on `models.hf.TreeLM`: score a 5-node tree after a 200-token prefill,
commit two nodes. Reported per backend: the load time (joined world to loaded shard, slowest rank),
each rank's peak resident memory (`ru_maxrss`, the process's whole life: Python, torch and the shard),
the median round, and whether the two backends' logits agree with one process's (fp32, 1e-5).
"""

from __future__ import annotations

import argparse
import resource
import socket
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp
from rich.console import Console
from rich.table import Table
from transformers import LlamaConfig, LlamaForCausalLM

from speculab.drafting.tree import DraftTree
from speculab.models import LMSpec
from speculab.models.roles import build_lm

BACKENDS = ("deepspeed", "transformers")
CONTEXT = 200


def save_checkpoint(out: Path, hidden: int, layers: int, vocab: int, shard_mb: int) -> Path:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=hidden * 11 // 4,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=hidden // 128,
        tie_word_embeddings=False,
        max_position_embeddings=1024,
    )
    LlamaForCausalLM(config).save_pretrained(out, max_shard_size=f"{shard_mb}MB")
    return out


def tree(vocab: int) -> DraftTree:
    paths = torch.randint(2, vocab, (1, 2, 2), generator=torch.Generator().manual_seed(1))  # K = 2, L = 2
    return DraftTree.from_paths(torch.tensor([5]), paths)


def rank_main(rank: int, backend: str, port: int, path: str, rounds: int, out: str) -> None:
    from speculab.models.tp import join_process_group

    torch.set_num_threads(1)
    join_process_group(rank, 2, "127.0.0.1", port, "cpu", 600.0, backend)
    start = time.perf_counter()
    lm = build_lm(LMSpec("hf", path, threads=1, tp_size=2, tp_backend=backend))
    load_s = time.perf_counter() - start
    vocab = lm.model.config.vocab_size
    context = torch.randint(2, vocab, (CONTEXT,), generator=torch.Generator().manual_seed(0)).tolist()
    times, logits = [], None
    with torch.inference_mode():
        for index in range(rounds + 3):  # 3 warm-up rounds
            lm.reset(1, CONTEXT + 4 * (rounds + 3) + 8)
            lm.feed([context])
            begin = time.perf_counter()
            scored = lm.extend(tree(vocab))
            lm.commit(torch.tensor([[0, 1, 2]]))
            if index >= 3:
                times.append(time.perf_counter() - begin)
            logits = scored
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    torch.save({"load_s": load_s, "peak_mb": peak_mb, "round_s": times, "logits": logits}, f"{out}/{backend}-{rank}.pt")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def single_logits(path: Path) -> torch.Tensor:
    torch.set_num_threads(1)
    lm = build_lm(LMSpec("hf", str(path), threads=1))
    vocab = lm.model.config.vocab_size
    context = torch.randint(2, vocab, (CONTEXT,), generator=torch.Generator().manual_seed(0)).tolist()
    with torch.inference_mode():
        lm.reset(1, CONTEXT + 16)
        lm.feed([context])
        return lm.extend(tree(vocab))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--shard-mb", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        path = save_checkpoint(Path(root) / "model", args.hidden, args.layers, args.vocab, args.shard_mb)
        size_mb = sum(f.stat().st_size for f in path.glob("*.safetensors")) / 2**20
        shards = len(list(path.glob("*.safetensors")))
        results = {}
        for backend in BACKENDS:
            mp.spawn(rank_main, args=(backend, free_port(), str(path), args.rounds, root), nprocs=2)
            results[backend] = [torch.load(Path(root) / f"{backend}-{rank}.pt") for rank in range(2)]
        reference = torch.log_softmax(single_logits(path), -1)
    table = Table(
        title=f"TP = 2 on the CPU (gloo, 1 thread a rank): random Llama, hidden {args.hidden}, {args.layers} layers, "
        f"vocab {args.vocab}, fp32, {size_mb:,.0f} MB in {shards} shards; {args.rounds} rounds"
    )
    for column in (
        "backend",
        "load s (slowest rank)",
        "peak RSS MB per rank",
        "ms / round (median)",
        "logits = 1 proc.",
    ):
        table.add_column(column, justify="right" if column != "backend" else "left")
    for backend, ranks in results.items():
        rounds = [t for rank in ranks for t in rank["round_s"]]
        agree = all(
            torch.allclose(torch.log_softmax(rank["logits"], -1), reference, rtol=1e-5, atol=1e-5) for rank in ranks
        )
        table.add_row(
            backend,
            f"{max(rank['load_s'] for rank in ranks):.2f}",
            " / ".join(f"{rank['peak_mb']:,.0f}" for rank in ranks),
            f"{statistics.median(rounds) * 1e3:.2f}",
            "yes" if agree else "NO",
        )
    Console().print(table)


if __name__ == "__main__":
    main()
