"""`sweep.contrast`: the comparisons a researcher names, refused in one line where they cannot be made, and
answered in one table by a real sweep on the tiny pair: GBV against block at each L and T."""

from __future__ import annotations

from pathlib import Path

import pytest

from speculab.config.answer import contrast_errors
from support.cli import speculab


def test_a_contrast_needs_a_key_the_sweep_varies() -> None:
    assert contrast_errors(None, [], sweeping=False) == []
    assert contrast_errors("algorithm", ["algorithm", "algorithm.L"], sweeping=True) == []
    (lone,) = contrast_errors("algorithm", [], sweeping=False)
    assert lone == "sweep.contrast=algorithm: compares the points of a sweep; run with -m and sweep algorithm"
    (held,) = contrast_errors("algorithm.K", ["algorithm.L"], sweeping=True)
    assert held.startswith("sweep.contrast=algorithm.K: not a key this sweep varies") and "algorithm.L" in held


def test_a_contrast_that_cannot_be_made_is_refused_before_anything_runs(tmp_path: Path) -> None:
    single = speculab(["sweep.contrast=algorithm", "tracking=none", "runtime=inline"], tmp_path)
    assert single.returncode == 2 and "sweep.contrast=algorithm: compares the points of a sweep" in single.stderr
    sweep = speculab(
        [
            "-m",
            "algorithm.L=4,8",
            "sweep.contrast=algorithm",
            "tracking=none",
            "runtime=inline",
            f"hydra.sweep.dir={tmp_path / 's'}",
        ],
        tmp_path,
    )
    assert sweep.returncode == 2 and "not a key this sweep varies over two values or more" in sweep.stderr
    assert not (tmp_path / "s").exists()


@pytest.mark.slow
def test_a_contrast_sweep_prints_gbv_against_block_at_each_L_and_T(tmp_path: Path) -> None:
    """The answers issue's sweep, at a size a test affords (8 points, 12 prompts of 8 tokens, one timed
    repetition, no generate): one table of four comparisons, each with its ratio, level and verdict."""
    args = [
        "-m",
        "algorithm=gbv,block",
        "algorithm.L=4,8",
        "sampling.temperature=0,1",
        "sweep.contrast=algorithm",
        "runtime=inline",
        "dataset.num_prompts=12",
        "sampling.max_new_tokens=8",
        "measure.repeats=1",
        "baseline_hf=false",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    ]
    result = speculab(args, tmp_path)
    assert result.returncode == 0, result.stderr
    table = result.stdout[result.stdout.index("contrasts on speedup_vs_ar") :]
    for L in (4, 8):
        for T in (0, 1):
            assert f"algorithm.L={L} sampling.temperature={T}: gbv / block" in table
    assert table.count("adjusted p") == 4
    assert "the sweep's verdicts, 19 tests, 5% family-wise" in table  # 7 with the best, 8 baselines, 4 contrasts
