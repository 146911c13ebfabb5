"""Functions replayed from CUDA graphs, one graph per shape: the models' fixed-shape passes
(`models.static_pass`, `models.dflash`) and a path verifier's decision (`CapturedPaths`).

A CUDA graph replays fixed kernels over fixed addresses, so what it replays may read only tensors
that stay put between runs, and everything a replay depends on (shapes, Python values, addresses)
must name its graph. `Graphs` keeps one model's or one verifier's graphs in one memory pool; disabled
(the CPU, the exact tests) the same functions run eagerly, through the same buffers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import torch

from speculab.syncs import sync_debug_off
from speculab.verify.contracts import DrawnPathVerifier, PathVerifier
from speculab.verify.decisions import draw_uniforms
from speculab.verify.verdict import Verdict


class Graphs:
    """One model's CUDA graphs, one per shape key, in one memory pool; disabled (the CPU, the exact
    tests), the same functions run eagerly."""

    def __init__(self, enabled: bool) -> None:
        if enabled and not torch.cuda.is_available():
            raise ValueError("CUDA graphs (model.capture=true) need a CUDA device; this machine has none")
        self.enabled = enabled
        self.pool: Any = torch.cuda.graph_pool_handle() if enabled else None  # torch's opaque handle
        self.captured: dict[Hashable, tuple[torch.cuda.CUDAGraph, tuple[torch.Tensor | None, ...]]] = {}
        self.anchor: torch.Tensor | None = None

    def bind(self, anchor: torch.Tensor) -> None:
        """Drop every graph when the cache buffers they write moved (a new batch's capacity, a grown
        cache). anchor: the first layer's key buffer; all layers' buffers move together. Holding it keeps
        its memory from returning at the same address while graphs over it exist: a graph keyed by an
        address could otherwise replay over another batch's buffers."""
        if anchor is not self.anchor:
            self.captured.clear()
            self.anchor = anchor
            if self.enabled:  # the old pool dies with its last graph: capturing into it again fails an allocator assert
                self.pool = torch.cuda.graph_pool_handle()

    def run(
        self, key: Hashable, forward: Callable[[], tuple[torch.Tensor | None, ...]]
    ) -> tuple[torch.Tensor | None, ...]:
        """forward(), replayed from key's graph (captured at its first run). forward must read only
        tensors that stay put between runs (its inputs' buffers, the weights, the cache's buffers)
        and key must name every shape and Python value it depends on (addresses: `bind`). The outputs are
        copies: the next replay overwrites the graph's own."""
        if not self.enabled:
            return forward()
        if key not in self.captured:
            self.captured[key] = self._capture(forward)
        graph, outputs = self.captured[key]
        graph.replay()
        return tuple(None if t is None else t.clone() for t in outputs)

    def _capture(
        self, forward: Callable[[], tuple[torch.Tensor | None, ...]]
    ) -> tuple[torch.cuda.CUDAGraph, tuple[torch.Tensor | None, ...]]:
        """Warm up on a side stream (as CUDA graph capture requires), then capture one run. The warm-up
        writes what the replay that follows writes again (a pass's keys and values, at its slots)."""
        with sync_debug_off():  # capture synchronises once per shape: not a round's host read
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                forward()
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                outputs = forward()
        return graph, outputs


@dataclass(frozen=True)
class TensorField:
    """A carry's tensor field, as a graph's key names it."""

    shape: tuple[int, ...]
    dtype: torch.dtype


# A carry (`Verdict.carry`: None, or a dataclass of tensors and Python values) as a graph sees it: its
# class and each field's value, a tensor's as its `TensorField`
CarryKind = tuple[type, tuple[tuple[str, Any], ...]] | None


def carry_parts(carry: Any) -> tuple[tuple[torch.Tensor, ...], CarryKind]:
    """(carry's tensor fields in field order, its kind): what a graph reads and what keys it."""
    if carry is None:
        return (), None
    tensors, named = [], []
    for f in dataclasses.fields(carry):
        value = getattr(carry, f.name)
        if isinstance(value, torch.Tensor):
            tensors.append(value)
            value = TensorField(tuple(value.shape), value.dtype)
        named.append((f.name, value))
    return tuple(tensors), (type(carry), tuple(named))


def carry_from(kind: CarryKind, tensors: tuple[torch.Tensor | None, ...]) -> Any:
    """The carry of `kind` with `tensors` in its tensor fields (the inverse of `carry_parts`)."""
    if kind is None:
        return None
    cls, named = kind
    left = iter(tensors)
    return cls(**{name: next(left) if isinstance(value, TensorField) else value for name, value in named})


class CapturedPaths:
    """A `DrawnPathVerifier` whose decision (`decide`) reads its inputs from buffers kept per
    (paths, p, q and carry shapes and dtypes), replayed from one CUDA graph per such key when
    `graphs` is enabled: a round's verification is then one replay, not a Python loop of kernel
    launches. The uniforms are drawn first, outside the graph (a generator's draw is the one step a
    graph cannot hold), exactly as the verifier draws them, so the same seed gives the same verdict
    captured and eager. The inputs are copied into the buffers (p and q: [B, K, L+1, V] and
    [B, K, L, V], a few tens of MB at V = 128k: microseconds on a GPU)."""

    def __init__(self, verifier: DrawnPathVerifier, graphs: Graphs) -> None:
        self.verifier, self.graphs = verifier, graphs
        self.buffers: dict[Hashable, tuple[torch.Tensor, ...]] = {}
        self.out_kinds: dict[Hashable, CarryKind] = {}  # each key's verdict carry kind, set as it runs

    def __call__(
        self, paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor, *, rng: torch.Generator, carry: Any = None
    ) -> Verdict:
        B, K, L = paths.shape
        u = draw_uniforms(rng, B, self.verifier.uniforms(K, L), p.device)
        carried, kind = carry_parts(carry)
        inputs = (paths, p, q, u, *carried)
        key = (*((tuple(t.shape), t.dtype) for t in inputs), kind)
        buffers = self.buffers.get(key)
        if buffers is None:
            buffers = self.buffers[key] = tuple(torch.empty_like(t) for t in inputs)
        for buffer, value in zip(buffers, inputs, strict=True):
            buffer.copy_(value)

        def forward() -> tuple[torch.Tensor | None, ...]:
            paths_in, p_in, q_in, u_in = buffers[:4]
            verdict = self.verifier.decide(paths_in, p_in, q_in, u_in, carry_from(kind, buffers[4:]))
            out, self.out_kinds[key] = carry_parts(verdict.carry)
            return verdict.tokens, verdict.num_tokens, verdict.path, *out

        tokens, num_tokens, path, *out = self.graphs.run(key, forward)
        assert tokens is not None and num_tokens is not None and path is not None
        return Verdict(tokens, num_tokens, path, carry_from(self.out_kinds[key], tuple(out)))


def replayed(passes: str) -> Callable[[DrawnPathVerifier], PathVerifier] | None:
    """How a point's path verifier runs, by `models.static_pass.PASSES`: None (eager) as it is; else its
    decision through `CapturedPaths`' buffers ("static": the CPU's check of what graphs replay), replayed
    from CUDA graphs with "graphs"."""
    if passes == "eager":
        return None
    return lambda verifier: CapturedPaths(verifier, Graphs(passes == "graphs"))
