"""Shared fixtures: random-weight checkpoints on disk, and config checkpoints without weights.

Helpers that are not fixtures live in `tests/support` (importable as `support.*`)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from types import FrameType

# Multi-threaded OpenBLAS makes SciPy's L-BFGS-B (global resolution) ~20x slower on 2 busy cores.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pytest
import torch

from support.configs import fake_checkpoint
from support.models import save_random_lm


@pytest.fixture(scope="session")
def random_llama_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(target, draft) random-weight Llama checkpoints sharing a character tokenizer."""
    root = tmp_path_factory.mktemp("llama")
    return save_random_lm(root / "target", 3, 64, seed=1), save_random_lm(root / "draft", 1, 32, seed=2)


@pytest.fixture
def pair(tmp_path: Path) -> list[str]:
    """Overrides naming a target/draft pair of weightless checkpoints with one vocabulary."""
    target = fake_checkpoint(tmp_path / "t", 10, {"a": 0})
    draft = fake_checkpoint(tmp_path / "d", 10, {"a": 0})
    return [f"model.target_path={target}", f"model.draft_path={draft}"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`gpu` tests need CUDA: skipped, saying so, where torch finds none (CI has no GPU)."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False): run `make test-gpu` on one")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def interrupted(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    """A suite stopped by SIGTERM (a CI timeout, `kill`) unwinds as Ctrl-C does: fixtures stop the servers
    they started, and Ray's exit hook stops a local cluster a test started, so nothing is left running."""
    signal.signal(signal.SIGTERM, interrupted)
