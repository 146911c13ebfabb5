"""The fixed-shape passes CUDA graphs replay (`models.static_pass`), checked on the CPU: they decode
what eager passes decode, and torch.compile(fullgraph=True) takes them whole and compiles each
(batch size, bucket) once, whatever the cache length; compiled (`compile=True`), they decode the same
tokens, and inductor's fused kernels give the eager logits. The CUDA graphs themselves are checked in
tests/gpu/test_capture_cuda.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import speculab.models.static_pass as static_pass
from speculab.config import Config, passes_on
from speculab.device.graphs import Graphs
from speculab.drafting.tree import DraftTree
from speculab.models.hf import TreeLM, load_causal_lm
from speculab.models.lean import lean_layer
from support.engine import tiny_pair_batch
from support.models import TINY_PAIR, save_random_lm

TARGET = str(TINY_PAIR / "target")


def test_buckets_hold_the_nodes_and_stop_at_the_largest() -> None:
    assert [static_pass.bucket(n) for n in (1, 2, 3, 4, 16, 17, 65, 257)] == [1, 2, 3, 5, 17, 17, 65, 257]
    assert static_pass.bucket(258) is None  # compute bound past a root and 256 nodes: eager


@pytest.mark.parametrize(
    ("drafter_kind", "temperature", "compile"),
    [("draft", 0.0, False), ("draft", 1.0, False), ("dflash", 0.0, False), ("dflash", 0.0, True)],
)
def test_static_passes_decode_the_eager_tokens(
    drafter_kind: str, temperature: float, compile: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prompts of different lengths in one batch (holes, repacks, rows leaving); the DFlash drafter's
    block pass over its whole context capacity too; at T = 1 as well, as the
    same seeds draw the same tokens from probabilities equal to float32 rounding. Compiled, both models'
    passes are taken whole by torch.compile (here by dynamo alone, without inductor's code generation: tens
    of seconds a shape on this CPU: its numerics are the next test's)."""
    monkeypatch.setattr(static_pass, "BACKEND", "eager")
    torch._dynamo.reset()
    static, target, draft_model = tiny_pair_batch("static", drafter_kind, temperature, compile=compile)
    assert target.lm.static is not None and target.lm.static.shapes  # the fixed-shape passes ran
    assert (target.lm.static.layer is lean_layer) is not compile
    if drafter_kind == "dflash":
        assert draft_model.lm.block_inputs  # its block passes too
        assert (draft_model.lm.layer is lean_layer) is not compile
    eager = tiny_pair_batch("eager", drafter_kind, temperature)[0]
    assert [p.tokens for p in static.prompts] == [p.tokens for p in eager.prompts]
    torch._dynamo.reset()


def test_inductor_passes_give_the_eager_logits(tmp_path) -> None:
    """Inductor's generated kernels (the fused norms, rotary and residual adds a GPU captures): a
    prefill of two rows and a three-node tree over them give the eager pass's logits to float32
    rounding, and the same greedy tokens. One layer: each shape is a C++ compile of its own here."""
    from torch._inductor import metrics

    torch._dynamo.reset()
    metrics.reset()
    model = load_causal_lm(str(save_random_lm(tmp_path / "lm", layers=1, hidden=64)))
    compiled, eager = TreeLM(model, passes="static", compile=True), TreeLM(model)
    tree = DraftTree.from_paths(torch.tensor([11, 12]), torch.tensor([[[13, 14]], [[15, 16]]]))
    logits = []
    for lm in (compiled, eager):
        lm.reset(2, 64)
        logits.append((lm.feed([[5, 6, 7, 8], [9, 10]]), lm.extend(tree)))
    assert metrics.generated_kernel_count > 0  # inductor wrote the passes' kernels
    for fused, plain in zip(*logits, strict=True):
        torch.testing.assert_close(fused, plain, atol=1e-5, rtol=1e-5)
        assert torch.equal(fused.argmax(-1), plain.argmax(-1))
    torch._dynamo.reset()


def test_compiled_layers_compile_once_per_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    """A prefill, then rounds of a 3-node tree and a 1-token step over a growing cache: the cache
    length is data and every layer of the stack shares one compile, so each (batch size, bucket,
    last-only) shape compiles once and never again, and fullgraph lets no graph break through."""
    compiles: list[Any] = []

    def counting(graph: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
        compiles.append(graph)
        return graph.forward

    torch._dynamo.reset()
    monkeypatch.setattr(static_pass, "BACKEND", counting)
    lm = TreeLM(load_causal_lm(TARGET), passes="static", compile=True)
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
    # buckets 5, 3 and 1 (the layers see the bucket; what a pass returns is outside them): not once per layer,
    # last-only choice or cache length
    assert len(lm.model.model.layers) == 7 and len(compiles) == 3
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
    graphs = Graphs(enabled=False)
    first, second = torch.zeros(2), torch.zeros(2)
    graphs.bind(first)
    graphs.captured["shape"] = None  # type: ignore[assignment]  # stands for a captured graph
    graphs.bind(first)
    assert "shape" in graphs.captured
    graphs.bind(second)
    assert graphs.captured == {} and graphs.anchor is second
