"""The two verifier contracts and the one shape check at their boundary.

A `PathVerifier` verifies K drafted paths per prompt (token, block, GBV, SpecTr, ...); a
`TreeVerifier` verifies one deterministic draft tree per prompt (the DDTree walk). Both draw
every random number from ``rng`` and return a `Verdict`. Verifiers themselves assume well-formed
inputs; `checked` wraps one so that a wrong-shaped tensor fails on entry, naming the tensor and
the shape it should have, instead of deep inside the algorithm. The registry
(`speculab.registry`) hands out only checked verifiers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from speculab.drafting.tree import DraftTree

from .decisions import draw_uniforms
from .verdict import Verdict


class PathVerifier(Protocol):
    def __call__(
        self,
        paths: torch.Tensor,  # [B, K, L] int64 drafted tokens
        p: torch.Tensor,  # [B, K, L+1, V] target probabilities at every path position, root first
        q: torch.Tensor,  # [B, K, L, V] draft probabilities that produced each drafted token
        *,
        rng: torch.Generator,
        carry: Any = None,  # the previous round's Verdict.carry (None in a first round)
    ) -> Verdict: ...


class TreeVerifier(Protocol):
    def __call__(
        self,
        tree: DraftTree,  # B trees of N nodes (tree.path_nodes [B, K, L+1])
        p: torch.Tensor,  # [B, N, V] target probabilities at every node
        *,
        rng: torch.Generator,
    ) -> Verdict: ...


# paths [B, K, L]; p [B, K, L+1, V]; q [B, K, L, V]; u [B, n] uniforms; carry as in PathVerifier
PathDecision = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, Any], Verdict]


@dataclass(frozen=True)
class DrawnPathVerifier:
    """A `PathVerifier` split where capture needs it: the uniforms, then a pure tensor function.

    Drawing from a ``torch.Generator`` (the run's, on the CPU) is the one step a captured graph
    cannot contain, so the call draws the ``[B, n]`` table up front, n fixed by (K, L), and
    ``decide`` turns it into the verdict with no host read on a GPU (``torch.compile(decide,
    fullgraph=True)`` traces it whole for fixed shapes). Each row consumes its uniforms in the
    scalar reference's order, so ``replay_decisions(u[b])`` reproduces row b.
    """

    decide: PathDecision
    uniforms: Callable[[int, int], int]  # (K, L) -> n uniforms per row

    def __call__(
        self, paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor, *, rng: torch.Generator, carry: Any = None
    ) -> Verdict:
        batch, count, length = paths.shape
        return self.decide(paths, p, q, draw_uniforms(rng, batch, self.uniforms(count, length), p.device), carry)


class ContractError(ValueError):
    """A verifier input that breaks the contract: names the tensor and the expected shape."""


def _expect(ok: bool, name: str, tensor: torch.Tensor, expected: str) -> None:
    if not ok:
        raise ContractError(f"{name}: expected {expected}, got shape {list(tensor.shape)} dtype {tensor.dtype}")


def check_path_inputs(paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor) -> None:
    """paths [B, K, L] int64, p [B, K, L+1, V] and q [B, K, L, V] floating, same B, K, L and V."""
    _expect(paths.dim() == 3 and paths.dtype == torch.int64, "paths", paths, "[B, K, L] int64")
    B, K, L = paths.shape
    _expect(
        p.dim() == 4 and tuple(p.shape[:3]) == (B, K, L + 1) and p.is_floating_point(),
        "p",
        p,
        f"[B, K, L+1, V] floating = [{B}, {K}, {L + 1}, V]",
    )
    V = p.shape[3]
    _expect(
        tuple(q.shape) == (B, K, L, V) and q.is_floating_point(),
        "q",
        q,
        f"[B, K, L, V] floating = [{B}, {K}, {L}, {V}]",
    )


def check_tree_inputs(tree: DraftTree, p: torch.Tensor) -> None:
    """tree.tokens [B, N] int64 with path_nodes [B, K, L+1]; p [B, N, V] floating."""
    tokens = tree.tokens
    _expect(tokens.dim() == 2 and tokens.dtype == torch.int64, "tree.tokens", tokens, "[B, N] int64")
    B, N = tokens.shape
    if tree.path_nodes is None:
        raise ContractError("tree.path_nodes: expected [B, K, L+1] int64, got None")
    _expect(
        tree.path_nodes.dim() == 3 and tree.path_nodes.shape[0] == B,
        "tree.path_nodes",
        tree.path_nodes,
        f"[B, K, L+1] int64 = [{B}, K, L+1]",
    )
    _expect(
        p.dim() == 3 and tuple(p.shape[:2]) == (B, N) and p.is_floating_point(),
        "p",
        p,
        f"[B, N, V] floating = [{B}, {N}, V]",
    )


def checked_path_verifier(verify: PathVerifier) -> PathVerifier:
    """``verify`` behind `check_path_inputs`."""

    def call(
        paths: torch.Tensor, p: torch.Tensor, q: torch.Tensor, *, rng: torch.Generator, carry: Any = None
    ) -> Verdict:
        check_path_inputs(paths, p, q)
        return verify(paths, p, q, rng=rng, carry=carry)

    return call


def checked_tree_verifier(verify: TreeVerifier) -> TreeVerifier:
    """``verify`` behind `check_tree_inputs`."""

    def call(tree: DraftTree, p: torch.Tensor, *, rng: torch.Generator) -> Verdict:
        check_tree_inputs(tree, p)
        return verify(tree, p, rng=rng)

    return call
