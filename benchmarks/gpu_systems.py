"""Systems costs at realistic shapes on one GPU, with random weights made on the device: no
downloads, no checkpoint written.

    python benchmarks/gpu_systems.py                # an 8B-shaped Llama target, 0.6B-shaped draft, bfloat16
    python benchmarks/gpu_systems.py --arch qwen3   # Qwen3-8B and Qwen3-0.6B shapes
    python benchmarks/gpu_systems.py --small        # CPU-sized shapes in float32 (automatic without a GPU)

Tables, printed as they are measured (the slowest, with torch.compile, last). "captured" is
speculab's default on a GPU: passes of up to 256 nodes replayed from CUDA graphs
(`models.static_pass`); on the CPU the same fixed-shape passes run eagerly ("fixed shapes").
"captured + inductor" (on a GPU, or with --compile) is the same with each layer compiled by inductor
first (`model.compile=true`): the fused norms, rotary and residual adds.
(b) one target pass of speculab's TreeLM over a random tree of 1..1024 nodes after 1024 and
    4096 context tokens, eager and captured, as a ratio to the 1-node pass (the issue's limits:
    16 nodes 1.1x, 64 1.25x, 256 1.8x) and against the FLOP roofline (2 x parameters x nodes
    over the matmul rate measured in this run), with the KV cache it holds;
(e) one draft step (the 0.6B-shaped draft over 1 and 4 nodes after 512 context, eager and
    captured; limit 1.5 ms) and one DFlash block pass (16 tokens, the published Qwen3-8B
    drafter's shape, eager and captured; limit 1.5 ms);
(d) the engine's own decode loop (block K=1, GBV K=2 and 4, L=8, T=1), eager and captured: ms
    per token, the share of wall time in draft, target, verification and the rest, and the
    rest per round (the loop's own overhead; limit 0.3 ms);
(c) ms per call of every registered path verifier at K = 1, 4, 8 (multi-path verifiers) and
    L = 4, 16 for the target's vocabulary and the other preset one (128256, 151936), batch 1,
    beside the time of reading p and q once at the bandwidth measured in this run;
(a) autoregressive decoding at batch 1 after a 512-token prompt: ms per token (decode steps
    only: (time for N tokens - time for 1) / (N - 1)) of transformers' `generate` eager with its
    dynamic cache, `generate` with a static cache and its torch.compile, and speculab's
    autoregressive loop, eager and captured, each over the memory roofline: (weight bytes + the
    mean KV bytes a step reads) / the bandwidth of a device-to-device copy measured in this run;
(t) the shipped tiny pair on the device, T = 0, batch 1, 4 HumanEval prompts: ms per token of
    transformers' generate (eager; static cache + compile), speculab's autoregressive loop and
    DDTree (B = 64) on the DFlash drafter, over the fastest generate (the issue's limits: 1.0x
    and 0.5x);
(p) a DFlash round at each tree size of (b) from 16 nodes (16: the DFlash chain; else DDTree with
    B = nodes - 1): the block pass, the tree build, the target pass over the tree, its verification,
    the loop's rest (commit included); the break-even gain in acceptance length a tree needs over
    the chain (its round over the chain's); and a projection: the speedup over speculab's captured
    autoregressive loop at the DDTree paper's Qwen3-8B HumanEval T = 0 acceptance (Table 1: DFlash
    tau 6.61 at 4.84x, DDTree at its best budget tau 9.67 at 6.90x), beside the paper's speedups;
(q) the shipped tiny pair's own acceptance by DDTree budget (T = 0, 4 HumanEval prompts): tau of the
    DFlash chain and of DDTree at B = 15 ... 1023 (up to 255 on the CPU), and the gain over the
    chain: the shape of the curve, measured.
Random weights make the draft disagree with the target, so few tokens are accepted: times per
pass and per round mean something, block efficiency does not. On a GPU every time comes from
CUDA events around the call after a warm-up; on the CPU from the host clock. Tables (b), (c) and
(e) print each median with the range of its repeats (`--repeats`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import cast

import torch
from rich.console import Console
from rich.table import Table
from transformers import AutoModelForCausalLM, AutoTokenizer, CompileConfig, LlamaConfig, PreTrainedModel, Qwen3Config
from transformers.utils import logging as hf_logging
from verify import batched_call, random_inputs

from speculab.core.autoregressive import autoregressive
from speculab.core.engine import DecodeSettings, decode
from speculab.data import encode_prompt, load_prompts
from speculab.device.graphs import Graphs
from speculab.drafting.best_first import best_first, chain_tree
from speculab.drafting.ddtree import TreeDrafter, tree_builder
from speculab.drafting.sampling import SamplingParams
from speculab.drafting.tree import DraftTree
from speculab.models import DraftModel, LMSpec, TreeTarget
from speculab.models.dflash import DFlashDraft, block_allowed, draft_logits
from speculab.models.dflash_layout import DFlashLayout, read_layout
from speculab.models.hf import TreeLM
from speculab.models.rotary import recreate_rotary_buffers
from speculab.models.static_pass import BUCKETS
from speculab.registry import ALGORITHMS, PATH_ALGORITHMS, get_verifier
from speculab.results.figures import run_figures
from speculab.verify.captured import replayed

REPO = Path(__file__).resolve().parents[1]
TINY_PAIR = REPO / "assets" / "tiny-pycode"
sys.path.insert(0, str(REPO / "tools"))  # random_dflash_pair: the DFlash shapes

# (target, draft, vocab): Llama-3-8B with a 0.6B-class Llama draft; Qwen3-8B with Qwen3-0.6B; CPU-sized ones.
# Each size is (hidden, layers, attention heads, KV heads, MLP width).
Size = tuple[int, int, int, int, int]
ARCHS: dict[str, tuple[Size, Size, int]] = {
    "llama": ((4096, 32, 32, 8, 14336), (1024, 16, 16, 8, 3584), 128256),
    "qwen3": ((4096, 36, 32, 8, 12288), (1024, 28, 16, 8, 3072), 151936),
    "small": ((512, 6, 8, 2, 1408), (128, 2, 4, 2, 352), 8192),
}
VOCABS = (128256, 151936)
BUDGETS = (15, 31, 63, 127, 255, 511, 1023)  # DDTree budgets of table (q): 16 ... 1024 nodes (CPU shapes: 5)


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


@dataclass(frozen=True)
class Timing:
    """Milliseconds of one call over a run's repeats: the median and the range, printed beside it so
    that a difference between two runs can be told from the noise inside one."""

    median: float
    low: float
    high: float

    def shown(self, digits: int) -> str:  # "11.92 (11.80-12.10)"
        return f"{self.median:.{digits}f} ({self.low:.{digits}f}-{self.high:.{digits}f})"


def elapsed_ms(fn: Callable[[], object], device: str, repeats: int) -> float:
    """Median milliseconds of fn over `repeats` calls after one warm-up: CUDA events on a GPU."""
    return elapsed(fn, device, repeats).median


def elapsed(fn: Callable[[], object], device: str, repeats: int) -> Timing:
    """Milliseconds of fn over `repeats` calls after one warm-up: CUDA events on a GPU."""
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
    return Timing(statistics.median(times), min(times), max(times))


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


def matmul_tflops(device: str, dtype: torch.dtype, repeats: int) -> float:
    """TFLOP/s of one large square matmul in `dtype`: the FLOP roofline measured in this run."""
    n = 8192 if device == "cuda" else 1024
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    return 2 * n**3 / elapsed_ms(lambda: a @ b, device, repeats) / 1e9


def pass_time(lm: TreeLM, nodes: DraftTree, device: str, repeats: int) -> Timing:
    """One pass over `nodes` after the committed context, dropped again so that every pass sees the same context."""
    none_kept = torch.empty(1, 0, dtype=torch.long, device=device)

    def one_pass() -> None:
        lm.extend(nodes)
        lm.commit(none_kept)

    return elapsed(one_pass, device, repeats)


STEP_LIMITS = {16: 1.1, 64: 1.25, 256: 1.8}  # issue 27: a tree pass over its 1-node pass


def tree_pass_table(
    targets: dict[str, TreeTarget],
    vocab: int,
    contexts: tuple[int, ...],
    sizes: tuple[int, ...],
    device: str,
    repeats: int,
    flop_rate: float,
    params: int,
) -> tuple[Table, dict[int, float]]:
    """(b): one target pass over a tree after each context length, eager and captured; also the
    captured ms per size after the first context (for the projection)."""
    names = list(targets)
    table = Table(
        "context",
        "tree nodes",
        *(f"{name} ms (range)" for name in names),
        f"{names[-1]} / 1 node",
        "limit",
        "x FLOP roofline",
        "KV MB (context + tree)",
        title=f"(b) tree pass ({names[-1]} up to {BUCKETS[-1]} nodes, eager past them)",
    )
    gen = torch.Generator().manual_seed(0)
    first: dict[int, float] = {}
    for context in contexts:
        prompt = torch.randint(0, vocab, (context,), generator=gen).tolist()
        for target in targets.values():
            target.prefill([prompt], room=max(sizes) + 1)  # + 1: a pass pads its nodes to a bucket of 2^k + 1
        one_node = 0.0
        for n in sizes:
            tree = random_tree(n, vocab, gen, device)
            timings = [pass_time(target.lm, tree, device, repeats) for target in targets.values()]
            ms = timings[-1].median
            one_node = one_node or ms
            first.setdefault(n, ms)
            lm = targets[names[0]].lm
            lm.extend(tree)
            kv_mb = lm.kv_bytes() / 2**20
            lm.commit(torch.empty(1, 0, dtype=torch.long, device=device))
            flop_ms = 2 * params * n / flop_rate / 1e9
            table.add_row(
                str(context),
                str(n),
                *(t.shown(2) for t in timings),
                f"{ms / one_node:.2f}",
                f"{STEP_LIMITS[n]:.2f}" if n in STEP_LIMITS else "",
                f"{ms / flop_ms:.2f}",
                f"{kv_mb:.1f}",
            )
    return table, first


def draft_step_table(
    drafts: dict[str, DraftModel], vocab: int, context: int, device: str, repeats: int, block: list[Timing]
) -> Table:
    """(e): one draft step (1 or 4 nodes: K = 1 or 4 paths) after `context` tokens, eager and captured,
    and one DFlash block pass."""
    table = Table("pass", *(f"{name} ms (range)" for name in drafts), "limit ms", title="(e) draft passes, batch 1")
    gen = torch.Generator().manual_seed(5)
    prompt = torch.randint(0, vocab, (context,), generator=gen).tolist()
    for draft in drafts.values():
        draft.prefill([prompt[:-1]], [prompt[-1]], 0, room=8)
    for k in (1, 4):
        step = DraftTree(
            torch.randint(0, vocab, (1, k), generator=gen).to(device),
            torch.full((1, k), -1, device=device),
            torch.zeros(1, k, dtype=torch.long, device=device),
            torch.ones(1, k, dtype=torch.bool, device=device),
        )
        timings = [pass_time(draft.lm, step, device, repeats) for draft in drafts.values()]
        table.add_row(f"draft step, {k} node(s) after {context}", *(t.shown(3) for t in timings), "1.5")
    table.add_row(f"DFlash block pass, 16 tokens after {context}", *(t.shown(3) for t in block), "1.5")
    return table


def dflash_block_times(small: bool, device: str, dtype: torch.dtype, context: int, repeats: int) -> list[Timing]:
    """One DFlash block pass in the published Qwen3-8B drafter's shape (tools/random_dflash_pair.py), random
    weights: the drafter's layers over a 16-token block after `context` absorbed features, then the
    target's lm_head and a softmax over the 15 drafted positions; [eager ms, captured ms] (on the
    CPU the second runs the same pass eagerly)."""
    from random_dflash_pair import SHAPES, draft_config

    config = Qwen3Config.from_dict(draft_config(SHAPES["small" if small else "8b"]))
    torch.manual_seed(3)
    with torch.device(device):
        model = DFlashDraft(config).to(dtype).eval()
    recreate_rotary_buffers(model, device)
    hidden, block = config.hidden_size, 16
    head = 0.02 * torch.randn(config.vocab_size, hidden, device=device, dtype=dtype)
    features = torch.randn(1, context, len(model.layer_ids) * hidden, device=device, dtype=dtype)
    with torch.inference_mode():
        kv = model.context_kv(features, torch.arange(context, device=device)[None])
        tokens = torch.randn(1, block, hidden, device=device, dtype=dtype)
        positions = context + torch.arange(block, device=device)[None]
        allowed = block_allowed(torch.ones(1, context, dtype=torch.bool, device=device), block)

        def one_pass() -> tuple[torch.Tensor]:
            out = model(tokens, positions, kv, allowed)
            return (torch.softmax(draft_logits(out[:, 1:], head, model.layout).float(), dim=-1),)

        graphs = Graphs(device == "cuda")  # the pass reads only tensors that stay put: replayable
        return [
            elapsed(one_pass, device, repeats),
            elapsed(lambda: graphs.run("block", one_pass), device, repeats),
        ]


def split_table(
    variants: dict[str, tuple[TreeTarget, DraftModel]], prompts: list[list[int]], max_new: int
) -> tuple[Table, float]:
    """(d): the engine's time split per round, eager and captured; also the captured loop's rest per round."""
    table = Table(
        "passes",
        "verifier",
        "K",
        "ms / token",
        "draft",
        "target",
        "verify",
        "other",
        "other ms / round",
        "tree nodes",
        title="(d) time split (other: the loop's own overhead; limit 0.3 ms a round)",
    )
    block_other_ms = 0.0  # the last variant's (captured), block verifier
    for passes, (target, drafter) in variants.items():
        for name, k in (("block", 1), ("gbv", 2), ("gbv", 4)):
            settings = DecodeSettings(k, 8, SamplingParams(1.0), max_new, 1, 0, None, tree_nodes=8 * k + 1)
            decode(target, drafter, get_verifier(name), prompts[:1], settings)  # warm-up (and capture)
            run = decode(target, drafter, get_verifier(name), prompts, settings)
            m = run_figures(run)
            other_ms = 1e3 * sum(r.time_other_s for r in run.rounds) / len(run.rounds)
            block_other_ms = other_ms if name == "block" else block_other_ms
            shares = (f"{m.value(f'share_{p}'):.0%}" for p in ("draft", "target", "verify", "other"))
            table.add_row(
                passes,
                name,
                str(k),
                f"{m.value('ms_per_token'):.2f}",
                *shares,
                f"{other_ms:.3f}",
                f"{m.value('tree_nodes_mean'):.1f}",
            )
    return table, block_other_ms


def verifier_table(
    vocabs: tuple[int, ...], verifiers: tuple[str, ...], device: str, bandwidth: float, repeats: int
) -> Table:
    """(c): ms per call of each path verifier, eager and with its decision replayed from a CUDA graph
    (`verify.captured.CapturedPaths`; on the CPU through the same buffers, eagerly), beside reading p and q once
    at the measured bandwidth and the issue's limit."""
    captured = "captured" if device == "cuda" else "buffers"
    table = Table(
        "verifier",
        "V",
        "K",
        "L",
        "eager ms (range)",
        f"{captured} ms (range)",
        "limit ms",
        "p+q read ms",
        f"{captured} / read",
        title="(c) verification, batch 1",
    )
    replay = replayed("graphs" if device == "cuda" else "static")
    for name in verifiers:
        spec = ALGORITHMS[name]
        for vocab in vocabs:
            for k in (1, 4, 8) if spec.multi_path else (1,):
                for length in (4, 16):
                    if not spec.lossless(k):
                        continue
                    inputs = random_inputs(1, k, length, vocab, torch.device(device))
                    eager = elapsed(batched_call(name, inputs), device, repeats)
                    timing = elapsed(batched_call(name, inputs, replay), device, repeats)
                    read_ms = (inputs.p.nbytes + inputs.q.nbytes) / bandwidth / 1e6
                    limit = VERIFY_LIMIT_MS.get(name, VERIFY_LIMIT_MS["multi-path"] if spec.multi_path else None)
                    row = (name, str(vocab), str(k), str(length), eager.shown(3), timing.shown(3), f"{limit or ''}")
                    table.add_row(*row, f"{read_ms:.4f}", f"{timing.median / read_ms:.0f}x")
    return table


