"""Acceptance in the field's formats: per-request acceptance, `speculation_profile.json` out (specdec_bench's
schema 1.0, passing its own checks) and in, figures by prompt category, and the per-request records."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from speculab.core.engine import decode
from speculab.core.measure import Sample
from speculab.core.records import PhaseSeconds, PromptRecord, RoundRecord, RunResult
from speculab.registry import get_verifier
from speculab.results.figures import acceptance_histogram, category_figures, histogram_by_draft_length, run_figures
from speculab.results.names import flatten
from speculab.results.point import PointResult, PointShape
from speculab.results.profile import CHAIN_ANALYTIC, MEASURED_PER_K, Checks, Conditions, profile_of
from speculab.results.profile_read import ProfileError, read_profile
from speculab.results.requests import request_records, requests_of
from support.engine import TOY_PROMPTS, settings, toy_roles

FIXTURE = Path(__file__).parents[1] / "fixtures" / "speculation_profile_tiny.json"


def shape(algorithm: str = "token", K: int = 1, L: int = 3) -> PointShape:
    return PointShape(algorithm, None, K, L, None, None, 1.0, "iid", "jsonl", 16, "toy", 0, 20, 1, 0)


def conditions(s: PointShape) -> Conditions:
    return Conditions(
        "toy", "toy/target", "toy/draft", s.algorithm, s.drafter, s.K, s.L, None, 1.0, 0.0, 0, "jsonl", 16, 0, 20, 1, 1,
        "inline", "test",
    )  # fmt: skip


def toy_run(algorithm: str = "token", K: int = 1, L: int = 3) -> RunResult:
    target, drafter = toy_roles(3)
    return decode(target, drafter, get_verifier(algorithm), TOY_PROMPTS * 4, settings(T=1.0, K=K, L=L, max_new=20))


def profile_and_result(algorithm: str = "token", K: int = 1, L: int = 3):
    run = toy_run(algorithm, K, L)
    result = PointResult(shape(algorithm, K, L), run_figures(run))
    return profile_of(result, acceptance_histogram(run), conditions(result.shape)), result, run


def test_a_runs_profile_passes_the_schemas_checks_and_equals_its_logged_figures() -> None:
    profile, result, run = profile_and_result()
    assert profile.checks.passed and profile.checks.abs_delta < 1e-5
    logged = flatten(result.figures)  # what the run logs to MLflow, at 5 significant digits
    assert profile.marginal_accept_rates == pytest.approx([logged[f"accept/position_{j}"] for j in (1, 2, 3)], 1e-4)
    assert profile.conditional_accept_rates == pytest.approx([logged[f"accept/alpha_{j}"] for j in (1, 2, 3)], 1e-4)
    assert profile.mean_accept_length == pytest.approx(logged["acceptance_length"], 1e-4)
    assert profile.mean_accept_length_per_request == pytest.approx(logged["acceptance_length_per_request"], 1e-4)
    steps = sum(profile.acceptance_length_histogram.values())
    shares = {int(n) - 1: c / steps for n, c in profile.acceptance_length_histogram.items()}
    assert shares == pytest.approx({n: logged[f"accept/hist_{n}"] for n in shares}, 1e-4)
    assert steps == sum(len(p.accepted) for p in run.prompts)
    # token verification of one autoregressive path: a shorter L accepts tau cut there
    assert profile.accept_length_model == CHAIN_ANALYTIC and profile.verification_method == "longest_prefix"
    assert profile.accept_length_by_k["3"] == profile.mean_accept_length
    written = json.loads(profile.to_json())
    assert written["validation"]["mean_consistency"]["passed"] and written["schema_version"] == "1.0"


def test_the_per_request_mean_differs_from_the_per_step_mean_where_prompts_differ() -> None:
    """Two prompts: one accepts 3 a round over 10 rounds, one 0 over 2. Per step the long one dominates."""
    long, short = PromptRecord(0, 4, [0] * 40, [3] * 10), PromptRecord(1, 4, [0] * 2, [0] * 2)
    run = RunResult([long, short], [], 1.0, 0.0, 0.0, length=3)
    figures = run_figures(run_with_rounds(run))
    assert figures["acceptance_length"].value == pytest.approx(1 + 30 / 12)
    assert figures["acceptance_length_per_request"].value == pytest.approx((4.0 + 1.0) / 2)
    assert [r.acceptance_length for r in requests_of(run)] == [4.0, 1.0]


def run_with_rounds(run: RunResult) -> RunResult:
    """The same prompts with one batch round per prompt round (run_figures needs the rounds' costs)."""
    from speculab.core.records import RoundRecord

    rounds = [RoundRecord(1, [4], [tau], [tau + 1], 0.0, 0, 0) for p in run.prompts for tau in p.accepted]
    return replace(run, rounds=rounds)


@pytest.mark.parametrize(("algorithm", "K"), [("gbv", 2), ("specinfer", 3)])
def test_a_multi_path_profile_passes_the_checks_and_says_what_its_vectors_hold(algorithm: str, K: int) -> None:
    profile, _, _ = profile_and_result(algorithm, K)
    assert profile.checks.passed
    assert profile.accept_length_model == MEASURED_PER_K and profile.verification_method == algorithm
    assert "accepted path" in profile.notes["marginal_accept_rates"]
    assert set(profile.accept_length_by_k) == {"3"}  # measured at its own L only


def test_the_checks_catch_a_truncated_vector_and_rising_marginals() -> None:
    assert not Checks.of([0.6, 0.3], 2.5).mean_consistent  # the run reached further than the vector says
    assert Checks.of([0.5, 0.6, 0.2], 2.3).rising_at == [2]


def test_a_profile_another_tool_wrote_is_read_and_checked() -> None:
    found = read_profile(FIXTURE)
    assert found.method == "draft_model" and found.target_model == {"id": "tiny-pycode/target"}
    assert found.marginal_accept_rates == [0.58, 0.32, 0.17, 0.07] and found.checks.passed
    assert found.acceptance_length_histogram["1"] == 420 and found.per_category is not None


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"schema_version": "2.0"}, "`schema_version` must be 1.0"),
        ({"marginal_accept_rates": [0.5, 1.5]}, "`marginal_accept_rates[1]` must be a number in [0.0, 1.0]"),
        ({"mean_accept_length": None}, "a stub holds no measurement"),
        ({"acceptance_length_histogram": {"0": 3}}, "`acceptance_length_histogram` entry '0'"),
        ({"per_category": ["coding"]}, "`per_category` must map a category"),
    ],
)
def test_a_bad_profile_is_refused_naming_the_file_and_the_field(tmp_path: Path, change: dict, said: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(json.loads(FIXTURE.read_text()) | change))
    with pytest.raises(ProfileError, match=r"^" + str(bad).replace("/", ".") + ": .*") as found:
        read_profile(bad)
    assert said in str(found.value) and "\n" not in str(found.value)


