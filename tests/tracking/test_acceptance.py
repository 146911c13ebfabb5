"""Acceptance by depth (issue 38): alpha_j, the overlap beside it and the accepted-length histogram,
per run from the engine's records, and per sweep as one plot and a table."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
import torch

from speculab.core.engine import DecodeSettings, decode
from speculab.core.evidence import left_chain
from speculab.core.records import RunResult
from speculab.drafting.ddtree import TreeDrafter, tree_builder
from speculab.drafting.sampling import SamplingParams
from speculab.models import DraftModel, LMSpec, TreeTarget
from speculab.models.dflash_layout import read_layout
from speculab.registry import get_verifier
from speculab.results.figures import run_figures
from speculab.results.names import Figures, flatten, is_acceptance, mlflow_name, parse
from speculab.results.point import PointResult, PointShape
from speculab.show.acceptance import depth_csv, depth_figure, depth_markdown, depth_rows, length_figure
from speculab.show.summary import acceptance_rows
from speculab.stats import Estimate
from speculab.tracking.sweep_run import log_acceptance
from support.engine import TOY_PROMPTS, settings, toy_roles
from support.models import TINY_PAIR

L = 4


@pytest.fixture(scope="module")
def tiny_prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(5)
    return [torch.randint(3, 60, (n,), generator=g).tolist() for n in (6, 19, 12, 9)]


def tiny_run(algorithm: str, prompts: list[list[int]]) -> RunResult:
    """The tiny pair at T = 1 (acceptance well inside (0, 1)): four prompts of 16 new tokens in batches
    of 2, L = 4; K = 2 for GBV, a 16-node DDTree (or its chain) on the DFlash drafter."""
    target_path, draft_path, dflash = (str(TINY_PAIR / name) for name in ("target", "draft", "dflash"))
    K, verifier = 1, algorithm
    if algorithm.startswith("ddtree"):
        layers = read_layout(dflash).target_layer_ids
        target = TreeTarget(LMSpec("hf", target_path, feature_layers=layers))
        build = tree_builder("chain" if algorithm == "ddtree_chain" else "best_first", 16)
        drafter: Any = TreeDrafter(DraftModel(LMSpec("dflash", dflash, target_path=target_path)), build)
        verifier = "ddtree"
    else:
        target, drafter = TreeTarget(LMSpec("hf", target_path)), DraftModel(LMSpec("hf", draft_path))
        K = 2 if algorithm == "gbv" else 1
    return decode(target, drafter, get_verifier(verifier), prompts, DecodeSettings(K, L, SamplingParams(1.0), 16, 2))


@pytest.mark.parametrize("algorithm", ["token", "block", "gbv", "ddtree", "ddtree_chain"])
def test_alpha_and_the_histogram_are_logged_and_match_a_count_of_the_round_records(
    algorithm: str, tiny_prompts: list[list[int]]
) -> None:
    run = tiny_run(algorithm, tiny_prompts)
    figures = run_figures(run)
    logged = flatten(figures)
    taus = [tau for r in run.rounds for tau in r.accepted]  # per round record, not per prompt as logged
    assert 0 < sum(taus) < L * len(taus)  # neither nothing nor everything accepted: the test has teeth
    for j in range(1, L + 1):
        reached, accepted = sum(t >= j - 1 for t in taus), sum(t >= j for t in taus)
        assert logged[f"accept/alpha_{j}"] == pytest.approx(accepted / reached, rel=1e-4) if reached else True
        alpha = figures[f"alpha_{j}"]
        assert math.isnan(alpha.value) or (not alpha.has_interval and alpha.has_se and alpha.n == len(tiny_prompts))
    for n in range(L + 1):
        assert logged[f"accept/hist_{n}"] == pytest.approx(sum(t == n for t in taus) / len(taus), rel=1e-4)
    # the field's definitions: vLLM's per-position rate (every round the denominator) and acceptance length
    positions = [logged[f"accept/position_{j}"] for j in range(1, L + 1)]
    assert positions == pytest.approx([sum(t >= j for t in taus) / len(taus) for j in range(1, L + 1)], rel=1e-4)
    assert sum(positions) == pytest.approx(logged["accepted_mean"], rel=1e-4)  # E[tau] = sum_j P(tau >= j)
    assert logged["acceptance_length"] == pytest.approx(1 + logged["accepted_mean"], rel=1e-4)
    assert figures["acceptance_length"].se == pytest.approx(figures["accepted_mean"].se)
    assert f"accept/alpha_{L + 1}" not in logged and f"accept/hist_{L + 1}" not in logged
    # overlap_1 comes from the prompts' records, first/overlap_mean from the rounds': every round reaches depth 1
    assert figures["overlap_1"].value == pytest.approx(figures["first_overlap_mean"].value)
    if algorithm == "ddtree":  # a round that accepted nothing cannot have left the chain; some side branch won
        assert (
            0.0
            < logged["accept/left_chain"]
            <= logged["accept/hist_1"] + sum(logged[f"accept/hist_{n}"] for n in range(2, L + 1))
        )
    elif algorithm == "ddtree_chain":
        assert logged["accept/left_chain"] == 0.0  # a chain has no side branch
    else:
        assert "accept/left_chain" not in logged


def test_token_verification_of_one_path_accepts_each_depth_with_its_overlap() -> None:
    """K = 1, T = 1: the depth-j token is accepted with probability sum_x min(p_j, q_j) given its
    context, so alpha_j and the mean overlap of the rounds that reached depth j agree at every
    depth within their intervals (a misaligned p or q, one depth off, would not)."""
    target, drafter = toy_roles(3)
    prompts = TOY_PROMPTS * 12
    run = decode(target, drafter, get_verifier("token"), prompts, settings(T=1.0, K=1, L=L, max_new=60, batch=12))
    figures = run_figures(run)
    for j in range(1, L + 1):
        alpha, overlap = figures[f"alpha_{j}"], figures[f"overlap_{j}"]
        spreads = [(e.high - e.low) / (2 * 1.96) for e in (alpha, overlap)]  # each interval's standard error
        assert max(spreads) < 0.06, (j, alpha, overlap)  # enough rounds reach every depth to tell
        assert abs(alpha.value - overlap.value) <= 3 * math.hypot(*spreads), (j, alpha, overlap)
    assert 0.2 < figures["overlap_1"].value < 0.9


def test_left_chain_is_a_side_branch_among_the_accepted_tokens_only() -> None:
    q = torch.zeros(3, 3, 10)
    q[:, torch.arange(3), torch.tensor([5, 7, 9])] = 1.0  # the chain: 5, 7, 9 in every row
    tokens = torch.tensor([[5, 7, 2, -1], [5, 8, 3, -1], [5, 8, -1, -1]])  # accepted tokens, then the extra one
    tau = torch.tensor([2, 2, 1])
    assert left_chain(tokens, tau, q).tolist() == [False, True, False]  # row 3's 8 is its extra token


def test_acceptance_names_follow_the_depth() -> None:
    keys = ("alpha_12", "overlap_2", "hist_0", "left_chain")
    assert [mlflow_name(k) for k in keys] == [
        "accept/alpha_12",
        "accept/overlap_2",
        "accept/hist_0",
        "accept/left_chain",
    ]
    assert not any(is_acceptance(k) for k in ("alpha_", "alpha_x", "hist_0_ci_low", "accepted_mean"))
    logged = flatten(Figures({"alpha_1": Estimate(0.8, se=0.05), "hist_0": 0.2, "block_efficiency": 2.0}))
    assert logged == {"block_efficiency": 2.0, "accept/alpha_1": 0.8, "accept/alpha_1_se": 0.05, "accept/hist_0": 0.2}
    back = parse(logged)  # a resumed point keeps its curve, standard errors included
    assert (back["alpha_1"].se, back["hist_0"].value) == (0.05, 0.2)


CURVE = Figures(
    {
        "alpha_1": Estimate(0.8, se=0.05),
        "alpha_2": Estimate(0.6, se=0.1),
        "overlap_1": 0.78,
        "overlap_2": 0.55,
        "hist_0": 0.2,
        "hist_1": 0.3,
        "hist_2": 0.5,
    }
)


def scaled(figures: Figures, factor: float) -> Figures:
    return Figures({k: Estimate(e.value * factor, se=e.se * factor) for k, e in figures.items()})


def test_the_summary_shows_alpha_in_one_compact_line() -> None:
    rows = dict(acceptance_rows(CURVE | {"left_chain": 0.25}))
    assert rows == {
        "alpha (depth 1..2)": "0.80 0.60",
        "overlap (depth 1..2)": "0.78 0.55",
        "accepted-length share (0..2)": "0.20 0.30 0.50",
        "left_chain": "0.25",
    }
    assert acceptance_rows(Figures({"accepted_mean": 0.0})) == []  # the baseline drafts nothing
    shallow = Figures({"alpha_1": 0.3, "alpha_2": 0.0, "alpha_3": math.nan, "hist_0": 0.7, "hist_1": 0.3})
    assert dict(acceptance_rows(shallow | {"hist_2": 0.0, "hist_3": 0.0})) == {  # a line stops where no round reached
        "alpha (depth 1..2 of 3)": "0.30 0.00",
        "accepted-length share (0..1 of 3)": "0.70 0.30",
    }


def test_the_sweep_table_lines_up_points_of_different_lengths() -> None:
    short = Figures({"alpha_1": 0.9, "hist_0": 0.1, "hist_1": 0.9})
    rows = depth_rows({"L=2": CURVE, "L=1": short})
    assert [(r["point"], r["figure"]) for r in rows][:2] == [("L=2", "alpha"), ("L=2", "alpha se")]
    assert list(rows[0]) == ["point", "figure", "0", "1", "2"]
    assert rows[0]["1"] == 0.8 and rows[0]["0"] == "" and next(r for r in rows if r["point"] == "L=1")["2"] == ""
    assert rows[1]["2"] == 0.1  # alpha_2's standard error
    assert depth_csv({"L=2": CURVE}).splitlines()[0] == "point,figure,0,1,2"
    text = depth_markdown({"L=2": CURVE, "baseline": Figures()})
    assert "| L=2 | alpha | 0.800 ± 0.050 | 0.600 ± 0.100 |" in text and "baseline" not in text
    assert depth_figure({"baseline": Figures()}) is None and length_figure({}) is None
    unreached = CURVE | {"alpha_3": math.nan, "overlap_3": math.nan, "hist_3": 0.0}
    assert "| point | figure | j=1 | j=2 |" in depth_markdown({"L=3": unreached})  # nothing past the deepest reached


class Recorder:
    """A parent run that keeps what is logged to it."""

    def __init__(self) -> None:
        self.artifacts: dict[str, Any] = {}

    def log_figure(self, figure: Any, artifact: str) -> None:
        self.artifacts[artifact] = figure

    def log_text(self, text: str, artifact: str) -> None:
        self.artifacts[artifact] = text


def test_the_sweep_parent_gets_every_points_curve_as_one_plot_and_a_table() -> None:
    parent = Recorder()
    shape = PointShape("gbv", None, 1, 2, None, None, 1.0, "iid", "humaneval", 3, "tiny-pycode", 0, 64, 1, 0)
    points = [PointResult(replace(shape, K=k), figures) for k, figures in ((1, CURVE), (2, scaled(CURVE, 0.9)))]
    log_acceptance(parent, points)  # type: ignore[arg-type]
    logged = parent.artifacts
    assert set(logged) == {"acceptance_by_depth.png", "acceptance_by_depth.md", "acceptance_by_depth.csv"}
    axes = logged["acceptance_by_depth.png"].axes[0]
    assert [t.get_text() for t in axes.get_legend().get_texts()] == ["gbv K=1 L=2 T=1.0", "gbv K=2 L=2 T=1.0"]
    assert len(axes.collections) == 2  # one interval band per point
    assert "| gbv K=2 L=2 T=1.0 | alpha | 0.720 ± 0.045 |" in logged["acceptance_by_depth.md"]


def test_twelve_points_get_a_panel_each_and_four_share_one() -> None:
    """A parent's plot stays readable: up to four curves with their bands on one axes, beyond that a
    panel per point (shared axes, each titled with its point), none left empty but the grid's tail."""
    curves = {f"gbv K={k} L={L_}": CURVE for k in (1, 2, 3, 4) for L_ in (8, 16, 24)}
    figure = depth_figure(curves)
    assert figure is not None
    visible = [axes for axes in figure.axes if axes.get_visible()]
    assert len(visible) == 12 and {axes.get_title() for axes in visible} == set(curves)
    few = depth_figure(dict(list(curves.items())[:4]))
    assert few is not None and len(few.axes) == 1 and len(few.axes[0].get_legend().get_texts()) == 4