# issue 52: a captured call of token or block verification at most 50 us, of a multi-path verifier 250 us
VERIFY_LIMIT_MS = {"token": 0.05, "block": 0.05, "multi-path": 0.25}


def step_ms(run: Callable[[int], object], device: str, max_new: int, repeats: int) -> float:
    """ms per decode step of a generation loop: (time for max_new tokens - time for 1) / (max_new - 1),
    each the fastest of at least 3 runs: a difference of two single runs on a busy machine can come out
    below zero, and the least disturbed run is the one that measures the loop."""
    runs = max(repeats, 3)
    longest, single = (elapsed(partial(run, n), device, runs).low for n in (max_new, 1))
    return (longest - single) / (max_new - 1)


def generate_loop(model: PreTrainedModel, ids: torch.Tensor, static: bool) -> Callable[[int], object]:
    """transformers' greedy generate of exactly n tokens after ids [1, T]; static: with a static cache,
    whose forward transformers compiles (on the CPU too, by `_compile_all_devices`, which its
    auto-compile otherwise keeps to accelerators)."""
    extra: dict[str, object] = {}
    if static:
        config = CompileConfig(fullgraph=True)
        config._compile_all_devices = True
        extra = {"cache_implementation": "static", "compile_config": config}
    return lambda n: model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0, **extra)


