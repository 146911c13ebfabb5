"""A path verifier's decision replayed from CUDA graphs, one graph per shape (`CapturedPaths`, over
`device.graphs.Graphs`): what it replays may read only tensors that stay put between runs, so its
inputs and its carry go through buffers kept per shape, and everything a replay depends on names its
graph. Disabled (the CPU, the exact tests) the same decision runs eagerly, through the same buffers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import torch

from speculab.device.graphs import Graphs
from speculab.verify.contracts import DrawnPathVerifier, PathVerifier
from speculab.verify.decisions import draw_uniforms
from speculab.verify.verdict import Verdict


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
