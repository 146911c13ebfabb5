"""`algorithm.confidence_stop`: a round's path ends after a token whose draft probability is below the
threshold in every row (`drafting.iid.sample_iid_paths`); the engine verifies, records and prices the
length drafted; the config refuses it in one line where its certificate does not reach; a point shows it.
Its law is certified in tests/verify/test_adaptive_certificates.py."""

from __future__ import annotations

from dataclasses import asdict, replace

import pytest
import torch

from speculab.config import ConfigError, validate
from speculab.core.adaptive import AdaptiveLength
from speculab.core.engine import decode
from speculab.drafting.iid import sample_iid_paths
from speculab.drafting.sampling import SamplingParams
from speculab.drafting.tree import DraftTree
from speculab.registry import get_verifier
from speculab.results.figures import adaptive_figures
from speculab.results.point import PointShape
from speculab.tracking.runs import flat_params
from support.configs import load
from support.engine import TOY_PROMPTS, settings, toy_roles


class Table:
    """A draft whose next-token law is one row of `table` by depth, whatever the tokens: [L, V] probabilities."""

    def __init__(self, table: torch.Tensor) -> None:
        self.table, self.depth = table, 0

    def extend(self, nodes: DraftTree) -> torch.Tensor:  # logits [B, K, V]
        self.depth += 1
        B, K = nodes.tokens.shape
        return self.table[self.depth].log().expand(B, K, -1)


def test_a_path_ends_after_the_first_unconfident_token_and_no_pass_runs_after_it() -> None:
    # depth 0 and 1 are sure of token 0; depth 2 spreads its mass (no token above 0.5); depth 3 is never drafted
    table = torch.tensor([[1.0, 0, 0], [1.0, 0, 0], [0.4, 0.3, 0.3], [1.0, 0, 0]]).clamp_min(1e-9)
    lm = Table(table)
    u = torch.full((2, 1, 4), 0.5)
    sampling = SamplingParams(1.0, confidence_stop=0.5)
    proposal = sample_iid_paths(lm, torch.tensor([1, 2]), table[0].log().expand(2, -1), 1, 4, sampling, u)
    assert proposal.paths is not None and proposal.q is not None
    assert proposal.paths.shape == (2, 1, 3) and proposal.q.shape == (2, 1, 3, 3)
    assert lm.depth == 2  # the pass after the unconfident token is not run
    full = sample_iid_paths(Table(table), torch.tensor([1, 2]), table[0].log().expand(2, -1), 1, 4, SamplingParams(), u)
    assert full.paths is not None and full.paths.shape == (2, 1, 4)
    assert torch.equal(full.paths[:, :, :3], proposal.paths)  # the same draws, cut


def test_the_engine_verifies_records_and_tables_the_length_each_round_drafted() -> None:
    s = settings(K=1, L=6, T=1.0, batch=2, max_new=24)
    stopped = replace(s, sampling=SamplingParams(1.0, confidence_stop=0.25))
    target, drafter = toy_roles(3)
    run = decode(target, drafter, get_verifier("block"), TOY_PROMPTS, stopped)
    lengths = {r.length for r in run.rounds}
    assert len(lengths) >= 2 and max(lengths) <= 6 and min(lengths) >= 1
    assert all(tau <= n for p in run.prompts for tau, n in zip(p.accepted, p.drafted))
    assert all(r.tree_nodes == [n + 1 for n in [r.length] * r.rows] for r in run.rounds)
    figures = adaptive_figures(run)
    assert sum(figures[f"adaptive_length_{n}"] for n in range(7)) == pytest.approx(1.0)
    assert "adaptive_calibration" not in figures  # no policy predicted anything
    assert adaptive_figures(decode(target, drafter, get_verifier("block"), TOY_PROMPTS, s)) == {}
    policy = AdaptiveLength(6)  # under L=auto the policy learns the lengths the stop left
    auto = decode(target, drafter, get_verifier("token"), TOY_PROMPTS, replace(stopped, adaptive=True), policy=policy)
    assert {r.length for r in auto.rounds} <= set(range(7)) and "adaptive_calibration" in adaptive_figures(auto)


def test_a_stop_is_part_of_the_points_name_and_its_logged_params(weightless_pair_overrides) -> None:
    from speculab.config import resolve

    cfg = resolve(load([*weightless_pair_overrides, "algorithm.confidence_stop=0.3"])).cfg
    shape = PointShape.of(cfg)
    assert "block K=1 L=4 stop=0.3 T=1.0" in shape.name and shape.columns()["stop"] == 0.3
    params = {key: str(value) for key, value in flat_params(asdict(cfg)).items()}
    assert PointShape.from_params(params) == shape


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        (["algorithm.confidence_stop=1.5"], "algorithm.confidence_stop=1.5: must be 0 (off) or a number in (0, 1)"),
        (
            ["algorithm=greedy_block", "algorithm.confidence_stop=0.3"],
            "algorithm.confidence_stop: stops one sampled path (algorithm=token/block, algorithm.K=1, drafter=iid, "
            "drafter.ahead=off, no algorithm.compare, sampling.temperature > 0); got algorithm=greedy_block",
        ),
        (["algorithm.confidence_stop=0.3", "sampling.temperature=0"], "got sampling.temperature=0"),
        (["algorithm=gbv", "algorithm.K=2", "algorithm.confidence_stop=0.3"], "got algorithm=gbv algorithm.K=2"),
    ],
)
def test_a_stop_is_refused_in_one_line_where_it_cannot_serve(weightless_pair_overrides, overrides, line) -> None:
    with pytest.raises(ConfigError) as err:
        validate(load([*weightless_pair_overrides, *overrides]))
    assert line in str(err.value)
    assert sum("algorithm.confidence_stop" in text for text in str(err.value).splitlines()) == 1
