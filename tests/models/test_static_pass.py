"""The fixed-shape passes CUDA graphs replay (`models.static_pass`), checked on the CPU: they decode
what eager passes decode, and torch.compile(fullgraph=True) takes them whole and compiles each
(batch size, bucket) once, whatever the cache length. The CUDA graphs themselves are checked in
tests/gpu/test_capture_cuda.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import speculab.models.static_pass as static_pass
from speculab.config import Config, passes_on
from speculab.drafting.tree import DraftTree
from speculab.models.hf import TreeLM, load_causal_lm
from support.engine import tiny_pair_batch
from support.models import TINY_PAIR

TARGET = str(TINY_PAIR / "target")


def test_buckets_hold_the_nodes_and_stop_at_the_largest() -> None:
    assert [static_pass.bucket(n) for n in (1, 2, 3, 4, 16, 17, 65, 257)] == [1, 2, 3, 5, 17, 17, 65, 257]
    assert static_pass.bucket(258) is None  # compute bound past a root and 256 nodes: eager


@pytest.mark.parametrize(("drafter_kind", "temperature"), [("draft", 0.0), ("draft", 1.0), ("dflash", 0.0)])
def test_static_passes_decode_the_eager_tokens(drafter_kind: str, temperature: float) -> None:
    """Prompts of different lengths in one batch (holes, repacks, rows leaving); the DFlash drafter's
    block pass over its whole context capacity too; at T = 1 as well, as the
    same seeds draw the same tokens from probabilities equal to float32 rounding."""
    static, target, draft_model = tiny_pair_batch("static", drafter_kind, temperature)
    assert target.lm.static is not None and target.lm.static.shapes  # the fixed-shape passes ran
    if drafter_kind == "dflash":
        assert draft_model.lm.block_inputs  # its block passes too
    eager = tiny_pair_batch("eager", drafter_kind, temperature)[0]
    assert [p.tokens for p in static.prompts] == [p.tokens for p in eager.prompts]


def _counting_compile(compiles: list[Any]) -> Callable[..., Any]:
    """static_forward under torch.compile(fullgraph=True): a graph break raises; each compile is counted."""

    def backend(graph: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
        compiles.append(graph)
        return graph.forward

    return torch.compile(static_pass.static_forward, backend=backend, fullgraph=True, dynamic=False)


def test_compiled_static_passes_compile_once_per_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    """A prefill, then rounds of a 3-node tree and a 1-token step over a growing cache: the cache
    length is data, so each (batch size, bucket, last-only) shape compiles once and never again."""
    torch._dynamo.reset()
    compiles: list[Any] = []
    monkeypatch.setattr(static_pass, "static_forward", _counting_compile(compiles))
    lm = TreeLM(load_causal_lm(TARGET), passes="static")
    eager = TreeLM(lm.model)
    for model in (lm, eager):
        model.reset(2, 64)
        model.feed([[5, 6, 7, 8], [9, 10]])  # bucket 5, last only
    logits: dict[TreeLM, list[torch.Tensor]] = {lm: [], eager: []}
    for step in range(6):
        tree = DraftTree.from_paths(torch.tensor([11, 12]), torch.tensor([[[13 + step, 14]], [[15, 16 + step]]]))
        for model in (lm, eager):
            logits[model].append(model.extend(tree))  # 3 nodes: bucket 3, every logit
            model.commit(torch.tensor([[0, 1], [0, -1]]))
            logits[model].append(model.feed([[20 + step], [21]]))  # bucket 1, last only
    shapes = {(2, 4, True), (2, 4, False), (2, 1, True)}
    assert len(compiles) == len(shapes)  # not once per cache length
    for static, plain in zip(logits[lm], logits[eager], strict=True):
        torch.testing.assert_close(static, plain, atol=1e-5, rtol=1e-5)
    torch._dynamo.reset()


def test_bad_passes_are_refused_naming_the_choices() -> None:
    model = load_causal_lm(TARGET)
    with pytest.raises(ValueError, match="eager, static, graphs; got 'cuda'"):
        TreeLM(model, passes="cuda")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA graphs .* need a CUDA device"):
            TreeLM(model, passes="graphs")


def test_capture_is_on_by_default_on_cuda_only() -> None:
    """`model.capture` (default true) picks CUDA graphs on a GPU; the CPU and capture=false run eagerly."""
    assert Config().model.capture is True
    assert [passes_on(device, True) for device in ("cuda", "cuda:1", "cpu")] == ["graphs", "graphs", "eager"]
    assert passes_on("cuda", False) == "eager"


def test_graphs_are_dropped_when_the_cache_buffers_move() -> None:
    """A graph replays over the addresses it was captured on: once the buffers move, every graph goes,
    and the old first buffer is held so that a new allocation cannot return at its address meanwhile."""
    graphs = static_pass.Graphs(enabled=False)
    first, second = torch.zeros(2), torch.zeros(2)
    graphs.bind(first)
    graphs.captured["shape"] = None  # type: ignore[assignment]  # stands for a captured graph
    graphs.bind(first)
    assert "shape" in graphs.captured
    graphs.bind(second)
    assert graphs.captured == {} and graphs.anchor is second