def tiny_dflash_pair(device: str, passes: str) -> tuple[list[list[int]], TreeTarget, DraftModel, DFlashLayout]:
    """The shipped tiny pair with its DFlash drafter on `device`, and 4 HumanEval prompts."""
    tokenizer = AutoTokenizer.from_pretrained(TINY_PAIR / "target")
    prompts = [encode_prompt(p, tokenizer) for p in load_prompts("humaneval", 4)]
    target_path, dflash = str(TINY_PAIR / "target"), str(TINY_PAIR / "dflash")
    layout = read_layout(dflash)
    target = TreeTarget(LMSpec("hf", target_path, device=device, feature_layers=layout.target_layer_ids, passes=passes))
    source = DraftModel(LMSpec("dflash", dflash, device=device, target_path=target_path, passes=passes))
    return prompts, target, source, layout


def tiny_pair_table(device: str, compile_: bool, repeats: int, max_new: int, budget: int = 64) -> Table:
    """(t): the shipped tiny pair on this device, batch 1, T = 0, 4 HumanEval prompts of `max_new`
    tokens each: ms per token (prefill included) of transformers' generate, speculab's
    autoregressive loop and DDTree on the DFlash drafter (both with the default passes: captured on
    a GPU), over the fastest generate."""
    passes = "graphs" if device == "cuda" else "eager"
    prompts, target, source, layout = tiny_dflash_pair(device, passes)
    drafter = TreeDrafter(source, tree_builder("best_first", budget))
    ar = DecodeSettings(1, 0, SamplingParams(0.0), max_new, 1, 0, None)
    ddtree = DecodeSettings(1, layout.block_size - 1, SamplingParams(0.0), max_new, 1, 0, None, budget + 1)
    model = cast(PreTrainedModel, target.lm.model)  # type: ignore[attr-defined]  (a transformers target)
    ids = [torch.tensor([p], device=device) for p in prompts]
    runs: dict[str, Callable[[], object] | None] = {
        "transformers generate, eager": lambda: [generate_loop(model, i, False)(max_new) for i in ids],
        "transformers generate, static cache + torch.compile": (
            (lambda: [generate_loop(model, i, True)(max_new) for i in ids]) if compile_ else None
        ),
        f"speculab autoregressive ({passes})": lambda: autoregressive(target, prompts, ar),
        f"speculab DDTree, B = {budget}, on DFlash ({passes})": lambda: decode(
            target, drafter, get_verifier("ddtree"), prompts, ddtree
        ),
    }
    ms = {name: elapsed_ms(run, device, repeats) / (len(prompts) * max_new) for name, run in runs.items() if run}
    fastest = min(v for name, v in ms.items() if name.startswith("transformers"))
    table = Table(
        "loop",
        "ms / token",
        "x fastest generate",
        title="(t) the tiny pair, T = 0, batch 1 (limits: speculab autoregressive at most 1.0x, DDTree at most 0.5x)",
    )
    for name in runs:
        table.add_row(name, *((f"{ms[name]:.3f}", f"{ms[name] / fastest:.2f}") if name in ms else ("not run", "")))
    return table


