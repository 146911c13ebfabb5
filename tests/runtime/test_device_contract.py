"""The device contract at role boundaries, checked on a CPU-only machine under torch's
`FakeTensorMode`, where `cuda` tensors exist without a GPU and an op mixing devices raises:
a Ray model actor hands every tensor back on the CPU, and a model takes a tree built elsewhere
to its own device. (Decoding itself reads counts on the host, which fake tensors cannot; the
`gpu` tests run it on CUDA.)"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from speculab.drafting.tree import DraftTree, Proposal
from speculab.runtime.ray_actors import on_host

CUDA = torch.device("cuda", 0)  # fake tensors take an indexed device: "cuda" asks the absent driver which


def tree(device: str = "cpu") -> DraftTree:
    """A 2-row tree of 5 nodes, built field by field (its builders read sizes on the host)."""
    long = {"dtype": torch.long, "device": device}
    return DraftTree(
        torch.zeros(2, 5, **long),
        torch.zeros(2, 5, **long),
        torch.zeros(2, 5, **long),
        torch.ones(2, 5, dtype=torch.bool, device=device),
        torch.zeros(2, 3, 3, **long),
    )


class Pair(NamedTuple):
    a: torch.Tensor
    b: int


@dataclass(frozen=True)
class Holder:
    x: torch.Tensor
    note: str


def test_an_actor_hands_back_every_tensor_on_the_cpu_keeping_the_structure() -> None:
    with FakeTensorMode():
        value = (
            Proposal(tree("cuda"), torch.ones(2, 3, 4, device="cuda"), torch.ones(2, 3, 4, 8, device="cuda")),
            [Pair(torch.ones(3, device="cuda"), 1)],
            {"features": torch.ones(2, 5, 16, device="cuda"), "none": None},
            Holder(torch.ones(1, device="cuda"), "kept"),
        )
        proposal, [pair], mapping, holder = on_host(value)
    tensors = [
        proposal.tree.tokens,
        proposal.tree.path_nodes,
        proposal.paths,
        proposal.q,
        pair.a,
        mapping["features"],
        holder.x,
    ]
    assert all(t.device.type == "cpu" for t in tensors)
    assert isinstance(pair, Pair) and pair.b == 1 and holder.note == "kept" and mapping["none"] is None
    assert proposal.q.shape == (2, 3, 4, 8)


def test_a_tree_moves_whole_to_a_model_device() -> None:
    with FakeTensorMode():
        built = tree()
        moved = built.to(CUDA)
        valid = torch.zeros(2, 1, dtype=torch.bool, device=CUDA)
        torch.cat([valid, moved.valid], dim=1)  # TreeLM.extend's first op on the tree: no device mix
    assert {t.device.type for t in (moved.tokens, moved.parents, moved.depth, moved.valid, moved.path_nodes)} == {
        "cuda"
    }
    assert built.to("cpu") is built
