"""A lean stack's pass over fixed shapes: what a CUDA graph replays and torch.compile compiles once.

An eager pass takes the shapes of the moment, N new nodes after S slots, so a CUDA graph (fixed
shapes and addresses) cannot replay it and torch.compile recompiles on every new S. The static
pass removes both from the shapes:

- the N nodes are padded up to a bucket of Nb columns (`bucket`); a padding column attends to
  its own slot only, and its logits are never read;
- attention runs over the cache's whole capacity C, the slots past S + N masked out;
- keys and values are written with `index_copy_` at the slots `start + arange(Nb)`, a tensor,
  so S is data, not a shape or a Python number. The padding columns' slots lie past S + N,
  where the next pass writes anyway.

`LayerSlots` is a layer's cache as the lean layers (`models.lean.lean_layers`) see it: its `update`
writes in place and hands back the whole buffers, so the static and the eager pass share one layer
function. The logits equal the eager pass's (masked slots add exact zeros to the softmax; the
tests compare them on the CPU, eager and compiled).

`compiled_pass` compiles that layer function with inductor (`model.compile`): the kernels between
the matmuls (float32 norms, rotary, residual adds) fuse into a few. Every layer of a stack has the
same shapes and hands in only tensors, so one compile per pass shape serves them all: seconds, where
compiling a whole 32-layer pass per bucket would take minutes each.

`StaticPasses` runs them for a `TreeLM` (`model.capture`) through `Graphs`: on CUDA each
(batch size, bucket, last-only) shape is captured once as a CUDA graph over the cache's buffers
and replayed; disabled (passes "static": the CPU, the exact tests) the same function runs
eagerly. A pass of more than the largest bucket's nodes (a long prefill: compute bound, and run
once) stays eager. The DFlash drafter's block pass uses `Graphs` the same way (`models.dflash`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial, wraps
from typing import ParamSpec, TypeVar

import torch

from speculab.device.graphs import Graphs
from speculab.models.lean import Decoder, LayerFn, LeanStack, decoder_forward, lean_layer, lean_layers
from speculab.models.slots import Buffers

# How a model's passes run: at the shapes of the moment; at fixed shapes, eagerly (the CPU check of what
# graphs replay); at fixed shapes replayed from CUDA graphs.
PASSES = ("eager", "static", "graphs")


def check_passes(passes: str) -> None:
    """ValueError unless `passes` is one of PASSES."""
    if passes not in PASSES:
        raise ValueError(f"passes must be one of {', '.join(PASSES)}; got {passes!r}")


# Node counts a pass is padded up to: one graph per (batch size, bucket). A draft tree is a root plus
# a round number of nodes (DDTree's budget B, K paths of L), so the buckets are 2^k + 1: a budget of
# 256 fits its own bucket instead of missing 256 and running eagerly. A tree of up to 257 nodes is
# launch bound on a GPU; past that a pass is compute bound and runs eagerly.
BUCKETS = (1, 2, 3, 5, 9, 17, 33, 65, 129, 257)


def bucket(n: int, buckets: tuple[int, ...] = BUCKETS) -> int | None:
    """The smallest bucket that holds n nodes, or None past the largest."""
    return next((b for b in buckets if b >= n), None)


@dataclass(frozen=True)
class StaticInputs:
    """What a static pass reads besides the weights and the cache, in buffers allocated once per
    (batch size, bucket, capacity): a captured graph reads these very tensors, and each pass
    writes its values into them (`fill`)."""

    tokens: torch.Tensor  # [B, Nb] long: the nodes, then padding
    positions: torch.Tensor  # [B, Nb] long: rotary positions
    slots: torch.Tensor  # [Nb] long: the cache slots the columns write
    mask: torch.Tensor  # [B, 1, Nb, C] additive: 0 where a column may attend, the dtype's min elsewhere
    last: torch.Tensor  # [1] long: the last node's column (N - 1), whose logits a last-only pass returns

    @staticmethod
    def empty(B: int, Nb: int, C: int, dtype: torch.dtype, device: torch.device) -> StaticInputs:
        return StaticInputs(
            torch.zeros(B, Nb, dtype=torch.long, device=device),
            torch.zeros(B, Nb, dtype=torch.long, device=device),
            torch.zeros(Nb, dtype=torch.long, device=device),
            torch.zeros(B, 1, Nb, C, dtype=dtype, device=device),
            torch.zeros(1, dtype=torch.long, device=device),
        )

    # tokens, positions [B, N]; allowed [B, N, S + N] bool: which slots each new node attends to
    def fill(self, tokens: torch.Tensor, positions: torch.Tensor, allowed: torch.Tensor) -> None:
        """The values of a pass over N nodes after S slots, padded to Nb columns over C slots."""
        N = tokens.shape[1]
        Nb, C = self.mask.shape[2:]
        S = allowed.shape[2] - N
        if S + Nb > C:
            raise ValueError(f"{N} nodes padded to {Nb} after {S} slots pass the cache's capacity of {C}")
        self.tokens.zero_()[:, :N] = tokens
        self.positions[:, :N] = positions
        self.positions[:, N:] = positions[:, -1:]
        torch.arange(S, S + Nb, out=self.slots)
        self.last.fill_(N - 1)
        minimum = torch.finfo(self.mask.dtype).min
        self.mask.fill_(minimum)[:, 0, :N, : S + N].masked_fill_(allowed, 0.0)
        # A padding column sees its own slot: a finite softmax, never read. A mask, not an index_put_ of
        # 0.0: that would copy the scalar to the device and wait for it.
        column = torch.arange(Nb, device=self.mask.device)[:, None]  # [Nb, 1]
        own = (torch.arange(C, device=self.mask.device) == S + column) & (column >= N)  # [Nb, C]
        self.mask[:, 0].masked_fill_(own, 0.0)


@dataclass(frozen=True)
class LayerSlots:
    """A layer's cache in a static pass (`models.lean.LayerKV`): its keys and values buffers
    [B, Hkv, C, hd], written in place at `slots`."""

    keys: torch.Tensor
    values: torch.Tensor
    slots: torch.Tensor  # [Nb] long

    # keys, values [B, Hkv, Nb, hd] -> the whole buffers [B, Hkv, C, hd]
    def update(self, key_states: torch.Tensor, value_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys.index_copy_(2, self.slots, key_states)
        self.values.index_copy_(2, self.slots, value_states)
        return self.keys, self.values


def static_forward(
    stack: LeanStack,
    decoder: Decoder,
    buffers: Buffers,
    inputs: StaticInputs,
    feature_layers: tuple[int, ...] = (),
    last_only: bool = False,
    layer: LayerFn = lean_layer,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(logits [B, Nb, V] or, last_only, [B, 1, V] at `inputs.last`; features [B, Nb, n * hidden] at
    feature_layers or None) of one pass over fixed shapes, its keys and values written into
    `buffers` at `inputs.slots`, each layer run by `layer` (`lean_layer`, or it compiled)."""

    def layers(
        hidden: torch.Tensor, cos: torch.Tensor | None, sin: torch.Tensor | None, outputs: list[torch.Tensor] | None
    ) -> torch.Tensor:
        kv = [LayerSlots(keys, values, inputs.slots) for keys, values in buffers]
        return lean_layers(stack, hidden, cos, sin, inputs.mask, kv.__getitem__, outputs, layer)

    def pick(hidden: torch.Tensor) -> torch.Tensor:
        return hidden.index_select(1, inputs.last) if last_only else hidden

    return decoder_forward(decoder, layers, inputs.tokens, inputs.positions, feature_layers, pick)


