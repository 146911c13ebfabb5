"""Systems costs at realistic shapes on one GPU, with random weights made on the device: no
downloads, no checkpoint written.

    python benchmarks/gpu_systems.py                # an 8B-shaped Llama target, 0.6B-shaped draft, bfloat16
    python benchmarks/gpu_systems.py --arch qwen3   # Qwen3-8B and Qwen3-0.6B shapes
    python benchmarks/gpu_systems.py --small        # CPU-sized shapes in float32 (automatic without a GPU)

Four tables, printed as they are measured (the slowest, with torch.compile, last):
(b) one target pass of speculab's TreeLM over a random tree of 1..1024 nodes after 1024 and
    4096 context tokens, with the KV cache it holds;
(d) the engine's own decode loop (block K=1, GBV K=2 and 4, L=8, T=1): ms per token and the
    share of wall time in draft, target, verification and the rest, per round;
(c) ms per call of every registered path verifier at K = 1, 4, 8 (multi-path verifiers) and
    L = 4, 16 for the target's vocabulary and the other preset one (128256, 151936), batch 1,
    beside the time of reading p and q once at the bandwidth measured in this run;
(a) autoregressive decoding at batch 1 after a 512-token prompt: ms per token (decode steps
    only: (time for N tokens - time for 1) / (N - 1)) of transformers' `generate` eager with its
    dynamic cache, `generate` with a static cache and its torch.compile, and speculab's
    autoregressive loop, each over the memory roofline: (weight bytes + the mean KV bytes a
    step reads) / the bandwidth of a device-to-device copy measured in this run.
Random weights make the draft disagree with the target, so few tokens are accepted: times per
pass and per round mean something, block efficiency does not. On a GPU every time comes from
CUDA events around the call after a warm-up; on the CPU from the host clock.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from rich.console import Console
from rich.table import Table
from transformers import AutoModelForCausalLM, CompileConfig, LlamaConfig, PreTrainedModel, Qwen3Config
from transformers.utils import logging as hf_logging
from verify import batched_call, random_inputs

from speculab.algorithms import ALGORITHMS, PATH_ALGORITHMS, get_verifier
from speculab.drafting.sampling import SamplingParams
from speculab.drafting.tree import DraftTree
from speculab.engine import DecodeSettings, autoregressive, decode
from speculab.models import DraftModel, LMSpec, TreeTarget
from speculab.tracking.metrics import summarize

# (target, draft, vocab): Llama-3-8B with a 0.6B-class Llama draft; Qwen3-8B with Qwen3-0.6B; CPU-sized ones.
# Each size is (hidden, layers, attention heads, KV heads, MLP width).
Size = tuple[int, int, int, int, int]
ARCHS: dict[str, tuple[Size, Size, int]] = {
    "llama": ((4096, 32, 32, 8, 14336), (1024, 16, 16, 8, 3584), 128256),
    "qwen3": ((4096, 36, 32, 8, 12288), (1024, 28, 16, 8, 3072), 151936),
    "small": ((512, 6, 8, 2, 1408), (128, 2, 4, 2, 352), 8192),
}
VOCABS = (128256, 151936)


def config_of(arch: str, size: Size, vocab: int) -> LlamaConfig | Qwen3Config:
    hidden, layers, heads, kv_heads, intermediate = size
    common = {
        "vocab_size": vocab,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "intermediate_size": intermediate,
        "max_position_embeddings": 8192,
    }
    if arch == "qwen3":
        return Qwen3Config(head_dim=128, tie_word_embeddings=False, **common)
    return LlamaConfig(**common)


def random_model(arch: str, size: Size, vocab: int, dtype: torch.dtype, device: str, seed: int) -> PreTrainedModel:
    """A random-weight causal LM built directly on `device` in `dtype` (an 8B model never touches the host)."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config_of(arch, size, vocab), dtype=dtype, attn_implementation="sdpa")
    return model.eval()


def elapsed_ms(fn: Callable[[], object], device: str, repeats: int) -> float:
    """Median milliseconds of fn over `repeats` calls after one warm-up: CUDA events on a GPU."""
    fn()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            tick = time.perf_counter()
            fn()
            times.append((time.perf_counter() - tick) * 1e3)
    return statistics.median(times)