def autoregressive_table(
    model: PreTrainedModel,
    targets: dict[str, TreeTarget],
    prompt: list[int],
    max_new: int,
    device: str,
    bandwidth: float,
    compile_: bool,
    repeats: int,
) -> tuple[Table, float]:
    """(a): ms per token of the autoregressive loops, over the memory roofline; also the captured
    speculab loop's ms per token (the projection's baseline)."""
    ids = torch.tensor([prompt], device=device)
    mean_context = len(prompt) + max_new / 2
    roofline_ms = (weight_bytes(model) + kv_bytes_per_token(model) * mean_context) / bandwidth / 1e6

    def hf(static: bool) -> Callable[[int], object]:
        return generate_loop(model, ids, static)

    def speculab_loop(target: TreeTarget) -> Callable[[int], object]:
        return lambda n: autoregressive(target, [prompt], DecodeSettings(1, 0, SamplingParams(0.0), n, 1, 0, None))

    # speculab's captured loop first (the projection's baseline), the compile (minutes) last
    rows: list[tuple[str, Callable[[int], object] | None]] = [
        *((f"speculab autoregressive loop, {passes}", speculab_loop(t)) for passes, t in reversed(targets.items())),
        ("transformers generate, eager, dynamic cache", hf(False)),
        ("transformers generate, static cache + torch.compile", hf(True) if compile_ else None),
    ]
    table = Table(
        "loop",
        "ms / token",
        "x roofline",
        title=f"(a) autoregressive decoding, {len(prompt)}-token prompt, batch 1 (limit: speculab's captured loop "
        "at most generate's static + compile and 1.35x the roofline)",
    )
    measured: list[float] = []
    with torch.inference_mode():
        for name, run in rows:
            if run is None:
                table.add_row(name, "not run (--compile on the CPU)", "")
                continue
            measured.append(step_ms(run, device, max_new, repeats))
            table.add_row(name, f"{measured[-1]:.2f}", f"{measured[-1] / roofline_ms:.2f}")
            print(f"(a) {name}: {measured[-1]:.2f} ms / token", flush=True)  # a row before a slow compile
    table.add_row("memory roofline (weights + mean KV per step / measured bandwidth)", f"{roofline_ms:.2f}", "1.00")
    return table, measured[0]  # speculab's captured loop


