"""Shared fixtures: random-weight checkpoints on disk, config checkpoints without weights, and the
Ray cluster of the tests that run model groups in this process.

Helpers that are not fixtures live in `tests/support` (importable as `support.*`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

# Multi-threaded OpenBLAS makes SciPy's L-BFGS-B (global resolution) ~20x slower on 2 busy cores.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pytest
import torch

from support.configs import fake_checkpoint
from support.models import save_random_lm
from support.ray_auth import own_auth

if TYPE_CHECKING:  # imports Ray: only the tests that use the fixtures below pay for it
    from speculab.runtime.groups import GroupPool

# The embedded cluster's CPUs: tests' groups hold 3 at most at once (a TP=2 target and its draft; the
# loop group beside the driver loop's target and draft), one per actor; the spare one lets a restarted
# group start before its old placement group is freed.
RAY_CPUS = 4


@pytest.fixture(scope="session")
def random_llama_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(target, draft) random-weight Llama checkpoints sharing a character tokenizer."""
    root = tmp_path_factory.mktemp("llama")
    return save_random_lm(root / "target", 3, 64, seed=1), save_random_lm(root / "draft", 1, 32, seed=2)


@pytest.fixture
def weightless_pair_overrides(tmp_path: Path) -> list[str]:
    """Overrides naming a target/draft pair of weightless checkpoints with one vocabulary."""
    target = fake_checkpoint(tmp_path / "t", 10, {"a": 0})
    draft = fake_checkpoint(tmp_path / "d", 10, {"a": 0})
    return [f"model.target_path={target}", f"model.draft_path={draft}"]


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[GroupPool]:
    """The pool of this process's model groups, on one embedded Ray cluster for the whole session
    (started once: a few seconds each time otherwise; each pytest-xdist worker is a session with its
    own). Only the session tears Ray down, so no test depends on another to leave or to have left it;
    a CLI run in a subprocess starts its own."""
    from speculab.runtime.groups import POOL
    from speculab.runtime.teardown import teardown

    sized_cluster(POOL)
    yield POOL
    teardown()


def sized_cluster(pool: GroupPool) -> None:
    """Ray on an embedded cluster of `RAY_CPUS`, whoever started Ray in this process first: a test that
    prepares a point in-process starts one of its `cluster.num_cpus` (3 in one of them), and the pool's
    room arithmetic (`test_group_pool`) then runs short of a CPU."""
    import ray

    from speculab.runtime.ray_actors import connect

    if ray.is_initialized() and ray.cluster_resources().get("CPU") != RAY_CPUS:
        pool.close_all()
        ray.shutdown()
    connect(None, RAY_CPUS)


def emptied(pool: GroupPool) -> Iterator[GroupPool]:
    """`pool` with no group open, on the session's cluster of `RAY_CPUS`, and none once its user is done,
    whatever that user did (killed actors, restarted a group): open groups hold cluster CPUs that a later
    test's actors would wait for (then fail), and loads that `model_loads` would count again."""
    sized_cluster(pool)
    pool.close_all()
    yield pool
    pool.close_all()


@pytest.fixture
def ray_pool(ray_cluster: GroupPool) -> Iterator[GroupPool]:
    """The session's pool, empty for this test."""
    yield from emptied(ray_cluster)


@pytest.fixture(scope="module")
def module_ray_pool(ray_cluster: GroupPool) -> Iterator[GroupPool]:
    """The session's pool, empty for this module: its tests share the groups they load."""
    yield from emptied(ray_cluster)


def pytest_addoption(parser: pytest.Parser) -> None:
    # Order dependence check: `pytest --reverse-order` runs the collected tests last to first.
    parser.addoption("--reverse-order", action="store_true", help="run the collected tests in reverse order")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`gpu` tests need CUDA: skipped, saying so, where torch finds none (CI has no GPU).
    With `--reverse-order`, the tests run last to first: a test that passes only after another fails."""
    if config.getoption("reverse_order"):
        items.reverse()
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
    they started, and Ray's exit hook stops a local cluster a test started, so nothing is left running.
    Ray's auth settings are the suite's own (`support.ray_auth`), set before collection reads them."""
    signal.signal(signal.SIGTERM, interrupted)
    own_auth()


@pytest.fixture
def sweeps() -> Iterator[Callable[[list[str], Path], subprocess.Popen]]:
    """Starts sweeps in children whose SIGINT is the default even when this suite runs with it ignored
    (as a shell's `&` does without job control), so that Python there turns it into KeyboardInterrupt;
    whatever of them still runs when the test ends, passed or failed, is killed."""
    started: list[subprocess.Popen] = []

    def launch(args: list[str], cwd: Path) -> subprocess.Popen:
        sweep = subprocess.Popen(
            [sys.executable, "-m", "speculab.launch.cli", *args],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        started.append(sweep)
        return sweep

    yield launch
    for sweep in started:
        if sweep.poll() is None:
            sweep.kill()
            sweep.communicate()