def bandwidth_gbs(device: str, repeats: int) -> float:
    """GB/s of a device-to-device copy (bytes read plus bytes written)."""
    size = 2**30 if device == "cuda" else 2**27
    src = torch.empty(size, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = elapsed_ms(lambda: dst.copy_(src), device, repeats)
    return 2 * size / ms / 1e6


def weight_bytes(model: PreTrainedModel) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def kv_bytes_per_token(model: PreTrainedModel) -> int:
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return 2 * c.num_hidden_layers * c.num_key_value_heads * head_dim * next(model.parameters()).element_size()


def random_tree(num_nodes: int, vocab: int, gen: torch.Generator, device: str) -> DraftTree:
    """One tree of num_nodes nodes, each hanging under a uniformly chosen earlier node."""
    parents = [-1] + [int(torch.randint(0, i, (1,), generator=gen)) for i in range(1, num_nodes)]
    depth = [0] * num_nodes
    for i in range(1, num_nodes):
        depth[i] = depth[parents[i]] + 1
    return DraftTree(
        torch.randint(0, vocab, (1, num_nodes), generator=gen).to(device),
        torch.tensor([parents], device=device),
        torch.tensor([depth], device=device),
        torch.ones(1, num_nodes, dtype=torch.bool, device=device),
    )


def tree_pass_table(
    target: TreeTarget, vocab: int, contexts: tuple[int, ...], sizes: tuple[int, ...], device: str, repeats: int
) -> Table:
    """(b): one target pass over a tree after each context length."""
    table = Table(
        "context", "tree nodes", "target pass ms", "ms / node", "KV MB (context + tree)", title="(b) tree pass"
    )
    gen = torch.Generator().manual_seed(0)
    none_kept = torch.empty(1, 0, dtype=torch.long, device=device)
    for context in contexts:
        target.prefill([torch.randint(0, vocab, (context,), generator=gen).tolist()])
        for n in sizes:
            tree = random_tree(n, vocab, gen, device)

            def one_pass() -> None:
                target.lm.extend(tree)
                target.lm.commit(none_kept)  # drop the tree: the next pass sees the same context

            ms = elapsed_ms(one_pass, device, repeats)
            target.lm.extend(tree)
            kv_mb = target.lm.kv_bytes() / 2**20
            target.lm.commit(none_kept)
            table.add_row(str(context), str(n), f"{ms:.2f}", f"{ms / n:.3f}", f"{kv_mb:.1f}")
    return table


def split_table(target: TreeTarget, drafter: DraftModel, prompts: list[list[int]], max_new: int, device: str) -> Table:
    """(d): the engine's time split per round."""
    table = Table(
        "verifier", "K", "ms / token", "draft", "target", "verify", "other", "tree nodes", title="(d) time split"
    )
    for name, k in (("block", 1), ("gbv", 2), ("gbv", 4)):
        settings = DecodeSettings(k, 8, SamplingParams(1.0), max_new, 1, 0, None)
        decode(target, drafter, get_verifier(name), prompts[:1], settings)  # warm-up
        m = summarize(decode(target, drafter, get_verifier(name), prompts, settings))
        shares = (f"{m[f'share_{p}']:.0%}" for p in ("draft", "target", "verify", "other"))
        table.add_row(name, str(k), f"{m['ms_per_token']:.2f}", *shares, f"{m['tree_nodes_mean']:.1f}")
    return table


def verifier_table(vocabs: tuple[int, ...], device: str, bandwidth: float, repeats: int) -> Table:
    """(c): ms per call of every path verifier, beside reading p and q once at the measured bandwidth."""
    table = Table("verifier", "V", "K", "L", "ms / call", "p+q read ms", "ratio", title="(c) verification, batch 1")
    for name in PATH_ALGORITHMS:
        spec = ALGORITHMS[name]
        for vocab in vocabs:
            for k in (1, 4, 8) if spec.multi_path else (1,):
                for length in (4, 16):
                    if not spec.lossless(k):
                        continue
                    inputs = random_inputs(1, k, length, vocab, torch.device(device))
                    ms = elapsed_ms(batched_call(name, inputs), device, repeats)
                    read_ms = (inputs.p.nbytes + inputs.q.nbytes) / bandwidth / 1e6
                    table.add_row(
                        name, str(vocab), str(k), str(length), f"{ms:.3f}", f"{read_ms:.4f}", f"{ms / read_ms:.0f}x"
                    )
    return table


def step_ms(run: Callable[[int], object], device: str, max_new: int, repeats: int) -> float:
    """ms per decode step of a generation loop: (time for max_new tokens - time for 1) / (max_new - 1)."""
    return (elapsed_ms(lambda: run(max_new), device, repeats) - elapsed_ms(lambda: run(1), device, repeats)) / (
        max_new - 1
    )


def autoregressive_table(
    model: PreTrainedModel,
    target: TreeTarget,
    prompt: list[int],
    max_new: int,
    device: str,
    bandwidth: float,
    compile_: bool,
    repeats: int,
) -> Table:
    """(a): ms per token of the autoregressive loops, over the memory roofline."""
    ids = torch.tensor([prompt], device=device)
    mean_context = len(prompt) + max_new / 2
    roofline_ms = (weight_bytes(model) + kv_bytes_per_token(model) * mean_context) / bandwidth / 1e6

    def hf(static: bool) -> Callable[[int], object]:
        """generate; static: with a static cache, whose forward transformers compiles (on the CPU too,
        by `_compile_all_devices`, which its auto-compile otherwise keeps to accelerators)."""
        extra: dict[str, object] = {}
        if static:
            config = CompileConfig(fullgraph=True)
            config._compile_all_devices = True
            extra = {"cache_implementation": "static", "compile_config": config}
        return lambda n: model.generate(
            ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0, **extra
        )

    def speculab_loop(n: int) -> object:
        settings = DecodeSettings(1, 0, SamplingParams(0.0), n, 1, 0, None)
        return autoregressive(target, [prompt], settings)

    rows: list[tuple[str, Callable[[int], object] | None]] = [
        ("transformers generate, eager, dynamic cache", hf(False)),
        ("transformers generate, static cache + torch.compile", hf(True) if compile_ else None),
        ("speculab autoregressive loop", speculab_loop),
    ]
    table = Table(
        "loop", "ms / token", "x roofline", title=f"(a) autoregressive decoding, {len(prompt)}-token prompt, batch 1"
    )
    with torch.inference_mode():
        for name, run in rows:
            if run is None:
                table.add_row(name, "not run (--compile on the CPU)", "")
                continue
            ms = step_ms(run, device, max_new, repeats)
            table.add_row(name, f"{ms:.2f}", f"{ms / roofline_ms:.2f}")
    table.add_row("memory roofline (weights + mean KV per step / measured bandwidth)", f"{roofline_ms:.2f}", "1.00")
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", choices=("llama", "qwen3"), default="llama")
    parser.add_argument("--small", action="store_true", help="CPU-sized shapes in float32 (automatic without a GPU)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--max-new-tokens", type=int, default=None, help="decode steps timed (default 128 GPU, 16 small)"
    )
    parser.add_argument("--compile", action="store_true", help="also time generate's static-cache compile on the CPU")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    hf_logging.disable_progress_bar()
    torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    small = args.small or device == "cpu"
    target_shape, draft_shape, vocab = ARCHS["small" if small else args.arch]
    arch = "llama" if small else args.arch
    dtype = torch.float32 if small else torch.bfloat16
    max_new = args.max_new_tokens or (16 if small else 128)
    contexts, sizes = (
        ((128, 512), (1, 4, 16, 64, 256)) if small else ((1024, 4096), (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024))
    )
    console = Console(width=150)

    model = random_model(arch, target_shape, vocab, dtype, device, seed=1)
    draft = random_model(arch, draft_shape, vocab, dtype, device, seed=2)
    target = TreeTarget(LMSpec("hf", model=model, device=device))
    drafter = DraftModel(LMSpec("hf", model=draft, device=device))
    bandwidth = bandwidth_gbs(device, args.repeats)
    where = (
        f"{torch.cuda.get_device_name()}, CUDA {torch.version.cuda}"
        if device == "cuda"
        else f"CPU, {args.threads} thread(s)"
    )
    console.print(
        f"{where}; torch {torch.__version__}; {dtype}; {arch} shapes: target {weight_bytes(model) / 1e9:.2f} GB "
        f"{target_shape}, draft {weight_bytes(draft) / 1e9:.3f} GB {draft_shape}, vocab {vocab}; "
        f"copy bandwidth {bandwidth:.0f} GB/s; models built in {time.perf_counter() - start:.0f} s"
    )
    gen = torch.Generator().manual_seed(0)
    console.print(tree_pass_table(target, vocab, contexts, sizes, device, args.repeats))
    prompts = [torch.randint(0, vocab, (contexts[0],), generator=gen).tolist() for _ in range(2)]
    console.print(split_table(target, drafter, prompts, max_new, device))
    console.print(verifier_table((vocab,) if small else VOCABS, device, bandwidth, args.repeats))
    prompt = torch.randint(0, vocab, (64 if small else 512,), generator=gen).tolist()
    compile_ = device == "cuda" or args.compile
    console.print(autoregressive_table(model, target, prompt, max_new, device, bandwidth, compile_, args.repeats))
    console.print(f"done in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