# The DDTree paper's Qwen3-8B HumanEval T = 0 points: (method, tau, speedup over its autoregressive baseline).
# The DDTree paper's Table 1, Qwen3-8B, HumanEval, T = 0: (tau including the bonus token, speedup over
# autoregressive decoding on its H200s) of vanilla DFlash (a chain of 16) and of DDTree at its best budget.
PAPER_CHAIN, PAPER_TREE = (6.61, 4.84), (9.67, 6.90)


def round_rows(nodes: int) -> str:
    """A round's name in (p): the DFlash chain (16 nodes, its block) or a DDTree of `nodes` nodes."""
    return "DFlash chain" if nodes == 16 else f"DDTree, B = {nodes - 1}"


def projection_table(
    ar_ms: float,
    block_ms: float,
    tree_ms: dict[int, float],
    build_ms: dict[int, float],
    other_ms: float,
    verify_ms: dict[int, float],
) -> Table:
    """(p): a DFlash round's measured costs at each tree size (the block pass, the tree build, the target
    pass over the tree, its verification, the loop's rest with the commit), what a tree must gain in
    acceptance length over the chain to pay for its round (round ms over the chain's: the break-even
    tau ratio), and the speedup over speculab's captured autoregressive loop projected with the DDTree
    paper's acceptance (tau x ms a token / ms a round; labelled a projection: the paper's tau, this
    run's costs)."""
    table = Table(
        "round",
        "block ms",
        "build ms",
        "tree pass ms",
        "verify ms",
        "rest ms",
        "round ms",
        "break-even tau / chain's",
        "needs tau",
        "projected at the paper's tau",
        "paper",
        title=(
            "(p) a DFlash round by tree size; projected speedups over speculab's captured autoregressive loop use "
            f"the DDTree paper's Qwen3-8B HumanEval T = 0 acceptance (Table 1: chain tau {PAPER_CHAIN[0]}, "
            f"DDTree at its best budget {PAPER_TREE[0]})"
        ),
    )
    # the chain's tree is its block's argmaxes, built in the block pass's wake: no build of its own
    rounds = {n: block_ms + (build_ms[n] if n != 16 else 0.0) + tree_ms[n] + verify_ms[n] + other_ms for n in build_ms}
    chain = rounds[16]
    for n, round_ms in rounds.items():
        tau, paper = PAPER_CHAIN if n == 16 else PAPER_TREE
        table.add_row(
            round_rows(n),
            f"{block_ms:.3f}",
            f"{build_ms[n]:.3f}" if n != 16 else "-",
            f"{tree_ms[n]:.3f}",
            f"{verify_ms[n]:.3f}",
            f"{other_ms:.3f}",
            f"{round_ms:.3f}",
            f"{round_ms / chain:.2f}",
            f"{PAPER_CHAIN[0] * round_ms / chain:.2f}",
            f"{tau * ar_ms / round_ms:.2f}x",
            f"{paper:.2f}x",
        )
    return table