P = ParamSpec("P")
R = TypeVar("R")

# Each shape a compiled layer meets (batch size, bucket, capacity; each model's own widths) is one compile
# of the same function, whose code every model shares: far more than dynamo's default of 8 compiles a
# function, past which it would stop compiling.
RECOMPILE_LIMIT = 512
# torch.compile's backend for `compiled_pass`: inductor generates fused kernels (Triton on a GPU, C++ on
# the CPU); the suite's decodes swap in "eager" (the same whole-graph capture, no code generation: seconds)
BACKEND = "inductor"


def compiled_pass(fn: Callable[P, R]) -> Callable[P, R]:
    """fn compiled by torch.compile (`BACKEND`): whole (fullgraph, so a graph break fails instead of
    running parts eagerly) and once per shape (dynamic=False: the shapes are a few buckets, each worth
    kernels of its own). Captured in a CUDA graph after its first run, the compiled code runs only at
    capture: `mode` stays the default, as the graphs are `Graphs`'."""
    compiled = torch.compile(fn, backend=BACKEND, fullgraph=True, dynamic=False)

    @wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT, accumulated_recompile_limit=RECOMPILE_LIMIT):
            return compiled(*args, **kwargs)

    return run


def pass_layer(compile: bool) -> LayerFn:
    """The function a fixed-shape pass runs each layer with: `lean_layer`, compiled when asked."""
    return compiled_pass(lean_layer) if compile else lean_layer


@dataclass
class StaticPasses:
    """A lean model's passes over fixed shapes on its cache's buffers (`static_forward`), each layer run
    by `layer` (`lean_layer`, or it compiled: `compiled_pass`), replayed from CUDA graphs when `graphs`
    is enabled."""

    stack: LeanStack
    decoder: Decoder
    feature_layers: tuple[int, ...]
    graphs: Graphs
    layer: LayerFn = lean_layer
    shapes: dict[tuple[int, ...], StaticInputs] = field(default_factory=dict)

    # tokens, positions [B, N]; allowed [B, N, S + N] bool
    def run(
        self, buffers: Buffers, tokens: torch.Tensor, positions: torch.Tensor, allowed: torch.Tensor, last_only: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """(logits [B, N or 1, V], features [B, N, n * hidden] or None) of N nodes after S slots, written
        into `buffers` at [S, S + N); None when no bucket holds them within the capacity (run eagerly)."""
        B, N = tokens.shape
        C = buffers[0][0].shape[2]
        Nb = bucket(N)
        if Nb is None or allowed.shape[2] - N + Nb > C:
            return None
        key = (B, Nb, C, int(last_only))
        self.graphs.bind(buffers[0][0])
        inputs = self.shapes.get(key)
        if inputs is None:
            inputs = self.shapes[key] = StaticInputs.empty(B, Nb, C, buffers[0][0].dtype, tokens.device)
        inputs.fill(tokens, positions, allowed)
        forward = partial(
            static_forward, self.stack, self.decoder, buffers, inputs, self.feature_layers, last_only, self.layer
        )
        logits, features = self.graphs.run(key, forward)
        assert logits is not None
        return logits if last_only else logits[:, :N], None if features is None else features[:, :N]
