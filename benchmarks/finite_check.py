"""What the non-finite check costs a load: `models.weights.refuse_non_finite` against the load it follows.

    PYTHONPATH=platform python benchmarks/finite_check.py [--hidden 1024 --layers 8 --vocab 32000 --runs 5]
        [--dtype float32]

Saves a random Llama checkpoint of the given shape (float16 on disk, as published checkpoints are) to a
temporary directory, then, alternating, loads it `--runs` times as a run does (`models.checkpoint_lm`,
into `--dtype`) with the check and without it (the check replaced by a no-op), and times the check alone
on the loaded parameters. Prints the median load with and without, their ratio, and the check's own
time and rate. The check is one sum a tensor: one more read of the weights after the load's.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import speculab.models.checkpoint_lm as checkpoint_lm
from speculab.models.weights import refuse_non_finite


def saved(root: Path, hidden: int, layers: int, vocab: int) -> Path:
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=hidden * 11 // 4,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=hidden // 128,
        tie_word_embeddings=False,
    )
    LlamaForCausalLM(config).to(torch.float16).save_pretrained(root / "lm")
    return root / "lm"


def timed_load(path: Path, checked: bool, dtype: str) -> float:
    checkpoint_lm.refuse_non_finite = refuse_non_finite if checked else (lambda *args: None)  # type: ignore[assignment]
    start = time.perf_counter()
    model = checkpoint_lm.checkpoint_lm(path, dtype)
    seconds = time.perf_counter() - start
    assert model is not None
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dtype", default="float32", help="the run's dtype the weights load into")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as root:
        path = saved(Path(root), args.hidden, args.layers, args.vocab)
        timed_load(path, True, args.dtype)  # warm: the page cache holds the file, imports are done
        loads: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.runs):
            for checked in (True, False):
                loads[checked].append(timed_load(path, checked, args.dtype))
        model = checkpoint_lm.checkpoint_lm(path, args.dtype)
        assert model is not None
        params = list(model.named_parameters())
        elements = sum(p.numel() for _, p in params)
        size = sum(p.numel() * p.element_size() for _, p in params)
        checks = []
        for _ in range(args.runs):
            start = time.perf_counter()
            refuse_non_finite(path, params)
            checks.append(time.perf_counter() - start)
    on, off, check = statistics.median(loads[True]), statistics.median(loads[False]), statistics.median(checks)
    print(f"checkpoint: {elements / 1e6:.1f}M parameters, {args.dtype} in memory ({size / 2**30:.2f} GiB)")
    print(f"load with the check {on:.3f} s, without {off:.3f} s: {on / off:.3f}x (medians of {args.runs})")
    print(f"the check alone {check:.3f} s, {size / check / 2**30:.2f} GiB/s on one thread")


if __name__ == "__main__":
    main()