def acceptance_table(device: str, max_new: int, budgets: tuple[int, ...]) -> Table:
    """(q): the shipped tiny pair's own acceptance by DDTree budget, T = 0, 4 HumanEval prompts: tau
    (tokens a round emits, the bonus included) of the DFlash chain and of DDTree at each budget, and its
    gain over the chain: the measured shape of the curve the projection's paper points sit on."""
    prompts, target, source, layout = tiny_dflash_pair(device, "eager")
    L = layout.block_size - 1
    builders = {
        "DFlash chain": (tree_builder("chain", 0), L + 1),
        **{f"DDTree, B = {b}": (tree_builder("best_first", b), b + 1) for b in budgets},
    }
    table = Table(
        "tree",
        "tau",
        "gain over the chain",
        title=f"(q) the tiny pair's acceptance by budget, T = 0, {max_new} tokens a prompt",
    )
    chain_tau = 0.0
    for name, (build, nodes) in builders.items():
        settings = DecodeSettings(1, L, SamplingParams(0.0), max_new, 1, 0, None, nodes)
        run = decode(target, TreeDrafter(source, build), get_verifier("ddtree"), prompts, settings)
        tau = sum(map(len, (p.tokens for p in run.prompts))) / len(run.rounds)
        chain_tau = chain_tau or tau
        table.add_row(name, f"{tau:.2f}", f"{tau / chain_tau:.2f}")
    return table


