"""CUDA graphs per shape in one memory pool (`Graphs`): what the models' fixed-shape passes
(`models.static_pass`, `models.dflash`) and a path verifier's decision (`verify.captured`) replay.

A CUDA graph replays fixed kernels over fixed addresses, so what it replays may read only tensors
that stay put between runs, and everything a replay depends on (shapes, Python values, addresses)
must name its graph. Disabled (the CPU, the exact tests) the same functions run eagerly, through the
same buffers.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import torch

from speculab.device.syncs import sync_debug_off


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
