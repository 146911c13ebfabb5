"""At most 2 host reads a decode round, counted on the CPU with the code a GPU runs.

`speculab.device.hostreads.device_form` makes the CPU take the static-shape forms a GPU takes (the level
tree builder, the verifiers' fixed-shape walks, no trimming of padding by value, the tree mask
for every pass); `support.host_reads` counts what reads a value on the host. On CUDA
`runtime/host_syncs_per_round` counts the same reads with torch's sync debug mode
(tests/gpu/test_capture_cuda.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import traceback
from collections import Counter
from pathlib import Path

import pytest
import torch

import speculab.core.engine as engine
from speculab.core.engine import decode
from speculab.device.hostreads import device_form, reads_free
from speculab.drafting.tree import DraftTree
from speculab.registry import PATH_ALGORITHMS, get_verifier
from speculab.verify.verdict import Verdict
from support.engine import TOY_PROMPTS, settings, tiny_pair_batch, toy_roles
from support.host_reads import counting_host_reads, site_of

REPO = Path(__file__).resolve().parents[1]

READ = "read_round"  # the round's one read (`core.engine.read_round`)


def _counted_rounds(monkeypatch: pytest.MonkeyPatch) -> list[Counter[str]]:
    """Each round's host reads by site, from the next decodes on."""
    rounds: list[Counter[str]] = []
    plain = engine._round

    def counted(*args: object, **kwargs: object) -> object:
        with counting_host_reads(monkeypatch) as sites:
            out = plain(*args, **kwargs)  # type: ignore[arg-type]
        rounds.append(sites)
        return out

    monkeypatch.setattr(engine, "_round", counted)
    return rounds


@pytest.mark.parametrize("drafter", ["dflash", "draft"])  # DDTree on the DFlash drafter; GBV over K = 2 paths
def test_a_round_reads_the_host_at_most_twice_and_decodes_the_cpu_tokens(
    drafter: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain, _, _ = tiny_pair_batch("static", drafter, 1.0)
    rounds = _counted_rounds(monkeypatch)
    with device_form():
        on_device, _, _ = tiny_pair_batch("static", drafter, 1.0)
    assert [p.tokens for p in on_device.prompts] == [p.tokens for p in plain.prompts]
    assert len(rounds) == len(on_device.rounds)
    _one_read_a_round(rounds)
    assert any(len(sites) > 1 for sites in rounds)  # rows did leave


def _one_read_a_round(rounds: list[Counter[str]]) -> None:
    """Each round reads once, at the engine's read; else only where rows left the batch: a drafter
    reads the row list the engine made on the host (counted here, though on a GPU it waits for nothing)."""
    assert rounds and max(sum(sites.values()) for sites in rounds) <= 2, rounds
    for sites in rounds:
        assert sum(n for site, n in sites.items() if READ in site) == 1
        assert all(site.endswith(" retain") for site in sites if READ not in site), sites


@pytest.mark.parametrize("name", PATH_ALGORITHMS)
def test_every_path_verifier_reads_once_a_round(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rounds = _counted_rounds(monkeypatch)
    target, drafter = toy_roles(1)
    with device_form():
        decode(target, drafter, get_verifier(name), TOY_PROMPTS, settings(K=3, L=3, T=1.0, batch=4, max_new=10))
    _one_read_a_round(rounds)


def test_the_count_sees_the_cpu_forms_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail: the CPU's own forms (heap builder, trimming, chain checks) read many times."""
    rounds = _counted_rounds(monkeypatch)
    tiny_pair_batch("static", "draft", 1.0)
    assert max(sum(sites.values()) for sites in rounds) > 2


def test_each_kind_of_read_is_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    t = torch.arange(6)
    with counting_host_reads(monkeypatch) as sites:
        with torch.inference_mode():
            int(t.max())
            bool((t > 2).any())
        t[0].item()
        t.tolist()
        t.nonzero()
        t[t > 2]
        t.cpu()
        torch.repeat_interleave(t)
        t + 1  # not a read
    assert sum(sites.values()) == 8
    assert torch.Tensor.tolist is torch._C.TensorBase.tolist  # restored


def test_verdict_rows_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    verdict = Verdict.make_dummy([[3, 1], [2], [4, 4, 5]], 3)
    with counting_host_reads(monkeypatch) as sites:
        assert verdict.rows() == [[3, 1], [2], [4, 4, 5]]
    assert sum(sites.values()) == 1


def _ancestors(tree: DraftTree, b: int, n: int) -> set[int]:
    found, m = set(), n
    while m >= 0:
        found.add(m)
        m = int(tree.parents[b, m])
    return found


@pytest.mark.parametrize("K, L", [(1, 1), (3, 4), (4, 9)])
def test_device_form_trees_hold_the_same_nodes_and_ancestors(K: int, L: int) -> None:
    g = torch.Generator().manual_seed(K * 10 + L)
    paths = torch.randint(0, 3, (2, K, L), generator=g)  # a small vocabulary: shared prefixes
    root = torch.tensor([7, 8])
    cpu = DraftTree.from_paths(root, paths)
    with device_form():
        assert not reads_free(paths)
        padded = DraftTree.from_paths(root, paths)
    N = cpu.tokens.shape[1]
    assert padded.tokens.shape[1] == 1 + K * L and not padded.valid[:, N:].any()
    for name in ("tokens", "parents", "depth", "valid"):
        assert torch.equal(getattr(padded, name)[:, :N], getattr(cpu, name))
    assert torch.equal(padded.path_nodes, cpu.path_nodes)
    mask = padded.ancestor_mask()
    for b in range(2):
        for n in range(padded.tokens.shape[1]):
            assert set(mask[b, n].nonzero().flatten().tolist()) == _ancestors(padded, b, n)


def test_a_read_is_filed_under_the_packages_module_in_a_checkout_named_speculab() -> None:
    """`git clone` names the checkout `speculab`: the helper's own frames, under its tests/, are not the package's."""
    package = Path("/home/u/speculab/platform/speculab")
    stack = [
        traceback.FrameSummary("/home/u/speculab/platform/speculab/core/engine.py", 120, "read_round"),
        traceback.FrameSummary("/home/u/speculab/tests/support/host_reads.py", 80, "counted"),
    ]
    assert site_of(stack, package) == "core/engine.py:120 read_round"
    assert site_of(stack[1:], package) == "?"


def test_the_counts_hold_when_run_from_a_checkout_named_speculab(tmp_path: Path) -> None:
    """The suite's own tests of the count, run from a copy of this checkout in a folder named `speculab`."""
    clone = tmp_path / "speculab"
    for part in ("platform", "tests"):
        shutil.copytree(REPO / part, clone / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", clone)
    for part in ("assets", "conf"):  # read, not imported: their paths make no frame
        (clone / part).symlink_to(REPO / part)
    env = {**os.environ, "PYTHONPATH": str(clone / "platform")}
    tests = [
        f"tests/test_host_reads.py::test_every_path_verifier_reads_once_a_round[{name}]" for name in ("token", "gbv")
    ]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q", *tests],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