def tree_costs(
    vocab: int, device: str, repeats: int, sizes: tuple[int, ...]
) -> tuple[dict[int, float], dict[int, float]]:
    """(DDTree build ms, verification ms) per node count: best-first trees from random 15-position
    marginals on `device` (16 nodes: the chain of argmaxes), verified at T = 0 against one-hot
    target probabilities."""
    gen = torch.Generator().manual_seed(7)
    q = torch.softmax(4 * torch.randn(1, 15, vocab, generator=gen), dim=-1).to(device)
    root = torch.zeros(1, dtype=torch.long, device=device)
    verifier = get_verifier("ddtree")
    build, verify = {}, {}
    for n in sizes:
        build[n] = elapsed_ms(lambda n=n: best_first(q, root, n - 1), device, repeats)  # n nodes: budget n - 1
        tree = best_first(q, root, n - 1) if n > 16 else chain_tree(q, root)  # 16 nodes: the chain of a block
        p = (
            torch.nn.functional.one_hot(torch.randint(0, vocab, tree.tokens.shape, generator=gen), vocab)
            .float()
            .to(device)
        )
        verify[n] = elapsed_ms(lambda tree=tree, p=p: verifier(tree, p, rng=gen), device, repeats)
    return build, verify


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", choices=("llama", "qwen3"), default="llama")
    parser.add_argument("--small", action="store_true", help="CPU-sized shapes in float32 (automatic without a GPU)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--max-new-tokens", type=int, default=None, help="decode steps timed (default 128 GPU, 16 small)"
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="on the CPU too: time generate's static-cache compile and speculab's inductor-compiled layers",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--tables", default="becdatpq", help="the tables to run, by letter (default: all, becdatpq)")
    parser.add_argument("--sizes", type=ints, default=None, help="tree nodes of table (b), comma-separated")
    parser.add_argument("--contexts", type=ints, default=None, help="context lengths of table (b), comma-separated")
    parser.add_argument("--vocabs", type=ints, default=None, help="vocabularies of table (c), comma-separated")
    parser.add_argument("--verifiers", type=lambda s: tuple(s.split(",")), default=PATH_ALGORITHMS, help="of (c)")
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
    contexts, sizes = args.contexts or contexts, args.sizes or sizes
    tables = set(args.tables)
    console = Console(width=150)

    model = random_model(arch, target_shape, vocab, dtype, device, seed=1)
    draft = random_model(arch, draft_shape, vocab, dtype, device, seed=2)
    compile_ = device == "cuda" or args.compile
    captured = "captured" if device == "cuda" else "fixed shapes"
    fixed = "graphs" if device == "cuda" else "static"
    # name -> (passes, layers compiled by inductor): the last one is each table's headline
    passes = {"eager": ("eager", False), captured: (fixed, False)} | (
        {f"{captured} + inductor": (fixed, True)} if compile_ else {}
    )
    targets = {
        name: TreeTarget(LMSpec("hf", model=model, device=device, passes=p, compile=c))
        for name, (p, c) in passes.items()
    }
    drafts = {
        name: DraftModel(LMSpec("hf", model=draft, device=device, passes=p, compile=c))
        for name, (p, c) in passes.items()
    }
    bandwidth = bandwidth_gbs(device, args.repeats)
    flop_rate = matmul_tflops(device, dtype, args.repeats)
    where = (
        f"{torch.cuda.get_device_name()}, CUDA {torch.version.cuda}"
        if device == "cuda"
        else f"CPU, {args.threads} thread(s)"
    )
    console.print(
        f"{where}; torch {torch.__version__}; {dtype}; {arch} shapes: target {weight_bytes(model) / 1e9:.2f} GB "
        f"{target_shape}, draft {weight_bytes(draft) / 1e9:.3f} GB {draft_shape}, vocab {vocab}; "
        f"copy bandwidth {bandwidth:.0f} GB/s, matmul {flop_rate:.1f} TFLOP/s; "
        f"models built in {time.perf_counter() - start:.0f} s"
    )
    gen = torch.Generator().manual_seed(0)
    params = sum(p.numel() for p in model.parameters())
    if "b" in tables:
        table, tree_ms = tree_pass_table(targets, vocab, contexts, sizes, device, args.repeats, flop_rate, params)
        console.print(table)
    if "e" in tables:
        block = dflash_block_times(small, device, dtype, contexts[0] // 2, args.repeats)
        console.print(draft_step_table(drafts, vocab, contexts[0] // 2, device, args.repeats, block))
    if "d" in tables:
        prompts = [torch.randint(0, vocab, (contexts[0],), generator=gen).tolist() for _ in range(2)]
        table, other_ms = split_table({name: (targets[name], drafts[name]) for name in passes}, prompts, max_new)
        console.print(table)
    if "c" in tables:
        vocabs = args.vocabs or ((vocab,) if small else VOCABS)
        console.print(verifier_table(vocabs, args.verifiers, device, bandwidth, args.repeats))
    if "a" in tables:
        prompt = torch.randint(0, vocab, (64 if small else 512,), generator=gen).tolist()
        table, ar_ms = autoregressive_table(model, targets, prompt, max_new, device, bandwidth, compile_, args.repeats)
        console.print(table)
    if "t" in tables:
        console.print(tiny_pair_table(device, compile_, args.repeats, max_new if small else 128))
    if {"b", "e", "d", "a", "p"} <= tables:  # the projection reads the other tables' figures
        projected = tuple(n for n in sorted(tree_ms) if n >= 16)  # the chain's 16 nodes, then every tree
        build_ms, verify_ms = tree_costs(vocab, device, args.repeats, projected)
        console.print(projection_table(ar_ms, block[-1].median, tree_ms, build_ms, other_ms, verify_ms))
    if "q" in tables:
        console.print(acceptance_table(device, max_new if small else 128, BUDGETS[:5] if small else BUDGETS))
    console.print(f"done in {time.perf_counter() - start:.0f} s")


def ints(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(","))


if __name__ == "__main__":
    main()
