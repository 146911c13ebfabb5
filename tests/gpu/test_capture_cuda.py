"""CUDA graphs of the models' fixed-shape passes (`models.static_pass`, `model.capture`) on one GPU:
captured passes give the eager passes' logits and features, a batch decodes the same tokens
(graphs captured once per shape, then replayed round after round), with and without inductor's
compiled layers inside the graphs (`model.compile`), phases are timed with CUDA
events and no synchronise, and the CLI runs with capture on (the default on CUDA) and off and
logs the round's host synchronisations."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from speculab.drafting.tree import DraftTree
from speculab.models.hf import TreeLM, load_causal_lm
from support.cli import file_store, speculab
from support.engine import tiny_pair_batch
from support.models import TINY_PAIR

pytestmark = pytest.mark.gpu

TARGET = str(TINY_PAIR / "target")
CAPTURE_FILE = str(Path("torch", "cuda", "graphs.py"))


@pytest.mark.parametrize("compile", [False, True])
@torch.inference_mode()
def test_captured_tree_passes_give_the_eager_logits_and_features(compile: bool) -> None:
    """On a GPU: the target's tree passes (a tree scored, its commit, a feed) replayed from CUDA graphs give
    the eager passes' logits and features to 1e-4, round after round at the same shapes, captured as they
    are and with inductor's compiled layers inside the graphs (`model.compile`: compile=True was added
    2026-11-28 and has not yet run on a GPU)."""
    model = load_causal_lm(TARGET, device="cuda")
    graphs, eager = TreeLM(model, (0, 1), "graphs", compile), TreeLM(model, (0, 1))
    gen = torch.Generator().manual_seed(0)
    for lm in (graphs, eager):
        lm.reset(2, 128)
        lm.feed([[5, 6, 7, 8, 9], [10, 11]])
    for _ in range(5):  # the same shapes again: replays of the graphs captured in round 1
        paths = torch.randint(3, 9, (2, 3, 4), generator=gen)
        tree = DraftTree.from_paths(torch.tensor([12, 13]), paths)
        keep = tree.path_nodes[:, 0, :3]  # [2, 3]: the root and two nodes of the first path
        out = []
        for lm in (graphs, eager):
            out.append((lm.extend(tree), lm.forest_features))
            lm.commit(keep)
            out.append((lm.feed([[14], [15]]), lm.features))
        for (a, fa), (b, fb) in zip(out[: len(out) // 2], out[len(out) // 2 :], strict=True):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
            if fa is not None and fb is not None:
                torch.testing.assert_close(fa, fb, atol=1e-4, rtol=1e-4)
    assert graphs.static is not None and graphs.static.graphs.captured  # replayed from CUDA graphs


@pytest.mark.parametrize(
    ("drafter", "temperature", "compile"),
    [("draft", 0.0, False), ("draft", 1.0, False), ("dflash", 0.0, False), ("draft", 0.0, True), ("dflash", 0.0, True)],
)
def test_captured_passes_decode_the_eager_tokens(drafter: str, temperature: float, compile: bool) -> None:
    """On a GPU: the tiny pair's batch (holes, repacks, rows leaving) decoded with its passes replayed from
    CUDA graphs, GBV on the draft at T = 0 and 1 and DDTree on DFlash at T = 0, gives the eager passes'
    tokens on the same GPU (the compile=True rows, inductor's layers inside the graphs, were added
    2026-11-28 and have not yet run on a GPU)."""
    captured, target, _ = tiny_pair_batch("graphs", drafter, temperature, device="cuda", compile=compile)
    assert target.lm.static is not None and target.lm.static.shapes
    eager = tiny_pair_batch("eager", drafter, temperature, device="cuda")[0]
    assert [p.tokens for p in captured.prompts] == [p.tokens for p in eager.prompts]


def test_the_round_never_waits_for_the_gpu_to_time_a_phase(monkeypatch: pytest.MonkeyPatch) -> None:
    """Phases are CUDA events read once the run is over: no torch.cuda.synchronize inside the loop."""
    synchronised: list[str] = []
    real = torch.cuda.synchronize

    def counted(*args: object) -> None:
        caller = sys._getframe(1).f_code.co_filename
        if not caller.endswith(CAPTURE_FILE):  # torch.cuda.graph synchronises once as it captures a shape
            synchronised.append(caller)
        real(*args)

    monkeypatch.setattr(torch.cuda, "synchronize", counted)
    run = tiny_pair_batch("graphs", "draft", 1.0, device="cuda")[0]
    assert synchronised == []
    assert all(r.time_target_s > 0 and r.time_draft_s > 0 and r.time_verify_s > 0 for r in run.rounds)


@pytest.mark.parametrize(("capture", "compile"), [("true", "false"), ("false", "false"), ("true", "true")])
def test_the_cli_runs_with_capture_on_and_off_and_logs_host_syncs(tmp_path: Path, capture: str, compile: str) -> None:
    """On a GPU: `speculab` on CUDA, inline, ends 0 with capture on and off, logs both switches, and counts
    the round's host synchronisations on its warm-up: some, and with capture at most 2 (that bound and the
    row with compiled layers were added 2026-11-28 and have not yet run on a GPU)."""
    uri = file_store(tmp_path)
    args = ["runtime=inline", "model.device=cuda", f"model.capture={capture}", f"model.compile={compile}"]
    args.append("dataset.num_prompts=2")
    result = speculab([*args, "sampling.max_new_tokens=16", f"tracking.uri={uri}"], tmp_path)
    assert result.returncode == 0, result.stderr
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("speculab").experiment_id])
    assert run.data.params["model.capture"] == capture.title()  # MLflow logs str(bool)
    assert run.data.params["model.compile"] == compile.title()
    syncs = run.data.metrics["runtime/host_syncs_per_round"]  # counted on the warm-up
    assert syncs > 0
    if capture == "true":  # the round's one read, and a retain's (tests/test_host_reads.py counts them on the CPU)
        assert syncs <= 2
