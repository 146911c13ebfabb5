"""A point's console summary (`speculab.show.summary`): the headline rows first, whole names, a
sentence per speedup with its verdict, and everything shown also in the run's log."""

from __future__ import annotations

import io
import logging
from dataclasses import replace

import numpy as np
from rich.console import Console

from speculab.results.names import HEADLINE, Figures
from speculab.results.point import PointResult, PointShape
from speculab.show.console import plain
from speculab.show.summary import (
    SUMMARY_FILE,
    headline_table,
    print_summary,
    speedup_verdicts,
    summary_rows,
    summary_table,
)
from speculab.stats import Estimate
from support.sweeps import QUIET, draw_units, point, truth

FIGURES = Figures(
    {
        "block_efficiency": 1.8,
        "tokens_per_s": Estimate(80.0, 75.0, 85.0),
        "speedup_vs_ar": Estimate(0.75, 0.7, 0.8),
        "typical_speedup_vs_ar": Estimate(0.8, 0.7, 0.9),
        "speedup_vs_hf": Estimate(1.154, 0.885, 1.316),
        "feature_bytes_per_round": 0.0,
        "first_entropy_target": 5.1,
        "accepted_mean": 1.3,
    }
)
SHAPE = PointShape("block", None, 1, 4, None, None, 1.0, "iid", "humaneval", 8, "tiny-pycode", 0, 64, 1, 0)


def test_the_headline_rows_come_first_in_their_order_then_the_rest_in_the_tables() -> None:
    head, rest = summary_rows(FIGURES)
    assert head == list(HEADLINE) and head[:2] == ["speedup_vs_ar", "typical_speedup_vs_ar"]  # the field's first
    assert rest == ["first_entropy_target", "feature_bytes_per_round"]


def test_every_speedup_is_said_with_its_verdict() -> None:
    rng = np.random.default_rng(0)
    faster = point(rng, draw_units(rng, 16), truth() / 1.5, QUIET, generate=1.0)  # 1.5x both baselines
    lines = speedup_verdicts(faster)
    assert (
        lines[0].startswith("speedup_vs_ar 1.") and "faster than the autoregressive baseline (adjusted p = " in lines[0]
    )
    assert "this run, 2 tests, 5% family-wise" in lines[0]
    compiled = speedup_verdicts(faster, "compiled")[1]  # the baseline named with the form that was timed
    assert "faster than transformers' generate (static cache + torch.compile)" in compiled
    even = point(rng, draw_units(rng, 16), truth(), QUIET)  # truly as fast as autoregressive decoding
    assert "inconclusive against the autoregressive baseline" in speedup_verdicts(even)[0]
    few = point(rng, draw_units(rng, 4), truth() / 1.5, QUIET)
    assert speedup_verdicts(few)[0].endswith(
        "no verdict against the autoregressive baseline, too few to tell: 4 prompts, needs at least 12"
    )
    batched = replace(few, shape=replace(few.shape, batch_size=8))
    assert "4 units (batches of 8 prompts)" in speedup_verdicts(batched)[0]
    old = replace(faster, units=None)  # a run logged before units were kept
    assert "no per-unit measurements kept" in speedup_verdicts(old)[0]


def test_without_a_terminal_names_are_whole_and_nothing_wraps(caplog, capsys, tmp_path) -> None:
    text = plain(summary_table("a title far longer than eighty columns " * 3, FIGURES, {"autoregressive": Figures()}))
    assert "first_entropy_target" in text and "feature_bytes_per_round" in text and "…" not in text
    assert any(len(line) > 80 for line in text.splitlines())  # laid out as wide as it is, not wrapped at 80
    assert "0.75 [0.7, 0.8]" in text  # a figure with its interval, in one cell
    with caplog.at_level(logging.INFO, logger="speculab"):
        whole = print_summary("title", PointResult(SHAPE, FIGURES), tmp_path)
    printed = capsys.readouterr().out
    assert "no per-unit measurements kept" in printed and str(tmp_path / SUMMARY_FILE) in printed
    shown = "\n".join(line.rstrip() for line in printed.strip().splitlines())
    assert shown in caplog.text  # the run's log (Hydra's cli.log) holds what was shown
    assert (tmp_path / SUMMARY_FILE).read_text() == whole + "\n" and "first_entropy_target" not in printed


def test_the_console_shows_the_headline_with_what_its_names_mean_and_the_file_every_figure() -> None:
    """The names a newcomer meets first are explained where they are printed: a few words each beside the
    headline rows (the baselines' throughputs beside the point's), 80 columns wide, and each row's meaning
    beside it in the whole table (summary.txt)."""
    rng = np.random.default_rng(3)
    result = point(rng, draw_units(rng, 16), truth() / 1.5, QUIET, generate=1.0)
    result = replace(result, figures=result.figures | {"block_efficiency": 2.9, "accepted_mean": 1.9})
    result = replace(result, autoregressive=Figures({"tokens_per_s": 44.1}), generate=Figures({"tokens_per_s": 41.8}))
    terminal = io.StringIO()
    Console(file=terminal, width=80, no_color=True).print(headline_table("t", result))
    shown = terminal.getvalue()
    assert "tokens/s over the AR loop's" in shown and "tokens kept per target call" in shown
    assert "AR 44.1 · generate 41.8" in shown and "…" not in shown and max(map(len, shown.splitlines())) <= 80
    whole = plain(summary_table("t", FIGURES, {}, meanings=True))
    assert "what it is" in whole and "mean accepted draft tokens (tau) per sequence-round" in whole