def test_prompts_with_a_category_give_figures_by_category() -> None:
    run = toy_run()
    categories = ["code" if i % 2 else "prose" for i in range(len(run.prompts))]
    figures = category_figures(run, categories)
    assert figures.value("category/code/prompts") + figures.value("category/prose/prompts") == len(run.prompts)
    overall = run_figures(run)["acceptance_length"].value
    low, high = sorted(figures.value(f"category/{c}/acceptance_length") for c in ("code", "prose"))
    assert low <= overall <= high  # the pooled figure lies between its parts'
    assert not category_figures(run, [None] * len(run.prompts))
    profile = profile_of(
        PointResult(shape(), run_figures(run) | figures), acceptance_histogram(run), conditions(shape())
    )
    assert profile.per_category is not None and set(profile.per_category) == {"code", "prose"}


def test_request_records_hold_every_prompt_and_repetition_with_its_counts() -> None:
    target, drafter = toy_roles(3)
    units = [
        decode(target, drafter, get_verifier("token"), [p], settings(T=1.0, K=1, L=3, max_new=20)) for p in TOY_PROMPTS
    ]

    def phases(r: int) -> PhaseSeconds:
        return PhaseSeconds(0.01, 0.02 * (r + 1), 0.03, 0.004, 0.001)

    samples = [[Sample(len(u.prompts[0].tokens), 0.1 * r + 0.1, 0.05, phases(r)) for r in range(3)] for u in units]
    records = request_records(units, [f"p{i}" for i in range(4)], ["a", "b", "a", None], samples)
    assert len(records) == 4 * 3
    first = json.loads(records[0].to_json())
    assert first["metadata"] == {"request_id": "p0", "category": "a", "unit": 0, "batch": 1, "repetition": 0}
    metrics = first["metrics"]
    assert metrics["num_spec_steps"]["value"] == len(units[0].prompts[0].accepted)
    assert metrics["num_accepted_draft_tokens"]["value"] == sum(units[0].prompts[0].accepted)
    assert metrics["num_draft_tokens"]["value"] == 3 * len(units[0].prompts[0].accepted)
    assert metrics["unit_wall_s"] == {"value": 0.1, "unit": "s"} and metrics["unit_draft_s"]["value"] == 0.02
    later = json.loads(records[1].to_json())["metrics"]  # repetition 1: its own clock and phases
    assert later["unit_wall_s"]["value"] == pytest.approx(0.2) and later["unit_draft_s"]["value"] == 0.04
    assert histogram_by_draft_length(units[0]) == {3: acceptance_histogram(units[0])}
    unsampled = request_records(units[:1], ["p0"], [None], [])  # failed before timing: the records' own phases
    assert unsampled[0].metrics["unit_draft_s"].value == PhaseSeconds.of(units[0]).draft_s
    assert not math.isnan(metrics["mean_acceptance_length"]["value"])


def test_the_histogram_by_draft_length_reads_each_rounds_own_length() -> None:
    """Under algorithm.L=auto the length varies by round: each length gets the rounds that drafted it, and
    the autoregressive steps (L = 0) none."""

    def round_of(length: int, accepted: list[int]) -> RoundRecord:
        return RoundRecord(len(accepted), [length + 1] * len(accepted), accepted, accepted, 0.0, 0, 0, length=length)

    rounds = [round_of(2, [2, 0]), round_of(4, [4, 1]), round_of(0, [0, 0]), round_of(2, [1, 2])]
    run = RunResult([], rounds, 1.0, 0.0, 0.0, length=4)
    assert histogram_by_draft_length(run) == {2: {0: 1, 1: 1, 2: 2}, 4: {1: 1, 4: 1}}
