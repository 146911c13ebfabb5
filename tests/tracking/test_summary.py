"""A point's console summary (`speculab.tracking.summary`): the headline rows first, whole names, a
sentence per speedup interval, and everything shown also in the run's log."""

from __future__ import annotations

import logging

from speculab.results.names import Figures
from speculab.results.point import PointResult, PointShape
from speculab.stats import Estimate
from speculab.tracking.console import plain
from speculab.tracking.summary import GLOSSARY, print_summary, speedup_verdicts, summary_rows, summary_table

FIGURES = Figures(
    {
        "block_efficiency": 1.8,
        "tokens_per_s": Estimate(80.0, 75.0, 85.0),
        "speedup_vs_ar": Estimate(0.75, 0.7, 0.8),
        "speedup_vs_hf": Estimate(1.154, 0.885, 1.316),
        "feature_bytes_per_round": 0.0,
        "first_entropy_target": 5.1,
        "accepted_mean": 1.3,
    }
)
SHAPE = PointShape("block", None, 1, 4, None, None, 1.0, "iid", "humaneval", 8, "tiny-pycode", 0, 64, 1, 0)


def test_the_headline_rows_come_first_in_their_order_then_the_rest_in_the_tables() -> None:
    head, rest = summary_rows(FIGURES)
    assert head == ["speedup_vs_ar", "speedup_vs_hf", "tokens_per_s", "block_efficiency", "accepted_mean"]
    assert rest == ["first_entropy_target", "feature_bytes_per_round"]


def test_every_speedup_interval_is_said_in_words() -> None:
    faster = FIGURES | {"speedup_vs_ar": Estimate(1.5, 1.2, 1.7)}
    assert speedup_verdicts(FIGURES) == [
        "speedup_vs_ar 0.75 [0.7, 0.8]: slower than the autoregressive baseline",
        "speedup_vs_hf 1.154 [0.885, 1.316]: not distinguishable from transformers' generate (eager, dynamic cache) "
        "(the interval includes 1)",
    ]
    compiled = speedup_verdicts(FIGURES, "compiled")[1]  # the baseline named with the form that was timed
    assert "transformers' generate (static cache + torch.compile)" in compiled
    assert speedup_verdicts(faster)[0].endswith("faster than the autoregressive baseline")
    too_few = FIGURES | {"speedup_vs_hf": Estimate(1.154, n=4)}  # no interval below six prompts: no verdict
    assert speedup_verdicts(too_few)[1] == "speedup_vs_hf 1.154: too few prompts to tell (n = 4, needs at least 6)"


def test_without_a_terminal_names_are_whole_and_nothing_wraps(caplog, capsys) -> None:
    text = plain(summary_table("a title far longer than eighty columns " * 3, FIGURES, {"autoregressive": Figures()}))
    assert "first_entropy_target" in text and "feature_bytes_per_round" in text and "…" not in text
    assert any(len(line) > 80 for line in text.splitlines())  # laid out as wide as it is, not wrapped at 80
    assert "0.75 [0.7, 0.8]" in text  # a figure with its interval, in one cell
    with caplog.at_level(logging.INFO, logger="speculab"):
        print_summary("title", PointResult(SHAPE, FIGURES))
    printed = capsys.readouterr().out
    assert "not distinguishable from transformers' generate" in printed and GLOSSARY in printed
    assert printed.strip() in caplog.text  # the run's log (Hydra's cli.log) holds what was shown
